"""SNAP's correlation across connections (§2.3) on the testbed: does the ACC name the resource a
problem was put on, with every healthy resource below α = 0.4? (§4.1: an incast, ACC 0.45; a
receiver-window bug, ACC 0.8; 2.7% of the other machines above α.)

Six hosts in namespaces on a bridge. In every run each host's `bg_client` keeps a connection to
every other host's `bg_server` (60 sockets), asking for --reply-bytes at exponential gaps of
mean --gap-s, and every host's sniffer profiles it for --duration-s. The runs: *control* (that
alone); *incast* (`incast_agg` on --aggregator asks the `incast_wrk` of --workers hosts at
once, --connections-per-worker connections to each (5 × 7: the paper's 35 workers), for
--response-bytes, through a tbf qdisc on the bridge port into it); *loss* (the injector on
--lossy drops TCP packets into it, --loss-fraction on average, in episodes: twice that in the
first half of every --loss-period-s, none in the second, as a congested link drops). The
reports are saved and ranked by benchmarks/snap_correlation_analysis.py.

    sudo nice -n 5 .venv/bin/python -m benchmarks.snap_correlation [--duration-s 60]
    .venv/bin/python -m benchmarks.snap_correlation --reanalyse   # the saved reports again
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import random
import selectors
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import numpy as np

from benchmarks.results_md import update_section
from benchmarks.snap_correlation_analysis import SLOW_S, analyse, markdown
from linkgrad.protocol.injector import (
    Add,
    ConstantSchedule,
    InjectorReady,
    LinkSpec,
    SquareSchedule,
    StatsRequest,
)
from linkgrad.protocol.jsonlines import DaemonClient
from linkgrad.protocol.snap import Profile, Unprofile
from linkgrad.protocol.sniffer import SnifferReady
from testbed.addressing import free_subnet, networks_in_use
from testbed.netns import HostPlan, TestbedPlan, network_steps
from testbed.process_channel import ProcessChannel

OUT = Path(__file__).parent / "out" / "snap_correlation.json"
ROOT = Path(__file__).parents[1]
SECTION = "snap-correlation"
HOSTS = ("h1", "h2", "h3", "h4", "h5", "h6")
BG_PORT, INCAST_PORT = 7801, 7802
PR_SET_NAME = 15


def _knob(default: Any, help_: str) -> Any:
    return field(default=default, metadata={"help": help_})


@dataclass(frozen=True)
class Settings:
    """Every knob of the runs, units in the names (each is also an option: --duration-s ...)."""

    duration_s: float = _knob(60.0, "profiled seconds per run")
    report_interval_s: float = _knob(5.0, "the profile's report interval")
    table_interval_s: float = _knob(0.5, "the profile's table interval")
    reply_bytes: int = _knob(20_000, "background reply size")
    gap_s: float = _knob(0.1, "background mean gap between requests")
    workers: int = _knob(5, "incast worker hosts")
    connections_per_worker: int = _knob(
        7, "the aggregator's connections to each worker host (7 × 5: the paper's 35 workers)")
    response_bytes: int = _knob(100_000, "each worker's incast answer")
    incast_gap_s: float = _knob(0.05, "gap between incast rounds")
    rate_mbit: float = _knob(100.0, "tbf rate into the aggregator")
    burst_bytes: int = _knob(15_000, "tbf burst")
    limit_bytes: int = _knob(32_000, "tbf queue limit")
    loss_fraction: float = _knob(0.03, "injected loss into the lossy host (its mean)")
    loss_period_s: float = _knob(
        4.0, "loss comes in episodes, on for half of each period at twice the mean, as a "
        "congested link's does (0: constant)")
    aggregator: str = _knob("h1", "the incast's aggregator host")
    lossy: str = _knob("h4", "the host the loss is put on")
    injector_queue: int = _knob(6300, "the injector's NFQUEUE base")


# ---------------------------------------------------------------- traffic (child processes)


def _set_comm(name: str) -> None:
    """The process's name (what the sniffer reports as `process`), at most 15 bytes."""
    ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _recv_exactly(sock: socket.socket, n: int) -> bool:
    buf = bytearray(min(n, 1 << 16))
    while n > 0 and (got := sock.recv_into(buf, min(n, len(buf)))):
        n -= got
    return n <= 0


def _read_header(conn: socket.socket) -> int | None:
    data = conn.recv(8, socket.MSG_WAITALL)  # fewer only at EOF
    return int(struct.unpack("!Q", data)[0]) if len(data) == 8 else None


def _serve_one(conn: socket.socket) -> None:
    payload = memoryview(bytes(1 << 20))
    with conn, contextlib.suppress(OSError):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while (size := _read_header(conn)) is not None:
            conn.sendall(payload[:size])


def serve(spec: dict[str, Any]) -> None:
    """Answer each 8-byte request with that many bytes, on every connection, until EOF."""
    srv = socket.create_server(("0.0.0.0", spec["port"]), backlog=64)
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    print(json.dumps({"event": "listening"}), flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()


def _connect(addr: str, port: int) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(OSError):
            sock = socket.create_connection((addr, port), timeout=5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(30)
            return sock
        if time.monotonic() > deadline:
            raise ConnectionError(f"no server at {addr}:{port}")
        time.sleep(0.1)


def _stop_on_eof() -> threading.Event:
    """Set when stdin closes: the parent's word to stop (it then reads the summary)."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    return stop


def _requests(sock: socket.socket, spec: dict[str, Any], seed: int, out: dict[str, Any],
              stop: threading.Event) -> None:
    rng = random.Random(seed)
    latencies: list[float] = []
    addr = sock.getpeername()[0]
    with sock:
        end = time.monotonic() + spec["seconds"]
        request = struct.pack("!Q", spec["reply_bytes"])
        while time.monotonic() < end and not stop.is_set():
            start = time.monotonic()
            sock.sendall(request)
            if not _recv_exactly(sock, spec["reply_bytes"]):
                raise ConnectionError(f"{addr} closed")
            latencies.append(time.monotonic() - start)
            stop.wait(rng.expovariate(1 / spec["gap_s"]))
    out[addr] = _latency_summary(latencies)


def _latency_summary(xs: list[float]) -> dict[str, Any]:
    return {"n": len(xs), "slow": sum(x > SLOW_S for x in xs),
            "median_ms": 1e3 * statistics.median(xs) if xs else None,
            "max_ms": 1e3 * max(xs) if xs else None}


def bg_client(spec: dict[str, Any]) -> None:
    """One persistent connection to each peer, request/response at exponential gaps."""
    out: dict[str, Any] = {}
    socks = [_connect(p, spec["port"]) for p in spec["peers"]]
    print(json.dumps({"event": "connected"}), flush=True)
    stop = _stop_on_eof()
    threads = [threading.Thread(target=_requests, args=(s, spec, spec["seed"] + i, out, stop))
               for i, s in enumerate(socks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(spec["seconds"] + 60)
    print(json.dumps({"event": "done", "peers": out}), flush=True)


def _gather(sel: selectors.BaseSelector, socks: list[socket.socket], size: int) -> None:
    left, buf = dict.fromkeys(socks, size), bytearray(1 << 16)
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    while left:
        for key, _ in sel.select(timeout=30):
            sock = cast(socket.socket, key.fileobj)
            if not (got := sock.recv_into(buf, min(left[sock], len(buf)))):
                raise ConnectionError("a worker closed")
            left[sock] -= got
            if not left[sock]:
                sel.unregister(sock)
                del left[sock]


def aggregate(spec: dict[str, Any]) -> None:
    """The incast: a request to every worker at once, all answers read, again after a gap."""
    socks = [_connect(w, spec["port"]) for w in spec["workers"]]
    print(json.dumps({"event": "connected"}), flush=True)
    stop = _stop_on_eof()
    request = struct.pack("!Q", spec["response_bytes"])
    rounds: list[float] = []
    with selectors.DefaultSelector() as sel:
        end = time.monotonic() + spec["seconds"]
        while time.monotonic() < end and not stop.is_set():
            start = time.monotonic()
            for s in socks:
                s.sendall(request)
            _gather(sel, socks, spec["response_bytes"])
            rounds.append(time.monotonic() - start)
            stop.wait(spec["gap_s"])
    for s in socks:
        s.close()
    print(json.dumps({"event": "done", "rounds": _latency_summary(rounds)}), flush=True)


CHILDREN = {"server": serve, "bg_client": bg_client, "aggregator": aggregate}


# ---------------------------------------------------------------- the testbed


def _run(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=True).stdout


def _plan(tag: str) -> TestbedPlan:
    subnet = free_subnet(networks_in_use())
    addresses = list(subnet.hosts())
    hosts = tuple(HostPlan(h, f"lgtb-{tag}-{h}", str(addresses[i]), f"lgv{tag}{i}", ())
                  for i, h in enumerate(HOSTS))
    return TestbedPlan(tag, str(subnet), f"lgbr-{tag}", str(addresses[-1]), hosts)


def _check_free(plan: TestbedPlan) -> None:
    """Nothing of these names may exist: everything this run removes, it made."""
    namespaces = set(_run("ip", "netns", "list").split())
    taken = [h.namespace for h in plan.hosts if h.namespace in namespaces]
    links = [plan.bridge, *(h.veth for h in plan.hosts)]
    taken += [n for n in links if subprocess.run(["ip", "link", "show", n], capture_output=True,
                                                 timeout=10).returncode == 0]
    if taken:
        raise SystemExit(f"already in use, not ours: {taken}")


@contextlib.contextmanager
def testbed(tag: str) -> Iterator[TestbedPlan]:
    """The hosts on a bridge; each step's undo registered once it succeeded, run in reverse."""
    plan = _plan(tag)
    _check_free(plan)
    with contextlib.ExitStack() as undo:
        for step in network_steps(plan):
            _run(*step.do)
            if step.undo:
                undo.callback(_run, *step.undo)
        yield plan


class Procs:
    """Child processes of one run, each stopped at the end (stdin closed, then killed)."""

    def __init__(self, plan: TestbedPlan) -> None:
        self.plan = plan
        self.procs: list[subprocess.Popen[Any]] = []

    def popen(self, host: str, args: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        ns = self.plan.host(host).namespace
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *args], cwd=ROOT, **kw)
        self.procs.append(proc)
        return proc

    def child(self, host: str, spec: dict[str, Any]) -> subprocess.Popen[str]:
        return self.popen(host, [sys.executable, "-m", "benchmarks.snap_correlation", "--child",
                                 json.dumps(spec)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(OSError):
                proc.stdin and proc.stdin.close()  # no-op if closed already
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            proc.stdout and proc.stdout.close()


def _sniffer(procs: Procs, host: str, reports: list[dict[str, Any]]) -> DaemonClient:
    """`python -m sniffer` profiling `host`; its `snap` events, the host added, to `reports`."""
    proc = procs.popen(host, [sys.executable, "-m", "sniffer"], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE)

    def take(message: dict[str, Any]) -> None:
        if message.get("event") == "snap":
            reports.append({**message, "host": host})

    return DaemonClient(ProcessChannel(proc), f"sniffer on {host}", SnifferReady, on_event=take)


# ---------------------------------------------------------------- one run


def _start_servers(procs: Procs, plan: TestbedPlan, s: Settings, incast: bool) -> None:
    servers = [procs.child(h.name, {"role": "server", "comm": "bg_server", "port": BG_PORT})
               for h in plan.hosts]
    if incast:
        servers += [procs.child(w, {"role": "server", "comm": "incast_wrk",
                                    "port": INCAST_PORT}) for w in _workers(plan, s)]
    for proc in servers:
        _said(proc, "listening")


def _said(proc: subprocess.Popen[str], event: str) -> None:
    """The child's next line must be `event` (blocks till then; the child's connects time out)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if json.loads(line or "{}").get("event") != event:
        raise SystemExit(f"a child did not say {event!r}: {line!r} (exit {proc.poll()})")


def _workers(plan: TestbedPlan, s: Settings) -> list[str]:
    return [h.name for h in plan.hosts if h.name != s.aggregator][:s.workers]


def _start_clients(procs: Procs, plan: TestbedPlan, s: Settings, incast: bool
                   ) -> dict[str, subprocess.Popen[str]]:
    seconds = s.duration_s + 60  # a safety limit: they stop when their stdin closes
    clients = {h.name: procs.child(h.name, {
        "role": "bg_client", "comm": "bg_client", "port": BG_PORT, "seconds": seconds,
        "reply_bytes": s.reply_bytes, "gap_s": s.gap_s, "seed": 1000 * i,
        "peers": [p.address for p in plan.hosts if p is not h]})
        for i, h in enumerate(plan.hosts)}
    if incast:
        clients["incast"] = procs.child(s.aggregator, {
            "role": "aggregator", "comm": "incast_agg", "port": INCAST_PORT,
            "seconds": seconds, "response_bytes": s.response_bytes, "gap_s": s.incast_gap_s,
            "workers": [plan.host(w).address for w in _workers(plan, s)
                        for _ in range(s.connections_per_worker)]})
    return clients


def run(plan: TestbedPlan, scenario: str, s: Settings) -> dict[str, Any]:
    """One run: servers, the problem, the profilers, the clients; `duration_s` of reports."""
    procs = Procs(plan)
    incast = scenario == "incast"
    extra: dict[str, Any] = {}
    with contextlib.ExitStack() as undo:
        undo.callback(procs.stop)
        _start_servers(procs, plan, s, incast)
        veth = plan.host(s.aggregator).veth
        if incast:
            _run("tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", f"{s.rate_mbit}mbit",
                 "burst", str(s.burst_bytes), "limit", str(s.limit_bytes))
            undo.callback(_run, "tc", "qdisc", "del", "dev", veth, "root")
        injector = _injector(procs, plan, s, undo) if scenario == "loss" else None
        reports: dict[str, list[dict[str, Any]]] = {h.name: [] for h in plan.hosts}
        sniffers = {h: _sniffer(procs, h, got) for h, got in reports.items()}
        for sniffer in sniffers.values():
            undo.callback(sniffer.close)
        clients = _start_clients(procs, plan, s, incast)
        for proc in clients.values():  # connected before the first table read: its one
            _said(proc, "connected")   # /proc scan finds every socket's process
        profiling = {h: sn.call(Profile(
            report_interval_s=s.report_interval_s, table_interval_s=s.table_interval_s,
            sums_interval_s=s.report_interval_s, socket_calls=False, seed=i)).model_dump()
            for i, (h, sn) in enumerate(sniffers.items())}
        time.sleep(s.duration_s)
        for sniffer in sniffers.values():
            sniffer.call(Unprofile())
        if incast:
            q = json.loads(_run("tc", "-s", "-j", "qdisc", "show", "dev", veth))[0]
            extra["qdisc"] = {k: q.get(k) for k in ("kind", "bytes", "packets", "drops",
                                                    "overlimits")}
        if injector is not None:
            stats = injector.call(StatsRequest())
            extra["injector"] = {k: {"dropped": v.dropped, "link": v.link}
                                 for k, v in stats.links.items()}
        extra["clients"] = {name: _done(proc) for name, proc in clients.items()}
    return {"scenario": scenario, "profiling": profiling, **extra,
            "reports": [r for got in reports.values() for r in got]}


def _injector(procs: Procs, plan: TestbedPlan, s: Settings, undo: contextlib.ExitStack
              ) -> DaemonClient:
    proc = procs.popen(s.lossy, [sys.executable, "-m", "injector", "--queue",
                                 str(s.injector_queue)],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    client = DaemonClient(ProcessChannel(proc), f"injector on {s.lossy}", InjectorReady)
    undo.callback(client.close)
    link = LinkSpec(proto="tcp", dst=plan.host(s.lossy).address)
    if s.loss_period_s > 0:  # a square wave's "on" halves drop; its delay is a token 10 µs
        cycles = int(s.duration_s / s.loss_period_s) + 30
        schedule: ConstantSchedule | SquareSchedule = SquareSchedule(
            magnitude_ms=0.01, period_s=s.loss_period_s, cycles=cycles,
            loss_fraction=min(1.0, 2 * s.loss_fraction))
    else:
        schedule = ConstantSchedule(magnitude_ms=0.0, loss_fraction=s.loss_fraction)
    client.call(Add(link=link, schedule=schedule))
    return client


def _done(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """Stop a client (EOF on its stdin) and take its summary."""
    out, _ = proc.communicate(timeout=60)
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"a client failed ({proc.returncode}): {out[-500:]!r}")
    return lines[-1]


# ---------------------------------------------------------------- main


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--scenarios", default="control,incast,loss",
                   help="runs, comma-separated, of control, incast, loss (default %(default)s)")
    for knob in fields(Settings):
        p.add_argument("--" + knob.name.replace("_", "-"), type=type(knob.default),
                       default=knob.default, help=f"{knob.metadata['help']} (default %(default)s)")
    p.add_argument("--reanalyse", action="store_true",
                   help=f"no runs: analyse the reports saved in {OUT.relative_to(ROOT)} again")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if bad := [x for x in args.scenarios.split(",") if x not in ("control", "incast", "loss")]:
        p.error(f"--scenarios: unknown {bad}")
    for host in (args.aggregator, args.lossy):
        if host not in HOSTS:
            p.error(f"{host!r} is no host; the hosts are {list(HOSTS)}")
    if not 1 <= args.workers < len(HOSTS):
        p.error(f"--workers {args.workers}: 1 to {len(HOSTS) - 1}")
    if not 1 <= args.connections_per_worker <= 50:
        p.error(f"--connections-per-worker {args.connections_per_worker}: 1 to 50")
    return args


def finish(meta: dict[str, Any], s: Settings, plan: dict[str, Any],
           runs: dict[str, dict[str, Any]]) -> None:
    """Analyse, save everything to OUT, rewrite the RESULTS.md section."""
    hosts = {h["address"]: h["name"] for h in plan["hosts"]}
    problem = {"incast": s.aggregator, "loss": s.lossy}
    analyses = {name: analyse(r, hosts, problem.get(name)) for name, r in runs.items()}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"meta": meta, "settings": asdict(s), "plan": plan,
                               "analyses": analyses, "runs": runs}, indent=1) + "\n")
    print(f"wrote {OUT}")
    section = markdown(meta, asdict(s), runs, analyses)
    print(section)
    update_section(SECTION, section)


def main() -> None:
    args = parse()
    if args.child:
        spec = json.loads(args.child)
        _set_comm(spec["comm"])
        CHILDREN[spec["role"]](spec)
        return
    if args.reanalyse:
        saved = json.loads(OUT.read_text())
        saved["settings"].setdefault("connections_per_worker", 1)  # runs saved before them
        saved["settings"].setdefault("loss_period_s", 0.0)
        finish(saved["meta"], Settings(**saved["settings"]), saved["plan"], saved["runs"])
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: every undo runs
    s = Settings(**{k.name: getattr(args, k.name) for k in fields(Settings)})
    meta = {"kernel": platform.release(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__,
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "args": {k: v for k, v in vars(args).items() if k != "child"}}
    runs: dict[str, dict[str, Any]] = {}
    with testbed(f"c{os.getpid() % 1000}") as plan:
        for scenario in args.scenarios.split(","):
            print(f"{scenario}: {s.duration_s:g} s", flush=True)
            runs[scenario] = run(plan, scenario, s)
    finish(meta, s, asdict(plan), runs)


if __name__ == "__main__":
    main()

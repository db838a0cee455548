"""What SNAP's polling costs here (SNAP §3.2, §7, Figure 8): per-socket cost of one read of the
TCP table by our raw sock_diag dump, `ss` and pyroute2, side by side; the CPU share of the
`profile` command under its budget; and the volume of the `snap` events it logs.

Runs as root in a network namespace of its own (unshare, so nothing is left behind and no other
work's sockets are counted), over loopback connections it opens: `--sockets N` counts
ESTABLISHED sockets, both ends of N/2 connections (both ends are in the one dump).

1. Per socket-poll wall and CPU time (process user+sys, kernel work in the syscalls included;
   for `ss`, its own CPU plus ours spawning it and reading its text), median and quartiles of
   repeated reads: (a) `SockDiag().dump(AF_INET)` with tcp_info and SKMEMINFO, and with the
   step to `snap_sample.samples`; (b) `ss -tinmHnO state established`, text only; (c) the same
   split into a dict per socket; (d) pyroute2 `DiagSocket.get_sock_stats`, each socket's
   tcp_info attribute fetched; (e) one forced table read of a `SnapPoller` (dump, samples,
   intervals, Table 2, totals), and the share of one core it implies every 500 ms.
2. The budget: the sniffer's `Profiler` with default settings (2-5% of one core, table every
   0.5 s) in a child process of its own over the largest socket set for `--budget-s`, while a
   thread here keeps `--problem` connections receiver-window limited (receivers never read,
   senders keep writing) and `--active-share` of the others sending 100 bytes a second. The
   child's CPU is read from /proc/PID/stat (utime+stime), so the load generator is not in it.
3. Log volume: the bytes of the `snap` event lines, per socket-hour and per host per day.
4. A cProfile of `SnapPoller.step` (forced table reads) at the largest socket set.

    sudo .venv/bin/python -m benchmarks.snap_polling_cost [--sockets 100,1000,10000]
        [--budget-s 60]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import ctypes
import gzip
import io
import json
import os
import platform
import pstats
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyroute2
from pyroute2.netlink.diag import DiagSocket

from benchmarks.results_md import update_section
from linkgrad.snap.classify import CLASS_NAMES, PROBLEMS, SnapThresholds
from sniffer.poll_budget import BudgetSettings
from sniffer.snap_poller import SnapPoller
from sniffer.snap_sample import samples
from sniffer.sockdiag import TCP_EXTENSIONS, SockDiag

OUT = Path(__file__).parent / "out" / "snap_polling_cost.json"
CLONE_NEWNET = 0x40000000
ESTABLISHED = 1 << 1  # TCP_ESTABLISHED as a state bit
SS = ["ss", "-tinmHnO", "state", "established"]
CHUNK = b"x" * 65536
MESSAGE = b"m" * 100
PAPER_CPU_PCT = 5.0  # "1K connections at 500 millisecond interval ... less than 5%" (§7)
PAPER_GB_PER_DAY = 1.0  # "less than 1 GB on each host per day" (§3.2)
PAPER_INTERVAL_S = 0.5


# ---------------------------------------------------------------- sockets


def own_namespace() -> None:
    """A network namespace of this process's own, loopback up (gone when the process is)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise SystemExit(f"unshare(CLONE_NEWNET): {os.strerror(err)} (run as root)")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)


def raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(hard, need)))


class Loopback:
    """Connected pairs over 127.0.0.1: `clients[i]` talks to `servers[i]`."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4096)
        self.clients: list[socket.socket] = []
        self.servers: list[socket.socket] = []

    def grow(self, pairs: int) -> None:
        while len(self.clients) < pairs:
            client = socket.create_connection(self.listener.getsockname(), timeout=5)
            server, _ = self.listener.accept()
            for s in (client, server):
                s.setblocking(False)
            self.clients.append(client)
            self.servers.append(server)

    def close(self) -> None:
        for s in (*self.clients, *self.servers, self.listener):
            s.close()

    def port_of(self, i: int) -> int:
        return self.clients[i].getsockname()[1]


# ---------------------------------------------------------------- 1. per socket-poll


def _raw(diag: SockDiag, with_samples: bool) -> Callable[[], int]:
    def read() -> int:
        table = diag.dump(socket.AF_INET, states=ESTABLISHED)
        if with_samples:
            samples(table, time.time())
        return len(table)
    return read


def _ss(parse: bool) -> Callable[[], int]:
    def read() -> int:
        text = subprocess.run(SS, capture_output=True, text=True, check=True, timeout=60).stdout
        lines = text.splitlines()
        if parse:  # state recv-q send-q local peer, then key:value tokens (ss.c prints them)
            rows = [dict(t.split(":", 1) for t in line.split()[5:] if ":" in t)
                    for line in lines]
            assert all("rtt" in r for r in rows)
        return len(lines)
    return read


def _pyroute2(diag: DiagSocket) -> Callable[[], int]:
    def read() -> int:
        msgs = diag.get_sock_stats(family=socket.AF_INET, states=ESTABLISHED,
                                   extensions=TCP_EXTENSIONS)  # INFO | SKMEMINFO
        infos = [m.get_attr("INET_DIAG_INFO") for m in msgs]
        assert all(i is not None for i in infos)
        return len(msgs)
    return read


def _poller_table_read(poller: SnapPoller) -> Callable[[], int]:
    def read() -> int:
        poller.next_table_s = 0.0  # due now
        poller.step()
        return poller.sockets
    return read


def _cpu_s() -> float:
    """This process's CPU and its reaped children's (user+sys)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def timed(reads: dict[str, tuple[Callable[[], int], int]], sockets: int
          ) -> dict[str, dict[str, Any]]:
    """Each method's (read, reps): median and quartiles of its reads, per socket in µs. The
    methods take turns, one read each a round (after one unmeasured read each), so a burst of
    other work on the machine falls on all of them alike."""
    wall: dict[str, list[float]] = {name: [] for name in reads}
    cpu: dict[str, list[float]] = {name: [] for name in reads}
    for read, _ in reads.values():
        read()
    for rep in range(max(reps for _, reps in reads.values())):
        for name, (read, reps) in reads.items():
            if rep >= reps:
                continue
            t, c = time.perf_counter(), _cpu_s()
            seen = read()
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(_cpu_s() - c)
            if seen != sockets:
                raise SystemExit(f"{name}: a read saw {seen} sockets, expected {sockets}")
    return {name: {"reps": len(wall[name]), "wall_s": wall[name], "cpu_s": cpu[name],
                   "wall_us_per_socket": _quartiles(wall[name], sockets),
                   "cpu_us_per_socket": _quartiles(cpu[name], sockets)} for name in reads}


def _quartiles(xs: list[float], sockets: int) -> dict[str, float]:
    q1, med, q3 = np.percentile(xs, [25, 50, 75]) / sockets * 1e6
    return {"median": med, "q1": q1, "q3": q3}


def per_socket_poll(net: Loopback, counts: list[int], reps: int) -> list[dict[str, Any]]:
    rows = []
    with SockDiag() as raw, DiagSocket() as pr2:
        pr2.bind()
        for n in counts:
            net.grow(n // 2)
            few = max(3, min(reps, 20_000 // n))  # pyroute2: ~1 s a read at 10,000
            poller = SnapPoller(BudgetSettings(), SnapThresholds(), cpu_s=time.thread_time,
                                seed=1)
            try:
                t = time.perf_counter()
                poller.step()  # the baseline, and every socket's ends learnt: not typical
                first_s = time.perf_counter() - t
                methods = timed({"raw": (_raw(raw, False), reps),
                                 "raw_samples": (_raw(raw, True), reps),
                                 "ss_text": (_ss(False), reps),
                                 "ss_parsed": (_ss(True), reps),
                                 "pyroute2": (_pyroute2(pr2), few),
                                 "poller_table_read": (_poller_table_read(poller), reps)}, n)
            finally:
                poller.close()
            row = {"sockets": n, "pairs": n // 2, "methods": methods,
                   "poller_first_read_s": first_s}
            _print_row(row)
            rows.append(row)
    return rows


def _med(row: dict[str, Any], method: str, kind: str = "wall") -> float:
    return row["methods"][method][f"{kind}_us_per_socket"]["median"]


def _print_row(row: dict[str, Any]) -> None:
    n = row["sockets"]
    print(f"{n:>6} sockets, µs/socket median wall (cpu):")
    for name in row["methods"]:
        print(f"  {name:18s} {_med(row, name):8.2f} ({_med(row, name, 'cpu'):8.2f})")


# ---------------------------------------------------------------- 2. the budget


class Load(threading.Thread):
    """Once a second: the problem senders write what fits (their receivers never read); each
    active client sends 100 bytes and its server reads them."""

    def __init__(self, net: Loopback, problem: range, active: range) -> None:
        super().__init__(daemon=True)
        self.net, self.problem, self.active = net, problem, active
        self.stopping = threading.Event()
        self.cpu_s = 0.0

    def run(self) -> None:
        while not self.stopping.is_set():
            for i in self.problem:
                with contextlib.suppress(BlockingIOError):
                    while self.net.clients[i].send(CHUNK):
                        pass
            for i in self.active:
                self.net.clients[i].send(MESSAGE)
            for i in self.active:
                with contextlib.suppress(BlockingIOError):
                    self.net.servers[i].recv(65536)
            self.cpu_s = time.thread_time()
            self.stopping.wait(1.0)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)


def _child_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_child(duration_s: float) -> None:
    """The child's side: the sniffer's `Profiler` for `duration_s`, its events on stdout;
    waits for a line on stdin before starting and before exiting (the parent reads /proc)."""
    from linkgrad.protocol.jsonlines import LineWriter
    from linkgrad.protocol.snap import Profile
    from sniffer.profiling import Profiler

    out = LineWriter(sys.stdout)
    out.write({"event": "ready"})
    sys.stdin.readline()
    profiler = Profiler(out)
    profiler.start(Profile(seed=1))
    time.sleep(duration_s)
    profiler.stop()
    out.write({"event": "done"})
    sys.stdin.readline()


def budget_run(net: Loopback, duration_s: float, problem: int, active_share: float
               ) -> dict[str, Any]:
    pairs = len(net.clients)
    problems = range(problem)
    active = range(problem, problem + int(active_share * (pairs - problem)))
    load = Load(net, problems, active)
    load.start()
    child = subprocess.Popen([sys.executable, "-m", "benchmarks.snap_polling_cost",
                              "--poller-child", str(duration_s)],
                             cwd=Path(__file__).parents[1], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    lines: list[tuple[float, str]] = []
    try:
        cpu = _watch(child, lines)
    finally:
        load.stop()
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
    events = [json.loads(line) for _, line in lines]
    snaps = [(t, e, line) for (t, line), e in zip(lines, events, strict=True)
             if e["event"] == "snap"]
    if not snaps or any(e["event"] not in ("ready", "snap", "done") for e in events):
        raise SystemExit(f"the profiler child said: {[e for e in events if e['event'] != 'snap']}")
    return {"pairs": pairs, "sockets": 2 * pairs, "duration_s": duration_s,
            "problem_pairs": problem, "active_pairs": len(active),
            "load_thread_cpu_s": load.cpu_s, "child_cpu": cpu,
            "reports": [_report_summary(e, _truth(net, problems)) for _, e, _ in snaps],
            "log": _log_volume(snaps, 2 * pairs),
            "classes": _classified(net, snaps, problems, active)}


def _truth(net: Loopback, problems: range) -> set[tuple[int, int]]:
    """(local port, remote port) of the problem connections' senders."""
    port = net.listener.getsockname()[1]
    return {(net.port_of(i), port) for i in problems}


def _watch(child: subprocess.Popen[str], lines: list[tuple[float, str]]) -> dict[str, Any]:
    """The child's CPU, once a second, from its start signal to its last event."""
    assert child.stdin is not None
    assert child.stdout is not None
    stdout = child.stdout
    if json.loads(stdout.readline())["event"] != "ready":
        raise SystemExit("the profiler child did not start")
    reader = threading.Thread(target=lambda: lines.extend(
        (time.monotonic(), line) for line in stdout), daemon=True)
    start_cpu, start = _child_cpu_s(child.pid), time.monotonic()
    child.stdin.write("go\n")
    child.stdin.flush()
    reader.start()
    series = []
    while not (lines and json.loads(lines[-1][1])["event"] == "done"):
        if child.poll() is not None:
            raise SystemExit(f"the profiler child exited ({child.returncode})")
        time.sleep(1.0)
        series.append((time.monotonic() - start, _child_cpu_s(child.pid) - start_cpu))
    child.stdin.write("exit\n")
    child.stdin.flush()
    reader.join(timeout=10)
    t = np.array([0.0] + [s[0] for s in series])
    c = np.array([0.0] + [s[1] for s in series])
    half = t >= t[-1] / 2
    return {"seconds": t.tolist(), "cpu_s": c.tolist(),
            "mean_pct": 100 * c[-1] / t[-1],
            "second_half_pct": 100 * (c[-1] - c[half][0]) / (t[-1] - t[half][0]),
            "max_5s_pct": _max_window_pct(t, c, 5.0)}


def _max_window_pct(t: np.ndarray, c: np.ndarray, window_s: float) -> float:
    best = 0.0
    for i in range(len(t)):
        j = np.searchsorted(t, t[i] + window_s)
        if j < len(t):
            best = max(best, 100 * (c[j] - c[i]) / (t[j] - t[i]))
    return best


def _report_summary(e: dict[str, Any], truth: set[tuple[int, int]]) -> dict[str, Any]:
    """The report's figures; `table_reads`: the fewest problem records of a problem
    connection (each poll of one gives it a record: each table read does, only fast ones get
    more; the connections' sums come once a minute, records with every report)."""
    polls: dict[tuple[int, int], int] = {}
    for r in e["records"]:
        key = (r["local"]["port"], r["remote"]["port"])
        polls[key] = polls.get(key, 0) + 1
    return {"from": e["from"], "to": e["to"], "cpu_pct": e["cpu_pct"],
            "table_reads": min((polls.get(k, 0) for k in truth), default=0),
            "table_interval_s": e["table_interval_s"],
            "fast_connections": e["fast_connections"], "sockets": e["sockets"],
            "connections": len(e["connections"]), "records": len(e["records"]),
            "dropped_records": e["dropped_records"]}


def _log_volume(snaps: list[tuple[float, dict[str, Any], str]], sockets: int
                ) -> dict[str, Any]:
    text = "".join(line for _, _, line in snaps).encode()
    hours = (snaps[-1][1]["to"] - snaps[0][1]["from"]) / 3600
    per_s = len(text) / (hours * 3600)
    return {"bytes": len(text), "gzip_bytes": len(gzip.compress(text)), "hours": hours,
            "bytes_per_socket_hour": len(text) / (sockets * hours),
            "gb_per_host_day": per_s * 86400 / 1e9,
            "gzip_gb_per_host_day": len(gzip.compress(text)) / (hours * 3600) * 86400 / 1e9,
            "record_bytes": sum(len(json.dumps(r)) for _, e, _ in snaps for r in e["records"]),
            "connection_bytes": sum(len(json.dumps(c)) for _, e, _ in snaps
                                    for c in e["connections"])}


def _classified(net: Loopback, snaps: list[tuple[float, dict[str, Any], str]],
                problems: range, active: range) -> dict[str, Any]:
    """Per socket (by its local port): seconds in each class over the run; receiver_window
    > 0 against the truth (the problem connections' senders), precision and recall."""
    port = net.listener.getsockname()[1]
    truth = _truth(net, problems)
    seconds: dict[tuple[int, int], np.ndarray] = {}
    for _, e, _ in snaps:
        for c in e["connections"]:
            key = (c["local"]["port"], c["remote"]["port"])
            got = np.array([c["seconds"].get(n, 0.0) for n in CLASS_NAMES])
            seconds[key] = seconds.get(key, 0) + got
    healthy = {(net.port_of(i), port) for i in active} | {(port, net.port_of(i)) for i in active}
    rwnd = CLASS_NAMES.index("receiver_window")
    flagged = {k for k, s in seconds.items() if s[rwnd] > 0}
    hit = len(flagged & truth)
    problem_cols = [CLASS_NAMES.index(p) for p in PROBLEMS]
    return {"truth": len(truth), "flagged": len(flagged), "true_positives": hit,
            "precision": hit / len(flagged) if flagged else None,
            "recall": hit / len(truth),
            "truth_rwnd_seconds": sorted(float(seconds.get(k, np.zeros(6))[rwnd])
                                         for k in truth),
            "healthy_sockets": len(healthy),
            "healthy_with_any_problem": {
                p: sum(1 for k in healthy if k in seconds and seconds[k][j] > 0)
                for p, j in zip(PROBLEMS, problem_cols, strict=True)}}


# ---------------------------------------------------------------- 4. cProfile


def profile_step(reads: int, top: int = 15) -> dict[str, Any]:
    """`reads` forced table reads and a report, under cProfile: the functions that dominate."""
    poller = SnapPoller(BudgetSettings(), SnapThresholds(), cpu_s=time.thread_time, seed=1)
    try:
        poller.step()
        read = _poller_table_read(poller)
        with cProfile.Profile() as prof:
            for _ in range(reads):
                read()
            report = poller.report()
    finally:
        poller.close()
    stream = io.StringIO()
    stats = pstats.Stats(prof, stream=stream)
    stats.sort_stats("tottime").print_stats(top)
    rows = sorted(((f, s[2], s[3], s[1]) for f, s in stats.stats.items()),
                  key=lambda r: -r[1])[:top]
    total = sum(s[2] for s in stats.stats.values())
    return {"reads": reads, "sockets": poller.sockets, "total_tottime_s": total,
            "report_connections": len(report.connections),
            "top_tottime": [{"function": f"{Path(f[0]).name}:{f[1]}({f[2]})",
                             "tottime_s": tt, "cumtime_s": ct, "calls": n}
                            for f, tt, ct, n in rows],
            "text": stream.getvalue()}


# ---------------------------------------------------------------- output


def environment() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    ss = subprocess.run(["ss", "-V"], capture_output=True, text=True, timeout=10).stdout
    return {"kernel": platform.release(), "cpus": os.cpu_count(), "cpu_model": model,
            "python": platform.python_version(), "numpy": np.__version__,
            "pyroute2": pyroute2.__version__, "ss": ss.strip(),
            "when": datetime.now(UTC).isoformat(timespec="seconds")}


def markdown(env: dict[str, Any], rows: list[dict[str, Any]], budget: dict[str, Any]
             ) -> str:
    lines = [
        "## SNAP polling cost (`benchmarks/snap_polling_cost.py`)",
        "",
        f"Loopback ESTABLISHED sockets (both ends of N/2 connections) in a namespace of their "
        f"own; kernel {env['kernel']}, {env['cpus']} × {env['cpu_model']}, {env['ss']}, "
        f"pyroute2 {env['pyroute2']}. µs per socket per read, median wall (CPU: user+sys, "
        f"`ss`'s own plus spawning it) of {rows[0]['methods']['raw']['reps']} reads (pyroute2: "
        "fewer at 10,000), the methods taking turns read by read; ratios of the medians, wall "
        "(CPU). `ss` is `ss -tinmHnO state established`; raw is `SockDiag().dump(AF_INET)` "
        "(tcp_info + SKMEMINFO); pyroute2 fetches each socket's tcp_info attribute. Goal "
        "(issue): raw no slower than `ss -tin`, ≥ 10× faster than pyroute2.",
        "",
        "| sockets | raw dump | raw + samples | ss text | ss + split | pyroute2 | "
        "SnapPoller table read | pyroute2 / raw | ss / raw |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [f"{_med(r, m):.1f} ({_med(r, m, 'cpu'):.1f})"
                 for m in ("raw", "raw_samples", "ss_text", "ss_parsed", "pyroute2",
                           "poller_table_read")]
        ratios = [f"**{_med(r, m) / _med(r, 'raw'):.1f}×** "
                  f"({_med(r, m, 'cpu') / _med(r, 'raw', 'cpu'):.1f}×)"
                  for m in ("pyroute2", "ss_text")]
        lines.append(f"| {r['sockets']:,} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    lines += ["", *_paper_table(rows, budget)]
    return "\n".join(lines)


def _paper_table(rows: list[dict[str, Any]], budget: dict[str, Any]) -> list[str]:
    cpu, log, cls = budget["child_cpu"], budget["log"], budget["classes"]
    reports = budget["reports"]
    intervals = [r["table_interval_s"] for r in reports]
    reads = sum(r["table_reads"] for r in reports)
    n, hours = budget["sockets"], log["hours"]
    out = [
        f"Budget run: the `profile` command (default budget 2–5% of one core, table every "
        f"0.5 s, a report every 5 s) in a child process over {n:,} sockets for "
        f"{budget['duration_s']:.0f} s; {cls['truth']} connections receiver-window limited, "
        f"{budget['active_pairs']} sending 100 B/s. CPU from the child's /proc stat. Table "
        "reads counted from the problem connections' polls.",
        "",
        "| figure | ours | paper | ratio |",
        "|---|---|---|---|",
    ]
    for r in rows:
        pct = _med(r, "poller_table_read", "cpu") * r["sockets"] / 1e6 / PAPER_INTERVAL_S * 100
        paper, ratio = ((f"< {PAPER_CPU_PCT:.0f}% (1K)", f"{pct / PAPER_CPU_PCT:.2f}")
                        if r["sockets"] == 1000 else ("—", "—"))
        out.append(f"| CPU of a SnapPoller table read every 500 ms, {r['sockets']:,} sockets "
                   f"(Fig. 8, §7) | {pct:.2f}% | {paper} | {ratio} |")
    mean_interval = hours * 3600 / reads if reads else float("inf")
    out += [
        f"| CPU under the budget, {n:,} sockets: mean (2nd half; max 5 s) | "
        f"{cpu['mean_pct']:.1f}% ({cpu['second_half_pct']:.1f}%; {cpu['max_5s_pct']:.1f}%) | "
        f"< {PAPER_CPU_PCT:.0f}% (1K) | {cpu['mean_pct'] / PAPER_CPU_PCT:.2f} |",
        f"| mean table interval under the budget, {n:,} sockets (reports' setting: range) | "
        f"{mean_interval:.2f} s ({min(intervals):g}–{max(intervals):g} s) | "
        f"{PAPER_INTERVAL_S} s | {mean_interval / PAPER_INTERVAL_S:.1f} |",
        f"| fast connections (last report; max) | {reports[-1]['fast_connections']} "
        f"({max(r['fast_connections'] for r in reports)}) | — | — |",
        f"| receiver-window problems found: precision, recall ({cls['truth']} true) | "
        f"{_fmt(cls['precision'])}, {_fmt(cls['recall'])} | — | — |",
        f"| log, bytes per socket-hour: all (per-connection sums; problem records) | "
        f"{log['bytes_per_socket_hour']:,.0f} ({log['connection_bytes'] / n / hours:,.0f}; "
        f"{log['record_bytes'] / n / hours:,.0f}) | — | — |",
        f"| log per host per day at this rate, {n:,} sockets (gzip) | "
        f"{log['gb_per_host_day']:.2f} GB ({log['gzip_gb_per_host_day']:.2f} GB) | "
        f"< {PAPER_GB_PER_DAY:.0f} GB | {log['gb_per_host_day'] / PAPER_GB_PER_DAY:.2f} |",
    ]
    return out


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


@contextlib.contextmanager
def loopback(max_sockets: int) -> Iterator[Loopback]:
    raise_fd_limit(max_sockets + 1024)
    net = Loopback()
    try:
        yield net
    finally:
        net.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", default="100,1000,10000",
                        help="ESTABLISHED socket counts, comma-separated (each even: N/2 "
                        "connections); the budget run uses the largest")
    parser.add_argument("--budget-s", type=float, default=60.0,
                        help="how long the profiler runs under its budget")
    parser.add_argument("--reps", type=int, default=20, help="reads per method and count")
    parser.add_argument("--problem", type=int, default=20,
                        help="receiver-window limited connections in the budget run")
    parser.add_argument("--active-share", type=float, default=0.1,
                        help="share of the other connections sending 100 B a second")
    parser.add_argument("--profile-reads", type=int, default=10,
                        help="forced table reads under cProfile (0: none)")
    parser.add_argument("--poller-child", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.poller_child is not None:
        run_child(args.poller_child)
        return
    counts = sorted(int(n) for n in args.sockets.split(","))
    if any(n < 2 or n % 2 for n in counts):
        parser.error(f"--sockets {args.sockets}: each count must be even and at least 2")
    own_namespace()
    env = environment()
    with loopback(counts[-1]) as net:
        rows = per_socket_poll(net, counts, args.reps)
        budget = budget_run(net, args.budget_s, args.problem, args.active_share)
        print(json.dumps({**budget["log"], **{k: v for k, v in budget["classes"].items()
                                              if k != "truth_rwnd_seconds"}}))
        prof = profile_step(args.profile_reads) if args.profile_reads else None
    if prof:
        print(prof["text"])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    result = {"meta": {**env, "args": vars(args)}, "per_socket_poll": rows,
              "budget": budget, "profile": prof}
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT}")
    section = markdown(env, rows, budget)
    print(section)
    update_section("snap-polling-cost", section)


if __name__ == "__main__":
    main()

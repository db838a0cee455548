"""What tracing a host's messages costs (WAP5's trace, issue: "choose by measured overhead"):
the packet ring the sniffer uses against socket-call tracepoints with a record per call (as
WAP5's LibSockCap logged every call), on the same request/response traffic, side by side.

Two namespaces, a client in a, a server in b (50-byte requests, 300-byte replies, each on one
of 8 persistent connections, at Poisson times of --rates requests/s: each request is two
messages at b). Traced at b, --seconds each, in turn:
- none: the traffic alone (the baseline);
- ring: `sniffer.message_capture` (TPACKET_V3 ring, kernel BPF filter, messages assembled,
  processes named by sock_diag), what `linkgrad paths` and the run use;
- bpftrace: `sock:sock_send_length`/`sock_recv_length` with a printf per call (time, pid,
  4-tuple, bytes), read and parsed by Python, as a per-call socket log is;
- threads: what the sniffer adds to the ring to know each message's thread
  (`sniffer.thread_changes`: the same tracepoints, a map lookup per call, a line only when a
  socket's thread changes), read by the same reader.
Measured: the tracer's processes' CPU (utime + stime), the BPF programs' run time
(kernel.bpf_stats_enabled, the programs' fdinfo), and the whole machine's busy time against
the baseline (which also holds the kernel's work for the packet socket); per message, and as
a share of one core. The goal: under 2% of a core at the testbed's load (200 requests/s,
about 1,600 messages/s at its busiest host, app1).

    nice -n 5 .venv/bin/python -m benchmarks.paths_capture_cost [--seconds 20]
        [--rates 200,800]    (root: namespaces, packet sockets, bpftrace)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.results_md import update_section
from sniffer.thread_changes import build_program as thread_program
from testbed.pairs.hosts import Hosts, make_pair

OUT = Path(__file__).with_name("out") / "paths_capture_cost.json"
SECTION = "paths-capture-cost"
PORT = 7551
CONNECTIONS = 8
CLK_TCK = os.sysconf("SC_CLK_TCK")

SERVER = """
import socket, sys, threading
srv = socket.create_server(("0.0.0.0", int(sys.argv[1])), backlog=64)
print("ready", flush=True)
def one(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while c.recv(64):
        c.sendall(b"y" * 300)
while True:
    c, _ = srv.accept()
    threading.Thread(target=one, args=(c,), daemon=True).start()
"""

CLIENT = """
import random, socket, sys, time
host, port, rate, seconds, n = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), \\
    float(sys.argv[4]), int(sys.argv[5])
socks = [socket.create_connection((host, port)) for _ in range(n)]
for s in socks:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rng = random.Random(7)
end, at, done = time.monotonic() + seconds, time.monotonic(), 0
while at < end:
    at += rng.expovariate(rate)
    time.sleep(max(0.0, at - time.monotonic()))
    s = socks[done % n]
    s.sendall(b"x" * 50)
    got = 0
    while got < 300:
        got += len(s.recv(4096))
    done += 1
print(done, flush=True)
"""

# the ring: capture for a while, then say what it saw and what it cost
RING = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
from sniffer.message_capture import CaptureSettings, MessageCapture
from sniffer.tracing import host_addresses
cap = MessageCapture(CaptureSettings(), set(host_addresses())).start()
print("ready", flush=True)
end, n = time.time() + float(sys.argv[1]), 0
while time.time() < end:
    time.sleep(0.5)
    n += len(cap.drain()[0])
cap.stop()
n += len(cap.drain()[0])
print(json.dumps({"messages": n, **cap.stats()}), flush=True)
"""

# bpftrace's per-call log, read and parsed as a trace reader would
BPFTRACE = r"""
tracepoint:sock:sock_send_length, tracepoint:sock:sock_recv_length
/args->protocol == 6 && args->ret > 0 && args->family == 2/ {
  $sk = (struct sock *)args->sk;
  if ($sk->__sk_common.skc_net.net->ns.inum == NETNS) {
    printf("%lld %d %s %s %d %s %d %d\n", nsecs, pid, comm,
           ntop(2, $sk->__sk_common.skc_rcv_saddr), $sk->__sk_common.skc_num,
           ntop(2, $sk->__sk_common.skc_daddr), $sk->__sk_common.skc_dport, args->ret);
  }
}
"""

# the program is built for a namespace given later: NETNS, as in BPFTRACE
PROGRAMS = {"bpftrace": BPFTRACE, "threads": thread_program(-1).replace("== -1", "== NETNS")}

READER = """
import json, os, subprocess, sys, threading, time
# `ip netns exec` gives this process a sysfs of its own: tracefs mounted here, gone with it
if not os.path.isdir("/sys/kernel/tracing/events"):
    subprocess.run(["mount", "-t", "tracefs", "tracefs", "/sys/kernel/tracing"], check=True)
program = sys.argv[2].replace("NETNS", sys.argv[3])
proc = subprocess.Popen(["bpftrace", "-f", "json", "-e", program], stdout=subprocess.PIPE,
                        stderr=sys.stderr, text=True, bufsize=1)
print(json.dumps({"bpftrace": proc.pid}), flush=True)
calls = [0]


def pump():  # a thread: the traffic may stop, the clock must not wait for a line
    for line in proc.stdout:
        if not line.strip():  # bpftrace's exit prints blank lines
            continue
        msg = json.loads(line)
        if msg.get("type") == "attached_probes":
            print("ready", flush=True)
        elif msg.get("type") == "printf":
            calls[0] += len(msg["data"].split()) == 8  # parsed as a reader would


threading.Thread(target=pump, daemon=True).start()
time.sleep(float(sys.argv[1]))
print(json.dumps({"calls": calls[0]}), flush=True)
proc.terminate()
proc.wait(timeout=10)
"""


def _busy_s() -> float:
    """Every CPU's busy time since boot (user, nice, system, irq, softirq, steal), seconds."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _, _, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def _cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / CLK_TCK  # utime, stime


def _bpf_run_s(pid: int) -> float:
    """The run time of the BPF programs `pid` holds (needs kernel.bpf_stats_enabled)."""
    total = 0
    for fd in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            for line in fd.read_text().splitlines():
                if line.startswith("run_time_ns:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1e9


def _netns_inode(hosts: Hosts, host: str) -> int:
    out = hosts.exec(host, "python3", "-c", "import os; print(os.stat('/proc/self/ns/net')"
                                             ".st_ino)").stdout
    return int(out.strip())


def _readline(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def one(hosts: Hosts, method: str, rate: float, seconds: float) -> dict[str, Any]:
    """The traffic at `rate` for `seconds`, traced by `method` on b."""
    tracer, bpftrace_pid, cpu0, bpf0 = None, None, 0.0, 0.0
    if method == "ring":
        tracer = hosts.popen("b", sys.executable, "-c", RING, str(seconds + 5), "",
                             str(Path(__file__).parents[1]), stdout=subprocess.PIPE,
                             text=True)
    elif method in PROGRAMS:
        tracer = hosts.popen("b", sys.executable, "-c", READER, str(seconds + 20),
                             PROGRAMS[method], str(_netns_inode(hosts, "b")),
                             stdout=subprocess.PIPE, text=True)
        bpftrace_pid = json.loads(_readline(tracer))["bpftrace"]
    if tracer is not None:
        ready = _readline(tracer)
        if ready != "ready":
            raise SystemExit(f"{method} did not start: {ready!r}")
        cpu0 = _cpu_s(tracer.pid) + (_cpu_s(bpftrace_pid) if bpftrace_pid else 0.0)
        bpf0 = _bpf_run_s(bpftrace_pid) if bpftrace_pid else 0.0
    busy0 = _busy_s()
    client = hosts.popen("a", sys.executable, "-c", CLIENT, hosts.addresses["b"], str(PORT),
                         str(rate), str(seconds), str(CONNECTIONS), stdout=subprocess.PIPE,
                         text=True)
    requests = int(_readline(client))
    client.wait(timeout=30)
    busy = _busy_s() - busy0
    out: dict[str, Any] = {"method": method, "rate_per_s": rate, "requests": requests,
                           "busy_cores": busy / seconds}
    if tracer is not None:
        cpu = _cpu_s(tracer.pid) + (_cpu_s(bpftrace_pid) if bpftrace_pid else 0.0) - cpu0
        bpf = (_bpf_run_s(bpftrace_pid) - bpf0) if bpftrace_pid else 0.0
        said = json.loads(_readline(tracer))
        tracer.wait(timeout=30)
        out |= {"tracer_cpu_s": cpu, "bpf_s": bpf, "said": said}
    return out


def run(seconds: float, rates: list[float], repeats: int) -> list[dict[str, Any]]:
    hosts = make_pair()
    bpf_stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    before = bpf_stats.read_text().strip()
    try:
        bpf_stats.write_text("1")
        server = hosts.popen("b", sys.executable, "-c", SERVER, str(PORT),
                             stdout=subprocess.PIPE, text=True)
        assert _readline(server) == "ready"
        results = []
        for _ in range(repeats):
            for rate in rates:
                for method in ("none", "ring", *PROGRAMS):  # interleaved: drift hits all
                    results.append(one(hosts, method, rate, seconds))
                    print(json.dumps(results[-1]), flush=True)
        return results
    finally:
        bpf_stats.write_text(before)
        hosts.remove()


def summarise(results: list[dict[str, Any]], seconds: float) -> list[dict[str, Any]]:
    rows = []
    for rate in sorted({r["rate_per_s"] for r in results}):
        at = [r for r in results if r["rate_per_s"] == rate]
        base = [r["busy_cores"] for r in at if r["method"] == "none"]
        for method in ("ring", *PROGRAMS):
            got = [r for r in at if r["method"] == method]
            if not got:
                continue
            messages = sum(2 * r["requests"] for r in got)  # two messages a request at b
            cpu = sum(r["tracer_cpu_s"] + r["bpf_s"] for r in got)
            extra = sum(r["busy_cores"] for r in got) / len(got) - sum(base) / len(base)
            rows.append({"rate_per_s": rate, "method": method,
                         "messages_per_s": messages / (len(got) * seconds),
                         "tracer_pct": 100 * cpu / (len(got) * seconds),
                         "bpf_pct": 100 * sum(r["bpf_s"] for r in got) / (len(got) * seconds),
                         "machine_extra_pct": 100 * extra,
                         "tracer_us_per_message": 1e6 * cpu / messages,
                         "seen": [r["said"] for r in got]})
    return rows


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = ["## Tracing messages: packet ring against per-call tracepoints "
             "(`benchmarks/paths_capture_cost.py`)", "",
             "*threads* runs beside *ring* in the sniffer (each message's thread): their "
             "costs add.", "",
             f"{meta['when']}, kernel {meta['kernel']}, {meta['cpus']} cores (shared), "
             f"bpftrace {meta['bpftrace']}. One server host traced, request/response traffic "
             f"(50 B / 300 B, 8 persistent connections, Poisson), {meta['seconds']:g} s per run, "
             f"{meta['repeats']} run(s) of each, interleaved. *tracer*: the tracing processes' "
             "CPU plus their BPF programs' run time, % of one core; *machine*: the whole "
             "machine's busy time beyond the untraced runs' (the packet socket's kernel work "
             "included; noisy on a shared machine). Goal: under 2% of a core at the testbed's "
             "busiest host (~1,600 messages/s at 200 requests/s).", "",
             "| requests/s | messages/s at the host | method | tracer % | of it BPF % | "
             "machine % | tracer µs/message |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['rate_per_s']:g} | {r['messages_per_s']:.0f} | {r['method']} | "
                     f"{r['tracer_pct']:.2f} | {r['bpf_pct']:.2f} | "
                     f"{r['machine_extra_pct']:+.1f} | {r['tracer_us_per_message']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rates", default="200,800", help="requests/s, comma-separated")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    if os.geteuid() != 0 or shutil.which("bpftrace") is None:
        raise SystemExit("needs root and bpftrace (scripts/setup installs it)")
    rates = [float(x) for x in args.rates.split(",")]
    version = subprocess.run(["bpftrace", "--version"], capture_output=True, text=True).stdout
    meta = {"when": datetime.now(UTC).isoformat(timespec="seconds"),
            "kernel": platform.release(), "cpus": os.cpu_count(), "seconds": args.seconds,
            "repeats": args.repeats, "bpftrace": version.strip()}
    results = run(args.seconds, rates, args.repeats)
    rows = summarise(results, args.seconds)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"meta": meta, "rows": rows, "runs": results}, indent=1) + "\n")
    section = markdown(meta, rows)
    print(section)
    update_section(SECTION, section)


if __name__ == "__main__":
    main()

"""Accuracy, packet rate and CPU cost of the NFQUEUE injector, on real packets (root).

Two namespaces joined by veth; the daemon (`python -m injector`) runs in the sender's.

* accuracy: a constant 1, 5, 20 and 100 ms on a UDP link, idle and with both cores busy;
  error = RTT - base RTT - requested (end to end, 300 probes) and the daemon's own
  (release - arrival - requested) calipers;
* rate: UDP blasted at increasing rates through a 10 ms delay; held = every datagram arrived
  and every one went through the daemon (none bypassed by fail-open, none dropped);
* CPU: the daemon's user+system time per 10,000 packets at each rate.

    .venv/bin/python -m benchmarks.injector_accuracy [--quick]

Writes benchmarks/out/injector_accuracy.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.results_md import update_section
from linkgrad.protocol.injector import Add, HealthRequest, PhaseStats, StatsRequest
from testbed.pairs.hosts import Hosts, InjectorProcess, make_pair, make_routed

OUT = Path(__file__).with_name("out")
UDP_ECHO, UDP_SINK = 7201, 7202


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _constant(dst: str, magnitude_ms: float) -> Add:
    """The injector's `add` of a constant delay on UDP to `dst`."""
    return Add.model_validate({"link": {"proto": "udp", "dst": dst},
                               "schedule": {"kind": "constant", "magnitude_ms": magnitude_ms}})


def _first_link(daemon: InjectorProcess) -> PhaseStats:
    """The statistics of link 1's first (constant) schedule."""
    return daemon.ok(StatsRequest(link_id=1)).links["1"].schedules["0"]["constant"]


def _busy_cores(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def accuracy(hosts: Hosts, requested_ms: float, loaded: bool, probes: int,
             realtime: bool = False) -> dict[str, Any]:
    b = hosts.addresses["b"]
    base = hosts.probe("a", "udp", b, UDP_ECHO, 200, 0.005).rtt
    base_median = statistics.median(base)
    burners = _busy_cores(2) if loaded else []
    daemon = InjectorProcess(hosts, "a", "--queue", "6100", *(["--realtime"] if realtime else []))
    try:
        daemon.ok(_constant(f"{b}:{UDP_ECHO}", requested_ms))
        rtt = hosts.probe("a", "udp", b, UDP_ECHO, probes, 0.005).rtt
        stats = _first_link(daemon)
    finally:
        for p in burners:
            p.kill()
            p.wait()
        daemon.stop()
    errors_us = [(r - base_median - requested_ms / 1e3) * 1e6 for r in rtt if r == r]
    return {
        "requested_ms": requested_ms, "loaded": loaded, "realtime": realtime,
        "e2e_mean_error_us": statistics.mean(errors_us),
        "e2e_std_us": statistics.stdev(errors_us),
        "base_rtt_std_us": statistics.stdev(base) * 1e6,
        "daemon_mean_error_us": stats.error.mean_ms * 1e3,
        "daemon_std_us": stats.error.std_ms * 1e3,
        "packets": stats.actual.count,
    }



def _iperf_udp(hosts: Hosts, rate_per_s: float, seconds: float) -> tuple[int, int]:
    """(sent, lost) datagrams of 64 bytes at `rate_per_s`, by iperf3 (C: the load generator
    must not be the bottleneck on two cores), from a to b through the router r."""
    b = hosts.addresses["b"]
    server = hosts.popen("b", "iperf3", "-s", "-1", "-p", str(UDP_SINK), stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    out = hosts.exec("a", "iperf3", "-c", b, "-p", str(UDP_SINK), "-u", "-l", "64", "-b",
                     str(int(rate_per_s * 64 * 8)), "-t", str(int(seconds)), "-J").stdout
    server.wait(timeout=10)
    total = json.loads(out)["end"]["sum"]
    return int(total["packets"]), int(total["lost_packets"])


def rate(hosts: Hosts, rate_per_s: float, seconds: float,
         realtime: bool = False) -> dict[str, Any]:
    """The daemon on the router: a sender's own socket buffer would cap the rate at the
    sender (its held datagrams stay charged to it), which is not the daemon's limit."""
    b = hosts.addresses["b"]
    daemon = InjectorProcess(hosts, "r", "--queue", "6200", *(["--realtime"] if realtime else []))
    pid = daemon.ok(HealthRequest()).pid
    try:
        daemon.ok(_constant(f"{b}:{UDP_SINK}", 10))
        cpu0 = _cpu_s(pid)
        sent, lost = _iperf_udp(hosts, rate_per_s, seconds)
        received = sent - lost
        cpu = _cpu_s(pid) - cpu0
        time.sleep(0.2)  # let the last 10 ms of held packets go before counting
        stats = _first_link(daemon)
        health = daemon.ok(HealthRequest())
        drops = hosts.exec("r", "cat", "/proc/net/netfilter/nfnetlink_queue").stdout
    finally:
        daemon.stop()
    through_daemon = stats.actual.count
    queue = next(line.split() for line in drops.splitlines() if line.split()[0] == "6201")
    kernel_drops = int(queue[5]) + int(queue[6])  # queue_dropped + user_dropped
    queued = int(queue[7])  # id_sequence: packets the kernel gave the queue
    return {
        "rate_per_s": rate_per_s, "realtime": realtime, "sent": sent, "received": received,
        "through_daemon": through_daemon, "kernel_queue_drops": kernel_drops,
        "queued_by_kernel": queued, "callback_errors": health.callback_errors,
        "realtime_granted": health.realtime,
        "held": lost == 0 and through_daemon == queued >= sent and kernel_drops == 0
        and abs(stats.actual.mean_ms - 10) < 1,
        "achieved_per_s": sent / seconds,
        "daemon_cpu_s_per_10k": cpu / max(through_daemon, 1) * 1e4,
        "daemon_cpu_share": cpu / seconds,
        "mean_delay_ms": stats.actual.mean_ms,
    }


READING = """\
Reading it. The end-to-end error includes the NFQUEUE detour itself (kernel to daemon and
back, ~40-70 µs). Off-phase packets take the same detour (they are queued and accepted at
once), so it is in both halves of a square wave and cancels in the on-minus-off effect the
estimator measures. What the magnitude is off by is the daemon's on-phase error, +5 to +26 µs
idle, and that error is measured and reported, so the coordinator uses the actual mean (as the
thesis does with its +1 ms). With both cores busy, a default daemon waits for a CPU
(+38..+235 µs, std up to 0.9 ms). With `--realtime` it stays at +5..+10 µs. The end-to-end std
that remains then comes from the probe and echo processes, which are not real-time."""


def to_markdown(acc: list[dict[str, Any]], rates: list[dict[str, Any]]) -> str:
    lines = [
        "## Injector accuracy, rate and CPU (`benchmarks/injector_accuracy.py`)",
        "",
        f"NFQUEUE daemon in a namespace, UDP over veth, {platform.machine()}, 2 cores. Error = "
        "applied minus requested delay: end to end (RTT minus the median base RTT, 300 probes; "
        "its std includes the base RTT's own jitter) and as the daemon measures it. Loaded = "
        "two busy-loop processes, one per core. Goal: mean error < 50 µs, std < 20 µs. "
        "Thesis §4.1 (ip_queue + libipq, 2008): about +1 ms offset (one jiffy), overhead std "
        "< 5 µs, unaffected by CPU load.",
        "",
        "| requested | load | e2e mean error µs | e2e std µs | base RTT std µs | "
        "daemon mean error µs | daemon std µs | packets |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in acc:
        lines.append(
            f"| {r['requested_ms']:g} ms | {'both cores busy' if r['loaded'] else 'idle'}"
            f"{', --realtime' if r['realtime'] else ''} | "
            f"{r['e2e_mean_error_us']:+.0f} | {r['e2e_std_us']:.0f} | {r['base_rtt_std_us']:.0f} "
            f"| {r['daemon_mean_error_us']:+.0f} | {r['daemon_std_us']:.0f} | {r['packets']} |")
    lines += [
        "",
        "Packet rate through a 10 ms delay, the daemon on a router between iperf3 client and "
        "server (64-byte UDP; goal: 50,000 packets/s on one core, no drops). Held = iperf3 lost "
        "none, the daemon handled every packet the kernel queued (none bypassed by fail-open), "
        "and the mean delay stayed within 1 ms of 10 ms. Delaying at the *sender* caps a UDP "
        "sender lower (its held datagrams stay charged to its socket buffer: ~12k/s here).",
        "",
        "| offered /s | sent | received | through daemon | kernel drops | held | "
        "daemon CPU s per 10k packets | daemon CPU share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rates:
        lines.append(
            f"| {r['rate_per_s']:,.0f}{' (--realtime)' if r['realtime'] else ''} | "
            f"{r['sent']:,} | {r['received']:,} | "
            f"{r['through_daemon']:,} | {r['kernel_queue_drops']} | "
            f"{'yes' if r['held'] else '**no**'} | {r['daemon_cpu_s_per_10k']:.3f} | "
            f"{r['daemon_cpu_share']:.0%} |")
    return "\n".join([*lines, "", READING])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer points, no RESULTS.md")
    parser.add_argument("--from-json", action="store_true",
                        help="rewrite the RESULTS.md section from the last saved measurements")
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads((OUT / "injector_accuracy.json").read_text())
        update_section("injector_accuracy", to_markdown(saved["accuracy"], saved["rate"]))
        return
    if os.geteuid() != 0:
        sys.exit("injector_accuracy: needs root (namespaces, iptables, NFQUEUE)")
    hosts = make_pair()
    try:
        hosts.echo_servers("b", [], [UDP_ECHO])
        delays = (5, 20) if args.quick else (1, 5, 20, 100)
        acc = [accuracy(hosts, ms, loaded, 100 if args.quick else 300, realtime)
               for loaded, realtime in ((False, False), (True, False), (True, True))
               for ms in delays]
        for r in acc:
            print(json.dumps(r))
    finally:
        hosts.remove()
    hosts = make_routed()
    try:
        rates = []
        offered_rates = (20_000, 50_000) if args.quick else (10_000, 20_000, 35_000, 50_000,
                                                             70_000, 90_000)
        for offered, realtime in [*((r, False) for r in offered_rates), (20_000, True)]:
            rates.append(rate(hosts, offered, 2.0, realtime))
            print(json.dumps(rates[-1]))
            time.sleep(0.5)
    finally:
        hosts.remove()
    OUT.mkdir(exist_ok=True)
    (OUT / "injector_accuracy.json").write_text(json.dumps({"accuracy": acc, "rate": rates},
                                                           indent=2))
    if not args.quick:
        update_section("injector_accuracy", to_markdown(acc, rates))


if __name__ == "__main__":
    main()

"""SNAP's delayed-ACK estimate against a packet trace, per polling interval (SNAP §4.2, Fig. 3).

A namespace pair (testbed/pairs/hosts.py): a client in a, its server in b, on one veth. While
the application runs, the client's packets are captured in a (scapy, kernel timestamps, a
pcap) and one `python -m sniffer` per polling interval profiles a (`profile` with the table
interval pinned: fast_interval_min_s = table_interval_max_s = table_interval_s, so the budget
cannot speed the problem connection up to 50 ms polls).

Applications (the client has Nagle on; the server TCP_NODELAY, replies 64 B once it holds a
whole 64 B request; requests back to back):
  two_writes  every request written in two 32 B writes, then the reply read: Nagle holds the
      second write until the server's delayed ACK (Linux: ≥ 40 ms) of the first. Every request
      is delayed, but per data segment only half: the second segment's ACK rides on the reply.
  mixed       each request, with probability --mixed-share (seeded), in two writes as above,
      else in one 64 B write (no delay): per segment share / (1 + share) are delayed.
  one_way     (control) the paper's footnote-9 application: a 32 B message every 50-90 ms, no
      reply. On Linux the server ACKs at once when its read empties the buffer of a small
      segment on a connection not in ping-pong mode (tcp_cleanup_rbuf): no delayed ACK.

Truth d_t: the fraction of the client's data segments whose ACK (the first segment from the
server acknowledging all of it, pure or piggybacked) came at least --threshold-ms after it,
at the client's interface. SNAP's d_s = Σ delayed_acks / Σ data_segs_out over the client's
connection from the sniffer's reports; the error is the paper's (d_t − d_s) / d_t. Beside it:
the shipped count on the trace's own RTT sum (what an RTT tracer would give, min RTT taken
out), and the kernel's smoothed RTT replayed from the trace's RTT samples (its time average is
what Poisson polls see). The trace: benchmarks/snap_delayed_ack_trace.py; the processes:
benchmarks/snap_delayed_ack_procs.py; the section: benchmarks/snap_delayed_ack_report.py.

    sudo nice -n 5 .venv/bin/python -m benchmarks.snap_delayed_ack
        [--apps two_writes,mixed,one_way] [--duration-s 80] [--intervals 0.5,1,2,5,10]
    quick (< 1 min): --apps two_writes,mixed --duration-s 12 --intervals 0.5,2

Writes benchmarks/out/snap_delayed_ack.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import tempfile
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import scapy

from benchmarks.results_md import update_section
from benchmarks.snap_delayed_ack_procs import (
    BUDGET,
    Lines,
    Sniffer,
    profile_request,
    role,
    snap_result,
)
from benchmarks.snap_delayed_ack_report import errors, markdown
from benchmarks.snap_delayed_ack_trace import (
    ack_delays,
    formula_on_trace,
    matched_thresholds,
    read_pcap,
    truth,
)
from linkgrad.snap.classify import SnapThresholds
from testbed.pairs.hosts import make_pair

OUT = Path(__file__).parent / "out" / "snap_delayed_ack.json"
APPS = ("two_writes", "mixed", "one_way")
PORT = 7391


def run_app(app: str, args: argparse.Namespace, thresholds: SnapThresholds
            ) -> dict[str, Any]:
    hosts = make_pair()
    tmp = tempfile.TemporaryDirectory(prefix="snap-delayed-ack-")
    pcap = Path(args.keep_pcap or tmp.name) / f"{app}.pcap"
    pcap.parent.mkdir(parents=True, exist_ok=True)
    try:
        a, b = hosts.addresses["a"], hosts.addresses["b"]
        sniffers = [Sniffer(hosts, "a") for _ in args.settings]
        for i, (s, interval) in enumerate(zip(sniffers, args.settings, strict=True)):
            s.ask(profile_request(interval, args.seed + i))
        capture = Lines(hosts, "a", *role("capture", f"{hosts.tag}ab", str(pcap)))
        capture.expect("ready")
        Lines(hosts, "b", *role("server", app, str(PORT))).expect("ready")
        client = Lines(hosts, "a", *role("client", app, b, str(PORT), str(args.duration_s),
                                         str(args.mixed_share), str(args.seed)))
        port = json.loads(client.next())["port"]
        done = json.loads(client.next(args.duration_s + 30))
        for s in sniffers:
            s.ask({"id": 2, "cmd": "unprofile"})
        for proc in (client, capture):  # the connection closes after the sniffers' last reads
            proc.close_input()
            proc.proc.wait(timeout=15)
        for s in sniffers:
            s.end()
        delays = ack_delays(read_pcap(pcap, (a, port), (b, PORT)))
        true = truth(delays, args.threshold_ms / 1e3)
        matched = matched_thresholds(true, args.matched_max_queuing_ms / 1e3, thresholds)
        true["formula_on_trace"] = formula_on_trace(delays.delay_s, thresholds)
        true["formula_on_trace_matched"] = formula_on_trace(delays.delay_s, matched)
        snaps = {interval: snap_result(s.events, (a, port), PORT, thresholds, matched)
                 for interval, s in zip(args.settings, sniffers, strict=True)}
    finally:
        hosts.remove()  # every process it started, then the namespaces
        tmp.cleanup()
    return {"app": app, "client": done, "truth": true, "matched": asdict(matched),
            "snap": snaps}


def environment() -> dict[str, Any]:
    hz = next((line.split("=")[1] for line in _kernel_config() if line.startswith("CONFIG_HZ=")),
              None)
    return {"kernel": platform.release(), "hz": hz, "cpus": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__,
            "scapy": scapy.VERSION, "when": datetime.now(UTC).isoformat(timespec="seconds")}


def _kernel_config() -> list[str]:
    """The running kernel's build configuration, where it is given (HZ: the delayed-ACK
    timer's granularity)."""
    boot, proc = Path(f"/boot/config-{platform.release()}"), Path("/proc/config.gz")
    if boot.exists():
        return boot.read_text().splitlines()
    return gzip.decompress(proc.read_bytes()).decode().splitlines() if proc.exists() else []


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--apps", default=",".join(APPS),
                        help="applications, comma-separated, from %(default)s")
    parser.add_argument("--duration-s", type=float, default=80.0,
                        help="how long each application runs (all sniffers at once); the "
                        "longest interval should fit ≥ 5 times (default %(default)s)")
    parser.add_argument("--intervals", type=_floats, default=[0.5, 1.0, 2.0, 5.0, 10.0],
                        help="mean table intervals, s, comma-separated (default 0.5,1,2,5,10)")
    parser.add_argument("--no-budget", action="store_true",
                        help="no sniffer with the shipped budget beside the pinned ones")
    parser.add_argument("--mixed-share", type=float, default=0.75,
                        help="mixed: the share of requests written in two writes (default "
                        "%(default)s)")
    parser.add_argument("--threshold-ms", type=float, default=30.0,
                        help="an ACK this late or later is delayed (default %(default)s)")
    parser.add_argument("--matched-max-queuing-ms", type=float, default=1.0,
                        help="MaxQueuingDelay (Table 2's rule) of the diagnosis's matched "
                        "thresholds (default %(default)s; the veth queues microseconds)")
    parser.add_argument("--seed", type=int, default=1, help="client choices, Poisson polls")
    parser.add_argument("--keep-pcap", metavar="DIR", help="keep each application's pcap here")
    parser.add_argument("--no-results-md", action="store_true",
                        help="do not rewrite the section of benchmarks/RESULTS.md")
    parser.add_argument("--render", action="store_true",
                        help="only write the RESULTS.md section again from the saved JSON")
    args = parser.parse_args(argv)
    args.apps = [a for a in args.apps.split(",") if a]
    if unknown := sorted(set(args.apps) - set(APPS)):
        parser.error(f"--apps: unknown {unknown}; known: {list(APPS)}")
    if not args.intervals or min(args.intervals) < 0.01:
        parser.error("--intervals: at least one, each ≥ 0.01 s")
    args.settings = [f"{i:g}" for i in args.intervals] + ([] if args.no_budget else [BUDGET])
    if not 0 <= args.mixed_share <= 1:
        parser.error(f"--mixed-share={args.mixed_share} must be in [0, 1]")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.render:
        publish(json.loads(OUT.read_text()), args.no_results_md)
        return
    if os.geteuid() != 0:
        raise SystemExit("needs root: network namespaces, packet capture")
    thresholds = SnapThresholds()
    env = environment()
    results = []
    for app in args.apps:
        result = run_app(app, args, thresholds)
        results.append(result)
        t = result["truth"]
        print(f"{app}: d_t {t['d_t']:.3f} of {t['data_segments']} segments "
              f"({result['client']['requests']} requests); trace formula "
              f"{t['formula_on_trace']:.3f}; errors "
              + ", ".join(f"{k} s: {'—' if e is None else f'{e:.3f}'}"
                          for k, e in errors(result).items()), flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    saved = {"meta": {**env, "args": {k: v for k, v in vars(args).items() if k != "render"},
                      "thresholds": asdict(thresholds)}, "results": results,
             "errors": {r["app"]: errors(r) for r in results}}
    OUT.write_text(json.dumps(saved, indent=1) + "\n")
    print(f"wrote {OUT}")
    publish(saved, args.no_results_md)


def publish(saved: dict[str, Any], quiet: bool) -> None:
    section = markdown(saved)
    print(section)
    if not quiet:
        update_section("snap-delayed-ack", section)


if __name__ == "__main__":
    main()

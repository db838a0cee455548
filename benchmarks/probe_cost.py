"""What the host probe and calipers cost here (Kissel et al. §V.A), beside the paper's figure
and beside polling the same counters with `vmstat`.

1. Calipers, measured as the paper measured NL-Calipers: a loop of calculations over an array,
   run plain and with each iteration timed and summarised (`Calipers.time`, the clock reads
   included); the overhead per iteration is the difference of the two loops' times over the
   iterations. One data point per `--point-s` of each loop (the two take turns), `--points`
   points, 10% trimmed mean as the paper's. Beside it: `Calipers.add` alone (an event with no
   duration), and keeping every event instead (a list of (start, end, value), summarised by
   numpy once per point: what calipers avoid).
2. The host probe at its default rates: the sniffer's `HostProber` (sample 1 s, report 5 s)
   and a fast context (sample 0.1 s, report 1 s) in a child process each for `--probe-s`,
   CPU from the child's /proc/PID/stat beside an idle child's (the interpreter alone), and
   `vmstat 1` over the same time reading the same /proc files.

    .venv/bin/python -m benchmarks.probe_cost [--points 60] [--probe-s 60]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from scipy.stats import trim_mean

from benchmarks.results_md import update_section
from coordinator.config.experiment import Probes
from linkgrad.calipers import Calipers, Moments

PAPER_NS = 103.0  # pooled 10% trimmed mean, ns per iteration (§V.A)
ROOT = Path(__file__).resolve().parent.parent
WORK = np.arange(64, dtype=np.float64)


def _work() -> float:
    return float(WORK.sum())  # "a loop that performed calculations over an array"


def _plain(n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        _work()
    return time.perf_counter() - t


def _timed(n: int, c: Calipers) -> float:
    clock = time.perf_counter
    t = clock()
    for _ in range(n):
        t0 = clock()
        _work()
        c.time(64.0, t0, clock())
    return clock() - t


def _one_at_a_time(n: int) -> float:
    """The calipers' update as it was before blocks: three Welford series per event."""
    clock = time.perf_counter
    value, rate, gap = Moments(), Moments(), Moments()
    end = -math.inf
    t = clock()
    for _ in range(n):
        t0 = clock()
        _work()
        t1 = clock()
        value.add(64.0)
        if t1 > t0:
            rate.add(64.0 / (t1 - t0))
        if end > -math.inf:
            gap.add(max(t0 - end, 0.0))
        end = max(end, t1)
    return clock() - t


def _added(n: int, c: Calipers) -> float:
    t = time.perf_counter()
    for _ in range(n):
        c.add(_work())
    return time.perf_counter() - t


def _kept(n: int) -> float:
    clock = time.perf_counter
    t = clock()
    events = []
    for _ in range(n):
        t0 = clock()
        _work()
        events.append((t0, clock(), 64.0))
    a = np.array(events)
    d = a[:, 1] - a[:, 0]
    r = a[:, 2] / d[d > 0]
    _ = (a[:, 2].sum(), d.mean(), d.std(ddof=1), r.mean(), r.std(ddof=1), d.min(), d.max())
    return clock() - t


def calipers_cost(points: int, point_s: float) -> dict[str, float]:
    n = max(1000, int(point_s / max(_plain(20000) / 20000, 1e-9)))  # iterations per point
    timed, added, kept, single = [], [], [], []
    for _ in range(points):
        plain = _plain(n)
        timed.append((_timed(n, Calipers()) - plain) / n * 1e9)
        single.append((_one_at_a_time(n) - plain) / n * 1e9)
        added.append((_added(n, Calipers()) - plain) / n * 1e9)
        kept.append((_kept(n) - plain) / n * 1e9)
    return {"iterations": n, "plain_ns": _plain(n) / n * 1e9,
            "timed_ns": float(trim_mean(timed, 0.1)), "added_ns": float(trim_mean(added, 0.1)),
            "kept_ns": float(trim_mean(kept, 0.1)),
            "single_ns": float(trim_mean(single, 0.1)),
            "timed_q": tuple(np.percentile(timed, [25, 75]))}


PROBE = textwrap.dedent("""
    import io, sys, time
    from linkgrad.protocol.hosts import Probe
    from linkgrad.protocol.jsonlines import LineWriter
    from sniffer.host_prober import HostProber
    sample, report, seconds = map(float, sys.argv[1:4])
    out = io.StringIO()
    if sample > 0:
        prober = HostProber(LineWriter(out))
        prober.start(Probe(context="cost", sample_interval_s=sample, report_interval_s=report))
    print("ready", flush=True)
    time.sleep(seconds)
    if sample > 0:
        prober.stop()
    print(len(out.getvalue().splitlines()), flush=True)
    time.sleep(60)  # read by the parent, then killed
""")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _child_cpu(argv: list[str], seconds: float, ready: bool) -> tuple[float, str]:
    """A child's CPU over `seconds` from when it says ready (or starts), and what it printed."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        if ready:
            proc.stdout.readline()
        start = _cpu_s(proc.pid)
        time.sleep(seconds + 0.5)
        said = proc.stdout.readline().strip() if ready else ""
        return _cpu_s(proc.pid) - start, said
    finally:
        proc.kill()
        proc.wait()


def probe_cost(seconds: float) -> list[tuple[str, float, str]]:
    python = [sys.executable, "-c", PROBE]
    idle, _ = _child_cpu([*python, "0", "0", str(seconds)], seconds, True)
    rows = []
    p = Probes()
    for label, sample, report in (
            (f"HostProber, sample {p.slow_sample_s:g} s, report {p.slow_report_s:g} s "
             "(a run's slow rate)", p.slow_sample_s, p.slow_report_s),
            (f"HostProber, sample {p.fast_sample_s:g} s, report {p.fast_report_s:g} s "
             "(a run's fast rate, on a measured link's hosts)", p.fast_sample_s,
             p.fast_report_s),
            ("HostProber, sample 0.1 s, report 1 s", 0.1, 1.0)):
        cpu, reports = _child_cpu([*python, str(sample), str(report), str(seconds)], seconds,
                                  True)
        rows.append((label, (cpu - idle) / seconds * 100, f"{reports} reports"))
    cpu, _ = _child_cpu(["vmstat", "1", str(int(seconds) + 5)], seconds, False)
    rows.append(("vmstat 1 (CPU, memory, run queue, swap, block I/O)", cpu / seconds * 100, ""))
    return rows


def markdown(cal: dict[str, float], probe: list[tuple[str, float, str]], points: int,
             seconds: float) -> str:
    when = datetime.now(UTC).isoformat(timespec="seconds")
    lo, hi = cal["timed_q"]
    lines = [
        "## Host probe and calipers cost (`benchmarks/probe_cost.py`)", "",
        f"{when}, kernel {platform.release()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, one run. Calipers as the paper measured NL-Calipers "
        f"(§V.A): a loop of calculations over a 64-element array run plain and with each "
        f"iteration timed and summarised, {cal['iterations']:,} iterations per data point, "
        f"{points} points, 10% trimmed mean of the difference per iteration (the plain "
        f"iteration takes {cal['plain_ns']:.0f} ns).", "",
        "| per event | ours, ns (quartiles) | paper, ns | ours / paper |",
        "|---|---|---|---|",
        f"| timed and summarised (`Calipers.time`, two clock reads) | {cal['timed_ns']:.0f} "
        f"({lo:.0f}–{hi:.0f}) | {PAPER_NS:.0f} (C, NL-Calipers) | "
        f"{cal['timed_ns'] / PAPER_NS:.1f} |",
        f"| timed, each event a Python update of three series (Welford, no block) | "
        f"{cal['single_ns']:.0f} | — | — |",
        f"| a value summarised (`Calipers.add`) | {cal['added_ns']:.0f} | — | — |",
        f"| kept per event, summarised once per point by numpy (the alternative) | "
        f"{cal['kept_ns']:.0f} | — | — |", "",
        f"The host probe at its rates for {seconds:g} s each, a child process's CPU "
        "(/proc/PID/stat) less an idle interpreter's; `vmstat` reads the same /proc files "
        "(sar is not installed here).", "",
        "| collector | % of one core | |", "|---|---|---|"]
    lines += [f"| {label} | {pct:.2f} | {note} |" for label, pct, note in probe]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=60)
    parser.add_argument("--point-s", type=float, default=0.25)
    parser.add_argument("--probe-s", type=float, default=60.0)
    args = parser.parse_args()
    cal = calipers_cost(args.points, args.point_s)
    probe = probe_cost(args.probe_s)
    text = markdown(cal, probe, args.points, args.probe_s)
    print(text)
    update_section("probe-cost", text)


if __name__ == "__main__":
    main()

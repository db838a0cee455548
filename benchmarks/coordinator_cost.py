"""The coordinator's own cost per host: `linkgrad profile` over every host of running
testbeds of different sizes, its process sampled from /proc four times a second (resident
memory, threads, CPU time). Two ways over the same hosts: *idle* (every daemon started and
connected, no report asked for during the window: `--report-interval` as long as the profile)
and *measuring* (every host reporting each second, the coordinator correlating them). Steady
figures are over the profile's window, from 1 s after "profiling N host(s)" to 1 s before
its end; the start's peak beside them.

    linkgrad testbed up && linkgrad testbed up --services 24 --tag c25 \\
        && linkgrad testbed up --services 49 --tag c50
    .venv/bin/python -m benchmarks.coordinator_cost --tags tb,c25,c50

Writes benchmarks/out/coordinator_cost.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.fanout_profile import explicit_experiment
from benchmarks.on_testbed import LINKGRAD, scratch_root
from benchmarks.results_md import update_section

OUT = Path(__file__).with_name("out")
DURATION_S = 20.0
TICK = os.sysconf("SC_CLK_TCK")


def _sample(pid: int) -> tuple[float, float, int, float] | None:
    """(monotonic time, RSS MB, threads, CPU seconds) of `pid`, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_mb = int(fields["VmRSS"].split()[0]) / 1024
    return (time.monotonic(), rss_mb, int(fields["Threads"]),
            (int(stat[11]) + int(stat[12])) / TICK)  # utime, stime


def one_run(experiment: Path, report_interval_s: float) -> dict[str, Any]:
    """The command's samples and the moment it said it was profiling."""
    proc = subprocess.Popen([LINKGRAD, "profile", str(experiment), "--duration",
                             str(DURATION_S), "--report-interval", str(report_interval_s),
                             "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    started = time.monotonic()
    profiling: list[float] = []
    said: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            said.append(line)
            if line.startswith("profiling ") and not profiling:
                profiling.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    samples = []
    while proc.poll() is None:
        if (s := _sample(proc.pid)) is not None:
            samples.append(s)
        time.sleep(0.25)
    reader.join(10)
    if proc.returncode != 0 or not profiling:
        sys.exit(f"coordinator_cost: profile failed ({proc.returncode}):\n{''.join(said)[-2000:]}")
    t0 = profiling[0]
    window = [s for s in samples if t0 + 1 <= s[0] <= t0 + DURATION_S - 1]
    start = [s for s in samples if s[0] < t0]
    cpu = (window[-1][3] - window[0][3]) / (window[-1][0] - window[0][0])
    return {"wall_s": time.monotonic() - started, "start_s": t0 - started,
            "rss_mb": max(s[1] for s in window), "threads": max(s[2] for s in window),
            "cpu_percent": 100 * cpu, "start_peak_rss_mb": max(s[1] for s in start),
            "start_peak_threads": max(s[2] for s in start),
            "start_cpu_s": start[-1][3] if start else 0.0}


def measure(root: Path, tags: list[str]) -> dict[str, Any]:
    rows = []
    for tag in tags:
        experiment = explicit_experiment(root, tag, 10)
        hosts = len(json.loads(experiment.read_text())["hosts"])
        for way, interval in (("idle", DURATION_S), ("measuring", 1.0)):
            run = one_run(experiment, interval)
            rows.append({"tag": tag, "hosts": hosts, "way": way, **run})
            print(f"{hosts} hosts {way}: " + ", ".join(
                f"{k} {v:.1f}" for k, v in run.items()), flush=True)
    return {"rows": rows, "duration_s": DURATION_S,
            "machine": f"{platform.node()} {platform.release()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def markdown(result: dict[str, Any]) -> str:
    lines = []
    for r in result["rows"]:
        lines.append(f"| {r['hosts']} | {r['way']} | {r['rss_mb']:.0f} | {r['threads']} | "
                     f"{r['cpu_percent']:.1f} | {r['start_peak_rss_mb']:.0f} | "
                     f"{r['start_peak_threads']} | {r['start_cpu_s']:.1f} |")
    by = {(r["hosts"], r["way"]): r for r in result["rows"]}
    sizes = sorted({r["hosts"] for r in result["rows"]})
    slope = ""
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        per = {k: (by[(hi, "measuring")][k] - by[(lo, "measuring")][k]) / (hi - lo)
               for k in ("rss_mb", "threads", "cpu_percent")}
        slope = (f"Per host, from {lo} to {hi} hosts while measuring: "
                 f"{per['rss_mb']:.2f} MB, {per['threads']:.1f} threads, "
                 f"{per['cpu_percent']:.2f}% of a core.")
    return "\n".join([
        "## The coordinator's own cost per host (`benchmarks/coordinator_cost.py`)",
        "",
        f"{result['machine']}, {result['date']}: `linkgrad profile --duration "
        f"{result['duration_s']:.0f}` over every host of a running testbed (the 6-host one and "
        "generated ones), one run per row. *idle*: every daemon started, no report during the "
        "window; *measuring*: every host reporting each second. Steady figures over the "
        "profile's window (its highest resident memory and thread count, CPU as a share of "
        "one core); the start (connect, sniffers, SNAP) beside them. The hosts' own daemons "
        "share this machine's two cores, so the coordinator's CPU here is an upper bound.",
        "",
        "| hosts | way | RSS, MB | threads | CPU, % of a core | start: peak RSS, MB | "
        "start: peak threads | start: CPU, s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *lines,
        "",
        slope,
        "",
        "Reproduce (root, the testbeds up): `.venv/bin/python -m benchmarks.coordinator_cost "
        "--tags tb,c25,c50`."])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tags", default="tb", help="running testbeds, comma-separated")
    args = p.parse_args()
    root = scratch_root("coordinator_cost")
    result = measure(root, args.tags.split(","))
    OUT.mkdir(exist_ok=True)
    (OUT / "coordinator_cost.json").write_text(json.dumps(result, indent=2))
    update_section("coordinator_cost", markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()

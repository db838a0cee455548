"""How fast the default testbed comes up and goes down, and what request rate it sustains.

Up/down: three times each. Capacity: open-loop Poisson load at rising rates for 10 s each,
with two mixes (the RUBiS transactions, fast queries; and every transaction, which includes
100-200 ms backend calls). A rate is sustained when the load generator issued every request on
time (p99 issue lag < 10 ms), nothing failed, and the median response time stayed within twice
its low-load value. The load generator's own CPU is measured from its rusage.

    .venv/bin/python -m benchmarks.testbed_capacity [--quick]

Writes benchmarks/out/testbed_capacity.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.on_testbed import scratch_root
from benchmarks.results_md import update_section
from testbed.description import DescribedTestbed
from testbed.lifecycle import down, up
from testbed.topology import DEFAULT

OUT = Path(__file__).with_name("out")


def up_down_times(repeats: int) -> dict[str, float]:
    ups, downs = [], []
    root = scratch_root("testbed_capacity")
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            up(DEFAULT, "bn", root)
            ups.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            down("bn", root=root)
            downs.append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"up_median_s": statistics.median(ups), "down_median_s": statistics.median(downs),
            "up_s": ups, "down_s": downs}


def run_load(info: DescribedTestbed, mix: str, rate: float, seconds: float) -> dict[str, Any]:
    client = info.with_role("client")[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(["ip", "netns", "exec", client.namespace, sys.executable, "-m",
                          "testbed.loadgen", "--url", info.frontend_url, "--mix", mix,
                          "--rate", str(rate), "--duration", str(seconds), "--json"],
                         capture_output=True, text=True, timeout=seconds + 120, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(out.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    medians = [v["median"] for v in result["response_ms"].values()]
    return {"rate_per_s": rate, "achieved_per_s": result["achieved_per_s"],
            "errors": result["errors"], "issue_lag_p99_ms": result["issue_lag_ms"]["p99"],
            "median_of_medians_ms": statistics.median(medians) if medians else None,
            "loadgen_cpu_share": cpu / seconds}


def capacity(info: DescribedTestbed, mix: str, rates: list[float], seconds: float) -> list[dict]:
    rows, base = [], None
    for rate in rates:
        row = run_load(info, mix, rate, seconds)
        base = base or row["median_of_medians_ms"]
        row["sustained"] = (row["errors"] == 0 and (row["issue_lag_p99_ms"] or 0) < 10
                            and row["median_of_medians_ms"] <= 2 * base)
        rows.append(row)
        print(json.dumps(row))
        if not row["sustained"]:
            break
    return rows


def to_markdown(updown: dict[str, float], loads: dict[str, list[dict]]) -> str:
    lines = [
        "## Testbed: bring-up time and capacity (`benchmarks/testbed_capacity.py`)",
        "",
        f"Default topology (client, web, app1, app2, db, cache) on this 2-core machine: up in "
        f"{updown['up_median_s']:.1f} s, down in {updown['down_median_s']:.1f} s (median of "
        f"{len(updown['up_s'])}; up includes initdb and seeding 26k rows). The thesis's "
        "testbed was separate machines, so it gives no such figure.",
        "",
        "Open-loop Poisson load for 10 s per rate. Sustained = no errors, p99 issue lag "
        "< 10 ms, median response within 2x its low-load value. The load generator's CPU is "
        "its own overhead on the same 2 cores.",
        "",
        "| mix | offered /s | achieved /s | errors | issue lag p99 ms | median response ms | "
        "load generator CPU | sustained |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mix, rows in loads.items():
        for r in rows:
            lines.append(
                f"| {mix} | {r['rate_per_s']:g} | {r['achieved_per_s']:.1f} | {r['errors']} | "
                f"{r['issue_lag_p99_ms'] or 0:.1f} | {r['median_of_medians_ms']:.1f} | "
                f"{r['loadgen_cpu_share']:.0%} | {'yes' if r['sustained'] else '**no**'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    updown = up_down_times(1 if args.quick else 3)
    print(json.dumps(updown))
    root = scratch_root("testbed_capacity")
    try:
        info = up(DEFAULT, "bn", root)
        rubis = ",".join(f"{t.path}=1" for t in info.transactions
                         if t.path.startswith("/rubis/"))
        every = ",".join(f"{t.path}=1" for t in info.transactions)
        rates = [50.0, 100.0] if args.quick else [50.0, 100.0, 200.0, 300.0, 400.0, 600.0, 800.0]
        seconds = 5.0 if args.quick else 10.0
        loads = {"RUBiS": capacity(info, rubis, rates, seconds),
                 "every transaction": capacity(info, every, rates, seconds)}
    finally:
        down("bn", root=root)
        shutil.rmtree(root, ignore_errors=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "testbed_capacity.json").write_text(json.dumps({"updown": updown, "loads": loads},
                                                          indent=2))
    if not args.quick:
        update_section("testbed_capacity", to_markdown(updown, loads))


if __name__ == "__main__":
    main()

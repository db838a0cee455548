"""What SNAP's profiling costs the machine when many testbed hosts share its kernel: the CPU
of every sniffer and its socket-call tracer (bpftrace) while `linkgrad profile` runs under an
open-loop load, with the budget split among the hosts of one kernel (as shipped) against each
host keeping 2-5% of a core whole (as before). The two ways alternate on one testbed; each is
measured over a window after the start has settled, from /proc's per-process CPU times.

    linkgrad testbed up --services 50 --tag g50 &&
    PYTHONPATH=. .venv/bin/python -m benchmarks.snap_shared_budget --tag g50 [--runs 1]

Writes benchmarks/out/snap_shared_budget-HOSTS.json and its section of benchmarks/RESULTS.md.
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

from benchmarks.fanout_profile import explicit_experiment
from benchmarks.on_testbed import LINKGRAD, scratch_root
from benchmarks.results_md import publish

SETTLE_S, WINDOW_S = 30.0, 30.0  # after "profiling N host(s)": the budget's steps, then this
RATE = 10.0
# `linkgrad profile`, with argv[1] "whole" giving every host the whole budget as before
WRAPPED = """
import sys
import coordinator.live.session as s
from linkgrad.snap.shared_budget import SharedBudget
if sys.argv[1] == "whole":
    s.shared_budgets = lambda kernels, lo, hi: (
        {h: SharedBudget(lo, hi, 1) for h in kernels}, None)
from coordinator.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def cpu_ticks() -> dict[str, tuple[int, str]]:
    """Every process's user + system clock ticks, and which kind it is."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        kind = ("bpftrace" if argv and argv[0].endswith(b"bpftrace") else
                "sniffer" if b"sniffer" in argv[:3] and b"-m" in argv[:3] else "other")
        out[pid] = (int(fields[11]) + int(fields[12]), kind)
    return out


def cores_by_kind(window_s: float) -> dict[str, float]:
    before = cpu_ticks()
    time.sleep(window_s)
    after = cpu_ticks()
    hz = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {"sniffer": 0.0, "bpftrace": 0.0}
    for pid, (ticks, kind) in after.items():
        if kind in used:
            used[kind] += (ticks - before.get(pid, (0, kind))[0]) / hz / window_s
    return used


def one(python: str, experiment: Path, tag: str, way: str) -> dict[str, float]:
    load = subprocess.Popen([LINKGRAD, "testbed", "load", "--tag", tag, "--rate", str(RATE),
                             "--duration", "400"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    profile = subprocess.Popen([python, "-c", WRAPPED, way, "profile", str(experiment),
                                "--duration", str(SETTLE_S + WINDOW_S + 20), "--json"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert profile.stderr is not None
        for line in profile.stderr:  # the start is over when it says it profiles
            if line.startswith("profiling "):
                break
        else:
            sys.exit(f"snap_shared_budget: profile ({way}) ended before profiling")
        time.sleep(SETTLE_S)
        used = cores_by_kind(WINDOW_S)
        profile.stderr.read()
        if profile.wait(timeout=300) not in (0, 1):
            sys.exit(f"snap_shared_budget: profile ({way}) failed")
        return used
    finally:
        for p in (profile, load):
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=60)


def measure(root: Path, tag: str, runs: int) -> dict[str, Any]:
    experiment = explicit_experiment(root, tag, 10)
    hosts = len(json.loads(experiment.read_text())["hosts"])
    python = str(Path(LINKGRAD).parent / "python")
    cores: dict[str, list[dict[str, float]]] = {"shared": [], "whole": []}
    for i in range(runs):
        for way in (("shared", "whole") if i % 2 == 0 else ("whole", "shared")):
            cores[way].append(got := one(python, experiment, tag, way))
            print(f"run {i + 1} {way}: " + ", ".join(f"{k} {v:.3f} cores"
                                                     for k, v in got.items()), flush=True)
    return {"hosts": hosts, "runs": runs, "rate_per_s": RATE, "window_s": WINDOW_S,
            "settle_s": SETTLE_S, "cores": cores,
            "machine": f"{platform.node()} {platform.release()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def markdown(result: dict[str, Any]) -> str:
    n = result["hosts"]
    rows = []
    for way, label in (("whole", "each host 2-5% (before)"),
                       ("shared", f"split among the {n} hosts of one kernel")):
        got = result["cores"][way]
        sniff = statistics.median(g["sniffer"] for g in got)
        trace = statistics.median(g["bpftrace"] for g in got)
        rows.append(f"| {label} | {sniff:.3f} | {trace:.3f} | {sniff + trace:.3f} | "
                    f"{100 * (sniff + trace) / n:.2f} |")
    return "\n".join([
        "## SNAP's cost when hosts share a kernel (`benchmarks/snap_shared_budget.py`)",
        "",
        f"{result['machine']}, {result['date']}: `linkgrad profile` over the {n}-host testbed "
        f"under an open-loop load of {result['rate_per_s']:g} requests/s, {result['runs']} "
        "run(s) of each way, alternated; CPU of every sniffer and socket-call tracer "
        f"(bpftrace) over {result['window_s']:g} s, {result['settle_s']:g} s after the "
        "profile started (medians over runs).",
        "",
        "| budget | sniffers, cores | tracers, cores | together, cores | per host, % of a "
        "core |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
        "Reproduce (root): `linkgrad testbed up --services 50 --tag g50 && PYTHONPATH=. "
        ".venv/bin/python -m benchmarks.snap_shared_budget --tag g50`."])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--tag", default="g50")
    args = p.parse_args()
    root = scratch_root("snap_shared_budget")
    result = measure(root, args.tag, args.runs)
    publish(f"snap_shared_budget-{result['hosts']}", result, markdown(result))


if __name__ == "__main__":
    main()

"""`linkgrad profile --duration 5` over every host of a running testbed: the hosts connected
to and their sniffers started `ssh.parallel` (10) at a time, stopped at once (the default),
against one host at a time (the same code with `ssh.parallel: 1` and one daemon at a time, as
every command worked before issue 31), alternated run by run on the same testbed. Wall time
of the whole command, from its start to its exit, as a user waits for it; the overhead is
that minus the 5 s of profiling; and each phase's.

    linkgrad testbed up && .venv/bin/python -m benchmarks.fanout_profile [--runs 5] [--tag tb]

Writes benchmarks/out/fanout_profile-HOSTS.json and its section of benchmarks/RESULTS.md.
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

from benchmarks.on_testbed import LINKGRAD, scratch_root
from benchmarks.results_md import publish

DURATION_S = 5
PHASES = ("open_hosts", "start_profiling", "stop_profiling", "close")  # as WRAPPED times
# the command as `linkgrad` runs it, each phase's wall time said on stderr; argv[1] is the
# daemons' bound ("-": as shipped, "1": one at a time)
WRAPPED = """
import sys, time
import coordinator.live.session as s
if sys.argv[1] != "-":
    s.CHANNELS_AT_ONCE = int(sys.argv[1])
def timed(name):
    orig = getattr(s.Session, name)
    def phase(self, *a, **k):
        t = time.monotonic()
        try:
            return orig(self, *a, **k)
        finally:
            print(f"phase {name} {time.monotonic() - t:.3f}", file=sys.stderr, flush=True)
    setattr(s.Session, name, phase)
for name in ("open_hosts", "start_profiling", "stop_profiling", "close"):
    timed(name)
from coordinator.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def explicit_experiment(root: Path, tag: str, parallel: int) -> Path:
    """The testbed's hosts spelled out, with `ssh.parallel`."""
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": os.environ.get("LINKGRAD_TESTBED_ROOT", "")}
    env = {k: v for k, v in env.items() if v}
    info = json.loads(subprocess.run([LINKGRAD, "testbed", "status", "--tag", tag, "--json"],
                                     capture_output=True, text=True, env=env, check=True,
                                     timeout=60).stdout)
    if not info.get("up"):
        sys.exit(f"fanout_profile: testbed {tag} is not up: `linkgrad testbed up --tag {tag}`")
    path = root / f"fanout-{parallel}.yaml"
    path.write_text(json.dumps({
        "name": f"fanout-{parallel}", "hosts": [{"name": h["name"]} for h in info["hosts"]],
        "ssh": {"config": info["ssh_config"], "known_hosts": info["known_hosts"],
                "python": str(Path(LINKGRAD).parent / "python"), "parallel": parallel},
        "web_log": {"host": info["web_log"]["host"], "path": info["web_log"]["path"]},
        "transactions": {"all": "^/"}}))
    return path


def timed(argv: list[str]) -> tuple[float, dict[str, float]]:
    """The command's wall time and each phase's."""
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"fanout_profile: {' '.join(argv[:3])} failed:\n{done.stderr[-3000:]}")
    phases = {line.split()[1]: float(line.split()[2]) for line in done.stderr.splitlines()
              if line.startswith("phase ")}
    return took, phases


def measure(root: Path, tag: str, runs: int) -> dict[str, Any]:
    at_once, serial = explicit_experiment(root, tag, 10), explicit_experiment(root, tag, 1)
    hosts = len(json.loads(at_once.read_text())["hosts"])
    python = str(Path(LINKGRAD).parent / "python")
    args = ["--duration", str(DURATION_S), "--json"]
    argv = {"at once": [python, "-c", WRAPPED, "-", "profile", str(at_once), *args],
            "one by one": [python, "-c", WRAPPED, "1", "profile", str(serial), *args]}
    walls: dict[str, list[float]] = {way: [] for way in argv}
    phases: dict[str, list[dict[str, float]]] = {way: [] for way in argv}
    for i in range(runs):
        for way in (("at once", "one by one") if i % 2 == 0 else ("one by one", "at once")):
            wall, phase = timed(argv[way])
            walls[way].append(wall)
            phases[way].append(phase)
            print(f"run {i + 1} {way}: {wall:.1f} s "
                  + ", ".join(f"{k} {v:.1f}" for k, v in phase.items()), flush=True)
    return {"hosts": hosts, "duration_s": DURATION_S, "runs": runs, "walls_s": walls,
            "phases_s": phases,
            "machine": f"{platform.node()} {platform.release()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def markdown(result: dict[str, Any]) -> str:
    n, d = result["hosts"], result["duration_s"]
    rows = []
    for way, walls in result["walls_s"].items():
        median = statistics.median(walls)
        each = {name: statistics.median(p.get(name, 0.0) for p in result["phases_s"][way])
                for name in PHASES}
        rows.append(f"| {way} | {median:.1f} | {min(walls):.1f}–{max(walls):.1f} | "
                    f"{(median - d) / n:.2f} | " + " | ".join(f"{each[k]:.1f}" for k in PHASES)
                    + " |")
    return "\n".join([
        "## Many hosts at once: `linkgrad profile --duration 5` (`benchmarks/fanout_profile.py`)",
        "",
        f"{result['machine']}, {result['date']}: the {n}-host testbed, {result['runs']} "
        "run(s) of each way, alternated. Wall time of the whole command (its own start, "
        "connect, start every sniffer and SNAP with its socket-call tracer, profile 5 s, stop, "
        "answer); overhead per host = (median - 5 s) / hosts; the phases' medians beside it. "
        "*one by one* is the same code with `ssh.parallel: 1` and one daemon at a time, as "
        "every command worked before.",
        "",
        "| way | median wall, s | range, s | overhead per host, s | connect and start the "
        "sniffers, s | start SNAP, s | stop SNAP, s | close, s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        "Reproduce (root, a testbed up): `.venv/bin/python -m benchmarks.fanout_profile`."])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tag", default="tb")
    args = p.parse_args()
    root = scratch_root("fanout_profile")
    result = measure(root, args.tag, args.runs)
    publish(f"fanout_profile-{result['hosts']}", result, markdown(result))


if __name__ == "__main__":
    main()

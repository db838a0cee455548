"""`linkgrad profile --duration 5` over every host of a running testbed: the hosts connected
to, their sniffers started, profiled and stopped at once (the default) against one host at a
time (the same code with `ssh.parallel: 1` and one daemon at a time, as every command worked
before issue 31), alternated run by run on the same testbed. Wall time of the whole command,
from its start to its exit, as a user waits for it; the overhead is that minus the 5 s of
profiling.

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
from benchmarks.results_md import update_section

OUT = Path(__file__).with_name("out")
DURATION_S = 5
# the command as `linkgrad` runs it, its daemons bounded to one host at a time
ONE_BY_ONE = ("import sys, coordinator.live.session as s; s.CHANNELS_AT_ONCE = 1; "
              "from coordinator.cli.main import main; sys.exit(main(sys.argv[1:]))")


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


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"fanout_profile: {' '.join(argv[:3])} failed:\n{done.stderr[-3000:]}")
    return took


def measure(root: Path, tag: str, runs: int) -> dict[str, Any]:
    at_once, serial = explicit_experiment(root, tag, 10), explicit_experiment(root, tag, 1)
    hosts = len(json.loads(at_once.read_text())["hosts"])
    args = ["profile", "--duration", str(DURATION_S), "--json"]
    walls: dict[str, list[float]] = {"at once": [], "one by one": []}
    for i in range(runs):
        for way in (("at once", "one by one") if i % 2 == 0 else ("one by one", "at once")):
            if way == "at once":
                argv = [LINKGRAD, args[0], str(at_once), *args[1:]]
            else:
                argv = [str(Path(LINKGRAD).parent / "python"), "-c", ONE_BY_ONE, args[0],
                        str(serial), *args[1:]]
            walls[way].append(timed(argv))
            print(f"run {i + 1} {way}: {walls[way][-1]:.1f} s", flush=True)
    return {"hosts": hosts, "duration_s": DURATION_S, "runs": runs, "walls_s": walls,
            "machine": f"{platform.node()} {platform.release()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def markdown(result: dict[str, Any]) -> str:
    n, d = result["hosts"], result["duration_s"]
    rows = []
    for way, walls in result["walls_s"].items():
        median = statistics.median(walls)
        rows.append(f"| {way} | {median:.1f} | {min(walls):.1f}–{max(walls):.1f} | "
                    f"{(median - d) / n:.2f} |")
    return "\n".join([
        "## Many hosts at once: `linkgrad profile --duration 5` (`benchmarks/fanout_profile.py`)",
        "",
        f"{result['machine']}, {result['date']}: the {n}-host testbed, {result['runs']} runs "
        "of each way, alternated. Wall time of the whole command (connect, start every "
        "sniffer and SNAP, profile 5 s, stop, answer); overhead per host = (median - 5 s) / "
        "hosts. *one by one* is the same code with `ssh.parallel: 1` and one daemon at a "
        "time, as every command worked before.",
        "",
        "| way | median wall, s | range, s | overhead per host, s |",
        "| --- | --- | --- | --- |",
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
    OUT.mkdir(exist_ok=True)
    (OUT / f"fanout_profile-{result['hosts']}.json").write_text(json.dumps(result, indent=2))
    update_section(f"fanout_profile-{result['hosts']}", markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()

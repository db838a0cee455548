"""How long `linkgrad --help` and each `linkgrad COMMAND --help` take, wall time from the
shell (the interpreter's start included), against every command imported first, with scipy.stats
and pyplot, as the command line did before it had a catalog (then the same help). Median of --runs.

    .venv/bin/python -m benchmarks.cli_help_time [--runs 5]

Writes benchmarks/out/cli_help_time.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.results_md import publish
from coordinator.cli.catalog import CATALOG

# the command line as it was: every command's module imported before the parser is built,
# and with them scipy.stats and pyplot, which they imported at their top
EAGER = """
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot
import scipy.stats
from coordinator.cli.catalog import all_commands
all_commands()
from coordinator.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def wall_s(argv: list[str], runs: int) -> float:
    took = []
    for _ in range(runs):
        started = time.monotonic()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       timeout=120)
        took.append(time.monotonic() - started)
    return statistics.median(took)


def measure(runs: int) -> dict[str, Any]:
    linkgrad = str(Path(sys.executable).parent / "linkgrad")
    rows = {}
    for words in [[], *([e.name] for e in CATALOG)]:
        now = wall_s([linkgrad, *words, "--help"], runs)
        eager = wall_s([sys.executable, "-c", EAGER, *words, "--help"], runs)
        rows[" ".join(["linkgrad", *words, "--help"])] = {"now_s": now, "eager_s": eager}
        print(f"{' '.join(words) or '(top)'}: {now:.2f} s, eager {eager:.2f} s", flush=True)
    return {"runs": runs, "rows": rows,
            "machine": f"{platform.node()} {platform.release()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def markdown(result: dict[str, Any]) -> str:
    rows = [f"| `{cmd}` | {r['now_s']:.2f} | {r['eager_s']:.2f} |"
            for cmd, r in result["rows"].items()]
    worst = max(r["now_s"] for r in result["rows"].values())
    return "\n".join([
        "## How fast `--help` answers (`benchmarks/cli_help_time.py`)",
        "",
        f"{result['machine']}, {result['date']}, an idle machine: wall time from the shell, "
        f"median of {result['runs']} runs. *every command imported*: the same help after "
        "importing every command's module and scipy.stats and pyplot, as the command line "
        "did before its catalog.",
        "",
        "| command line | now, s | every command imported, s |",
        "| --- | --- | --- |",
        *rows,
        "",
        f"The slowest now: {worst:.2f} s.",
        "",
        "Reproduce: `.venv/bin/python -m benchmarks.cli_help_time`."])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    publish("cli_help_time", result := measure(args.runs), markdown(result))


if __name__ == "__main__":
    main()

"""Passive first against the whole graph injected, on the RUBiS-like testbed (issue 30): one
run of each strategy, one after the other on the same testbed, of
experiments/calibration/testbed-all.yaml (every link, every transaction of
testbed/transactions.py), the passive-first one asking one question (move db). For each run:
the time it took, the links it injected, and every (transaction, link) with a known gradient
(testbed/transactions.py's crossing counts) judged by the answer a user reads in its
explain.json — both halves combined where they agree, else the measurement, and for a link
left passive its calibrated passive gradient: the truth inside the 95% interval, and the
interval's half-width.

The client's link (client<->web) is left out of the judging: the web log's response time
starts after the request's crossing and ends at the reply's last write, so the gradient it
measures there is 0, not the crossing count transactions.py gives.

    linkgrad testbed up && .venv/bin/python -m benchmarks.passive_first

    .venv/bin/python -m benchmarks.passive_first --experiment experiments/testbed-quick.yaml

Writes benchmarks/out/passive_first-EXPERIMENT.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.on_testbed import LINKGRAD, scratch_root
from benchmarks.results_md import update_section
from testbed.topology import DEFAULT
from testbed.transactions import transactions_of

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "experiments" / "calibration" / "testbed-all.yaml"
OUT = Path(__file__).with_name("out")
QUESTION = {"move": {"db": "remote"}}


def run(strategy: str, root: Path, experiment: Path = EXPERIMENT) -> dict[str, Any]:
    spec = yaml.safe_load(experiment.read_text())
    spec["name"] = f"pf-{strategy}"
    spec["parameters"].pop("include", None)  # the whole graph
    # apart: a run beside another would take its rows into its calibration (a user's own
    # runs), and the figure is the shipped calibration's
    spec["output"] = str(root / f"runs-{strategy}")
    if strategy == "passive-first":
        spec["parameters"].update({"strategy": "passive-first", "questions": [QUESTION]})
    path = root / f"{strategy}.yaml"
    path.write_text(yaml.safe_dump(spec))
    started = time.perf_counter()
    done = subprocess.run([LINKGRAD, "run", str(path), "--json"], capture_output=True,
                          text=True, timeout=7200, check=False)
    seconds = time.perf_counter() - started
    status = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    if "run_dir" not in status:
        sys.exit(f"passive_first: the {strategy} run failed: {done.stderr[-3000:]}")
    run_dir = Path(status["run_dir"])
    explained = json.loads((run_dir / "explain.json").read_text())
    return {"strategy": strategy, "run_dir": str(run_dir), "status": status["status"],
            "seconds": seconds, "links_injected": status["links_done"],
            "calibration": explained["summary"]["calibration"],
            "rows": explained["rows"]}


def answer(row: dict[str, Any]) -> tuple[str, float, tuple[float, float]] | None:
    if row["combined"] is not None:
        return "combined", row["combined"], tuple(row["combined_ci95"])
    if row["gradient"] is not None and row["ci95"] is not None:
        return "measured", row["gradient"], tuple(row["ci95"])
    if row["passive_gradient"] is not None:
        return "passive", row["passive_gradient"], tuple(row["passive_ci95"])
    return None


def judge(result: dict[str, Any]) -> list[dict[str, Any]]:
    truth = {(t.name, link): g for t in transactions_of(DEFAULT)
             for link, g in t.expected.items() if g is not None}
    out = []
    for row in result["rows"]:
        key = (row["transaction"], row["pair"])
        if key not in truth or "client" in row["pair"].split("->"):
            continue
        a = answer(row)
        if a is None:
            continue
        kind, value, (lo, hi) = a
        out.append({"transaction": row["transaction"], "pair": row["pair"], "kind": kind,
                    "verdict": row["verdict"], "truth": truth[key], "value": value,
                    "ci95": [lo, hi], "held": lo <= truth[key] <= hi,
                    "half_width_rel": (hi - lo) / 2 / max(abs(truth[key]), 1.0)})
    return out


def markdown(results: list[dict[str, Any]], experiment: Path) -> str:
    lines = [f"## Passive first against every link injected, {experiment.stem} "
             "(`benchmarks/passive_first.py`)", "",
             f"One run of each strategy on the RUBiS-like testbed, one after the other: "
             f"`{experiment.relative_to(ROOT)}` on its whole graph (its transactions and "
             "wave as written there), passive-first asking one question (move db). "
             "Each (transaction, link) with a known gradient (testbed/transactions.py; the "
             "client's link left out: outside the logged response time) judged by the answer "
             "`explain.json` gives: combined where the halves agree, else the measurement, "
             "and for a link left passive its calibrated passive gradient. Both runs made "
             "after the calibration was shipped (it came from other runs). One run each.", "",
             "| strategy | time | links injected | cells | truth inside 95% | "
             "median half-width | cells answered by |", "|---|---|---|---|---|---|---|"]
    for r in results:
        cells = r["cells"]
        held = sum(c["held"] for c in cells)
        by = ", ".join(f"{k} {sum(c['kind'] == k for c in cells)}"
                       for k in ("combined", "measured", "passive"))
        lines.append(f"| {r['strategy']} | {r['seconds']:.0f} s | {r['links_injected']} | "
                     f"{len(cells)} | {held} ({held / max(len(cells), 1):.0%}) | "
                     f"{statistics.median(c['half_width_rel'] for c in cells):.1%} of the "
                     f"truth (or of 1) | {by} |")
    a, p = results
    lines += ["", f"Passive first took {a['seconds'] / p['seconds']:.1f}× less time "
              f"({p['seconds']:.0f} s against {a['seconds']:.0f} s) and injected "
              f"{p['links_injected']} of {a['links_injected']} links (goal: at least 3× faster "
              "with 90% or more of predictions inside their intervals; the prediction "
              "placements of `benchmarks/prediction_accuracy.py` are not run here).",
              f"Calibration used: {p['calibration']}."]
    missed = [c for r in results for c in r["cells"] if not c["held"]]
    if missed:
        lines += ["", "Misses: " + "; ".join(
            f"{r['strategy']} {c['transaction']} {c['pair']} {c['kind']} {c['value']:.2f} "
            f"[{c['ci95'][0]:.2f}, {c['ci95'][1]:.2f}] against {c['truth']:g}"
            for r in results for c in r["cells"] if not c["held"]) + "."]
    return "\n".join(lines)


def explained(strategy: str, run_dir: Path, seconds: float) -> dict[str, Any]:
    """A run made earlier, explained by the code as it is now (`linkgrad explain`, offline)."""
    done = subprocess.run([LINKGRAD, "explain", str(run_dir), "--json"], capture_output=True,
                          text=True, timeout=600, check=True)
    e = json.loads(done.stdout)
    journal = json.loads((run_dir / "run.json").read_text())
    return {"strategy": strategy, "run_dir": str(run_dir), "status": journal["status"],
            "seconds": seconds, "links_injected": journal["links_done"],
            "calibration": e["summary"]["calibration"], "rows": e["rows"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--active", type=Path, metavar="RUN_DIR",
                    help="an active run made before by this script: explained again, not run")
    ap.add_argument("--active-seconds", type=float, default=0.0,
                    help="with --active: the time it took")
    ap.add_argument("--passive-first", type=Path, metavar="RUN_DIR",
                    help="a passive-first run made before by this script: explained again")
    ap.add_argument("--passive-first-seconds", type=float, default=0.0,
                    help="with --passive-first: the time it took")
    ap.add_argument("--note", default="",
                    help="a paragraph for the section (what the runs were used for)")
    ap.add_argument("--experiment", type=Path, default=EXPERIMENT,
                    help="the testbed experiment both strategies run, on its whole graph "
                    f"(default {EXPERIMENT.relative_to(ROOT)})")
    args = ap.parse_args()
    args.experiment = args.experiment.resolve()
    root = scratch_root("passive_first")
    made = {"active": (args.active, args.active_seconds),
            "passive-first": (args.passive_first, args.passive_first_seconds)}
    results = []
    for strategy in ("active", "passive-first"):
        if made[strategy][0] is not None:
            r = explained(strategy, *made[strategy])
        else:
            r = run(strategy, root, args.experiment)
        r["cells"] = judge(r)
        results.append(r)
        print(f"{strategy}: {r['seconds']:.0f} s, {r['links_injected']} links, "
              f"{sum(c['held'] for c in r['cells'])}/{len(r['cells'])} held", flush=True)
    OUT.mkdir(exist_ok=True)
    name = args.experiment.stem
    (OUT / f"passive_first-{name}.json").write_text(json.dumps(results, indent=1))
    update_section(f"passive-first-{name}", markdown(results, args.experiment)
                   + (f"\n\n{args.note}" if args.note else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

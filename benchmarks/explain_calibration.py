"""The explanation's shipped calibration: every (transaction, link) where a run measured the
gradient and its causal paths counted the crossings, from run directories made on the
testbed's applications, written to coordinator/explain/calibration.json (the points: a user's
own runs are added to them when a run is explained) with the fitted bias and spread in
benchmarks/RESULTS.md.

    .venv/bin/python -m benchmarks.explain_calibration RUN_DIR [RUN_DIR ...]

Each run is explained afresh without any calibration (its rows' crossings and gradients are
what the points need). The runs: `linkgrad run experiments/calibration/testbed-all.yaml` on
`linkgrad testbed up` (every link, every transaction), and `experiments/mediawiki-quick.yaml`
on `linkgrad testbed up --app mediawiki --tag mw`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.results_md import update_section
from coordinator.explain.calibration_points import SHIPPED
from coordinator.explain.rows import explained_rows
from coordinator.explain.run import load_run_files
from linkgrad.explain.calibration import Z95, CalibrationPoint, fit_calibration


def run_points(run_dir: Path) -> list[CalibrationPoint]:
    files = load_run_files(run_dir)
    rows = explained_rows(files.measurements, files.graph, list(files.experiment.transactions),
                          files.paths, files.snap, files.hosts, calibration=None)
    out = []
    for r in rows:
        if r.gradient is None or r.ci95 is None or r.passive is None:
            continue
        out.append(CalibrationPoint(
            passive=round(r.passive.estimate, 4),
            passive_se=round((r.passive.ci95[1] - r.passive.ci95[0]) / (2 * Z95), 5),
            gradient=r.gradient, gradient_se=round((r.ci95[1] - r.ci95[0]) / (2 * Z95), 5),
            source=f"{files.experiment.name}/{run_dir.name} {r.transaction} {r.pair}"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, nargs="+")
    args = ap.parse_args(argv)
    points = [p for run in args.runs for p in run_points(run)]
    cal = fit_calibration(points, "shipped")
    if cal is None:
        print(f"{len(points)} points: too few to fit", file=sys.stderr)
        return 1
    made = (f"benchmarks/explain_calibration.py {' '.join(r.name for r in args.runs)} "
            f"({time.strftime('%Y-%m-%d')})")
    SHIPPED.write_text(json.dumps({"made": made, "runs": [r.name for r in args.runs],
                                   "points": [p.__dict__ for p in points]}, indent=1) + "\n")
    lines = ["## Explanation: the passive side's calibration "
             "(`benchmarks/explain_calibration.py`)",
             "",
             f"{len(points)} (transaction, link) points where a run measured the gradient and "
             f"its causal paths counted the crossings, from {len(args.runs)} runs: "
             + ", ".join(f"`{r.name}`" for r in args.runs) + ". The gradient is, on average, "
             f"the crossings plus **{cal.bias:+.1%}** (± {Z95 * cal.bias_se:.1%}) of them (of 1 "
             f"below 1 crossing), with a spread beyond both sides' own errors of "
             f"**{cal.spread:.1%}** (DerSimonian–Laird τ). These are the points "
             "`coordinator/explain/calibration.json` ships; a user's own runs are added to them.",
             "", "| run | transaction | link | crossings | gradient [95%] | residual / scale |",
             "|---|---|---|---|---|---|"]
    for p in points:
        run, transaction, pair = p.source.rsplit(" ", 2)
        lines.append(f"| {run} | {transaction} | {pair} | {p.passive:.3f} | {p.gradient:.3f} "
                     f"± {Z95 * p.gradient_se:.3f} | {(p.gradient - p.passive) / p.scale:+.3f} |")
    update_section("explain-calibration", "\n".join(lines))
    print(cal.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The explanation's shipped calibration: every (transaction, link) where a run measured the
gradient and its causal paths counted the crossings, from run directories made on the
testbed's applications, written to coordinator/explain/calibration.json (the points: a user's
own runs are added to them when a run is explained) with the fitted bias and spread in
benchmarks/RESULTS.md.

    .venv/bin/python -m benchmarks.explain_calibration [--relink] APP=RUN_DIR [APP=RUN_DIR ...]

Each run is explained afresh without any calibration (its rows' crossings and gradients are
what the points need). The runs: `linkgrad run experiments/calibration/testbed-all.yaml` on
`linkgrad testbed up` (every link, every transaction), and `experiments/mediawiki-quick.yaml`
on `linkgrad testbed up --app mediawiki --tag mw`. `--relink` links each run's saved trace
(`paths-trace.jsonl`) again with this linkgrad's linker, as the run did (its settings and its
web log's transactions; without a time budget, so the result does not depend on the machine)
instead of reading its paths.json: the calibration must describe the linker that ships, and a
fix to it changes the passive side's error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.results_md import update_section
from coordinator.config.experiment import Paths
from coordinator.config.trace_file import TRACE_FILE, read_trace
from coordinator.explain.calibration_points import SHIPPED
from coordinator.explain.rows import explained_rows, least_delay
from coordinator.explain.run import RunFiles, load_run_files
from linkgrad.explain.calibration import Z95, CalibrationPoint, fit_calibration, measured_se
from linkgrad.paths.from_hosts import paths_from_hosts
from linkgrad.paths.result import PathsResult
from linkgrad.weblog.read import read_log


def dof_of(files: RunFiles, link: str, transaction: str) -> int | None:
    m = least_delay(files.measurements).get(link)
    t = m.transactions.get(transaction) if m else None
    return t.dof if t else None


def relinked(run_dir: Path, files: RunFiles) -> PathsResult:
    """The run's paths linked again from its trace, as `paths_evidence.save` linked them."""
    raw = json.loads((run_dir / "experiment.json").read_text())
    settings = Paths.model_validate(raw.get("paths") or {})
    web_log = files.experiment.web_log
    if web_log is None or files.paths is None:
        raise SystemExit(f"{run_dir}: no web log or no paths.json to relink")
    log = read_log(run_dir / "weblog.log", web_log.format, web_log.log_format)
    # no time budget: a calibration must not depend on how busy this machine is while linking
    result = paths_from_hosts(list(read_trace(run_dir / TRACE_FILE)), settings.linker,
                              settings.window_s, None, log, files.experiment.transactions)
    kept = files.paths
    return replace(result, window=kept.window, traced_hosts=kept.traced_hosts,
                   problems=kept.problems)


def run_points(app: str, run_dir: Path, relink: bool = False) -> list[CalibrationPoint]:
    files = load_run_files(run_dir)
    if relink:
        files = replace(files, paths=relinked(run_dir, files))
    rows = explained_rows(files.measurements, files.graph, list(files.experiment.transactions),
                          files.paths, files.snap, files.hosts, calibration=None,
                          training=files.training)
    out = []
    for r in rows:
        if r.gradient is None or r.ci95 is None or r.passive is None:
            continue
        out.append(CalibrationPoint(
            passive=round(r.passive.estimate, 4),
            passive_se=round((r.passive.ci95[1] - r.passive.ci95[0]) / (2 * Z95), 5),
            gradient=r.gradient,
            gradient_se=round(measured_se(r.ci95, dof_of(files, r.link, r.transaction)), 5),
            source=f"{run_dir.name} {r.transaction} {r.pair}", group=app, run=run_dir.name))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="APP=RUN_DIR",
                    help="a run directory and the application it ran (rubis, mediawiki, ...)")
    ap.add_argument("--relink", action="store_true",
                    help="link each run's saved trace again with this linker")
    args = ap.parse_args(argv)
    runs = [(app, Path(path)) for app, _, path in (r.partition("=") for r in args.runs)]
    points = [p for app, run in runs for p in run_points(app, run, args.relink)]
    cal = fit_calibration(points, "shipped")
    if cal is None:
        print(f"{len(points)} points: too few to fit", file=sys.stderr)
        return 1
    made = (f"benchmarks/explain_calibration.py {'--relink ' if args.relink else ''}"
            f"{' '.join(f'{a}={r.name}' for a, r in runs)} "
            f"({time.strftime('%Y-%m-%d')})")
    SHIPPED.write_text(json.dumps({"made": made, "runs": [f"{a}={r.name}" for a, r in runs],
                                   "points": [p.__dict__ for p in points]}, indent=1) + "\n")
    per_app = []
    for app in dict.fromkeys(a for a, _ in runs):
        own = fit_calibration(points, f"{app} alone", own=app)
        if own is not None:
            per_app.append(f"{own.describe()} ({own.points} points)")
    lines = ["## Explanation: the passive side's calibration "
             "(`benchmarks/explain_calibration.py`)",
             "",
             f"{len(points)} (transaction, link) points where a run measured the gradient and "
             f"its causal paths counted the crossings, from {len(runs)} runs: "
             + ", ".join(f"`{r.name}` ({a})" for a, r in runs)
             + (", each run's paths linked again from its saved trace by this linker "
                "(`--relink`)" if args.relink else "") + ". Residuals are relative "
             "(gradient − crossings) / crossings from one crossing up, absolute below, each "
             "family fitted by DerSimonian–Laird within each application and between them. "
             "Each application alone (what a user's own runs of it would give): "
             + "; ".join(per_app) + f". **A new application gets: {cal.describe()}.** These "
             "are the points `coordinator/explain/calibration.json` ships; a user's own runs "
             "are added to them, and their own application's fit serves once it has 5 points "
             "in a family.",
             "", "| app | run | transaction | link | crossings | gradient [95%] | "
             "residual / scale |", "|---|---|---|---|---|---|---|"]
    for p in points:
        run, transaction, pair = p.source.rsplit(" ", 2)
        lines.append(f"| {p.group} | {run} | {transaction} | {pair} | {p.passive:.3f} | "
                     f"{p.gradient:.3f} ± {Z95 * p.gradient_se:.3f} | "
                     f"{(p.gradient - p.passive) / p.scale:+.3f} |")
    update_section("explain-calibration", "\n".join(lines))
    print(cal.describe())
    for line in per_app:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`linkgrad predict`: each transaction's mean response time after components move (thesis
§5.3), from a run's link gradients; `--validate` applies the new latencies for real and measures.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from coordinator.cli.command import Command
from coordinator.cli.terminal import terminal
from coordinator.config.latencies import Placement, latency_sites, load_latencies
from coordinator.config.run_inputs import RunInputs, load_run
from coordinator.config.run_records import Pair
from coordinator.config.strict_json import dumps
from coordinator.config.what_if import placement_changes
from linkgrad.errors import InputError, Problem
from linkgrad.prediction import Estimate, Prediction, predict

if TYPE_CHECKING:  # imported when validating: paramiko is slow to load
    from coordinator.live.validate import Validation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gradients", required=True, type=Path, metavar="RUN/gradients.json",
                   help="a run's gradients (its directory also gives graph and baseline)")
    p.add_argument("--latencies", required=True, type=Path, metavar="NOW.yaml")
    p.add_argument("--placement", required=True, type=Path, action="append",
                   metavar="NEW.yaml", help="where components move (repeatable: compared)")
    p.add_argument("--validate", action="store_true",
                   help="apply each placement's latency changes with delays on the "
                        "live system (the run's experiment) and measure the response times")
    p.add_argument("--window-s", type=float, default=60.0,
                   help="with --validate: seconds measured at the current latencies and under "
                        "each placement (in three turns each)")


def prediction_json(p: Prediction, run: RunInputs, changes: dict[Pair, Estimate]) -> dict:
    lo, hi = p.ci95
    mine = run.gradients.get(p.transaction, {})
    lacking = sorted(pair for pair, d in changes.items()
                     if d.mean and pair not in mine and _measured(run, pair))
    return {
        "current_ms": round(p.current_ms.mean, 3), "current_se_ms": round(p.current_ms.se, 3),
        "predicted_ms": round(p.predicted_ms, 3), "se_ms": round(p.se_ms, 3),
        "ci95": [round(lo, 3), round(hi, 3)],
        "change_ms": round(p.predicted_ms - p.current_ms.mean, 3),
        "terms": [{"link": f"{t.pair[0]}->{t.pair[1]}", "gradient": round(t.gradient.mean, 4),
                   "gradient_se": round(t.gradient.se, 4), "delta_ms": round(t.delta_ms.mean, 3),
                   "delta_se_ms": round(t.delta_ms.se, 3), "change_ms": round(t.change_ms, 3),
                   **({"curvature_per_ms": round(t.curve.curvature.mean, 6),
                       "curvature_se": round(t.curve.curvature.se, 6)}
                      if t.curve.curvature.se else {})}
                  for t in p.terms],
        "notes": [f"no gradient of {p.transaction} on {a}->{b} (too few of its requests during "
                  "that measurement): its change there is missing" for a, b in lacking]
        + [f"{a}->{b} is not linear: {t.curve.curvature.mean:+.4f} ms per ms² (measured at "
           "several delays), used in the prediction" for t in p.terms for a, b in [t.pair]
           if abs(t.curve.curvature.mean) > 2 * t.curve.curvature.se > 0]
        + [f"{a}->{b} changes by {t.delta_ms.mean:+.1f} ms, beyond the {run.measured_ms[t.pair]:g}"
           " ms its gradient was measured with: the linear relation is extrapolated (measure "
           "with a larger delay to check it holds; thesis ch. 6)"
           for t in p.terms for a, b in [t.pair]
           if t.pair in run.measured_ms and abs(t.delta_ms.mean) > run.measured_ms[t.pair]],
    }


def _measured(run: RunInputs, pair: Pair) -> bool:
    return any(pair in per_pair for per_pair in run.gradients.values())


@dataclass(frozen=True)
class PlacementPrediction:
    """One placement file: where hosts move, each pair's latency change, every transaction's
    prediction, and (with --validate) what the live system then measured."""

    source: str
    placement: Placement
    changes: dict[Pair, Estimate]
    predictions: dict[str, Prediction]
    validation: Validation | None = None

    def as_json(self, run: RunInputs) -> dict[str, Any]:
        return {
            "placement": self.source, "move": self.placement.move,
            "latency_changes_ms": {f"{a}->{b}": {"mean": round(d.mean, 3), "se": round(d.se, 3)}
                                   for (a, b), d in sorted(self.changes.items())},
            "transactions": {n: prediction_json(p, run, self.changes)
                             for n, p in sorted(self.predictions.items())},
            **({"validation": self.validation.as_json()} if self.validation else {})}


def predict_command(args: argparse.Namespace) -> int:
    if not 0 < args.window_s <= 3600:  # NaN too
        raise InputError(Problem(f"must be above 0 and at most 3600 s, got {args.window_s}",
                                 field="--window-s"))
    run, latencies = load_run(args.gradients), load_latencies(args.latencies)
    known = latency_sites(latencies, run.hosts)  # once, however many placements
    results = []
    for path in args.placement:
        placement, changes = placement_changes(run, latencies, args.latencies, path,
                                               known)
        results.append(PlacementPrediction(str(path), placement, changes,
                                           predict(run.current_ms, run.gradients, changes)))
    if args.validate:
        from coordinator.live.validate import PlacementChanges, validate_placements

        validations = validate_placements(
            run, [PlacementChanges(r.source, r.changes) for r in results], args.window_s,
            _say(args.json))
        results = [replace(r, validation=v) for r, v in zip(results, validations, strict=True)]
    placements = [r.as_json(run) for r in results]
    if args.json:
        print(dumps({"run": str(run.run_dir), "placements": placements}))
    else:
        _print(placements)
    return 0


def _say(quiet: bool) -> Any:
    console = terminal(stderr=True)
    return lambda message: console.print(message) if not quiet else None


def _print(results: list[dict[str, Any]]) -> None:
    console = terminal()
    for r in results:
        moves = ", ".join(f"{h} → {s}" for h, s in r["move"].items())
        table = Table("transaction", "current ms", "predicted ms", "95% interval", "change ms",
                      *(["measured ms", "inside"] if "validation" in r else []),
                      title=f"{r['placement']}: {moves}")
        for name, t in r["transactions"].items():
            row = [name, f"{t['current_ms']:.1f}", f"{t['predicted_ms']:.1f}",
                   f"[{t['ci95'][0]:.1f}, {t['ci95'][1]:.1f}]", f"{t['change_ms']:+.1f}"]
            if "validation" in r:
                v = r["validation"]["transactions"].get(name, {})
                row += [f"{v['measured_ms']:.1f}" if v else "-",
                        ("yes" if v["inside"] else "[red]no") if v else "-"]
            table.add_row(*row)
        console.print(table)
        for name, t in r["transactions"].items():
            for note in t["notes"]:
                console.print(f"[yellow]{name}: {note}")


COMMANDS = (
    Command("predict", "predict response times after components move (what-if)",
            "Each transaction's mean response time if components moved to other sites: the "
            "current mean (the run's passive phase) plus, for every host pair, its link gradient "
            "times its change of one-way latency (thesis eq. 2.1). The 95% interval carries the "
            "uncertainty of the current mean, of the latencies and of the gradients. --validate "
            "applies the new latencies on the live system with the injector (latencies can only "
            "grow there) and measures.",
            _arguments, predict_command,
            epilog="Latencies file: `sites: {HOST: SITE}` (default: every host is its own site) "
                   "and `latency_ms: {'a<->b': MS, 'a->b': {mean: MS, se: MS}}` (one way; se is "
                   "the standard error of the mean). Placement file: `move: {HOST: SITE}`."),
)

"""`linkgrad predict`: each transaction's mean response time after components move (thesis
§5.3), from a run's link gradients; `--validate` applies the new latencies for real and measures.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from coordinator.cli.command import Command
from coordinator.cli.options import add_gradients, old_spelling
from coordinator.cli.predict_answer import PlacementAnswer, PredictAnswer, ValidationAnswer
from coordinator.cli.terminal import names_table, terminal
from coordinator.config.latencies import latency_sites
from coordinator.config.path_latencies import run_latencies
from coordinator.config.run_inputs import load_gradients
from coordinator.config.what_if import placement_changes
from linkgrad.errors import InputError, Problem
from linkgrad.prediction import predict


def _arguments(p: argparse.ArgumentParser) -> None:
    add_gradients(p)
    p.add_argument("--latencies", type=Path, metavar="NOW.yaml",
                   help="the current one-way latencies (default: the run's causal paths' "
                        "network delays, every host its own site)")
    p.add_argument("--placement", required=True, type=Path, action="append",
                   metavar="NEW.yaml", help="a placement file: where components move from the "
                   "latencies file's sites (repeatable: compared)")
    p.add_argument("--validate", action="store_true",
                   help="apply each placement's latency changes with delays on the "
                        "live system (the run's experiment) and measure the response times")
    p.add_argument("--duration", type=float, default=60.0, metavar="S",
                   help="with --validate: seconds measured at the current latencies and under "
                        "each placement (in three turns each; default 60)")
    old_spelling(p, "--window-s", "--duration", "duration", type=float)


def predict_command(args: argparse.Namespace) -> int:
    if not 0 < args.duration <= 3600:  # NaN too
        raise InputError(Problem(f"must be above 0 and at most 3600 s, got {args.duration}",
                                 field="--duration"))
    run = load_gradients(args.gradients, args.link)
    if args.validate and run.answers:
        raise InputError(Problem("needs a run directory: it delays the run's experiment's "
                                 "hosts for real", field="--validate"))
    source = run_latencies(args.latencies, run.paths_dirs, run.hosts, run.talking_pairs())
    latencies = source.latencies
    if source.note and not args.json:
        terminal(stderr=True).print(source.note)
    known = latency_sites(latencies, run.hosts)  # once, however many placements
    placements, changes_of = [], []
    for path in args.placement:
        placement, changes = placement_changes(run, latencies, Path(source.name), path,
                                               known)
        changes_of.append(changes)
        placements.append(PlacementAnswer.of(
            str(path), placement.move, changes,
            predict(run.current_ms, run.gradients, changes), run))
    if args.validate:
        from coordinator.live.validate import CYCLES, PlacementChanges, validate_placements

        validations = validate_placements(
            run, [PlacementChanges(p.placement, c) for p, c in zip(placements, changes_of,
                                                                   strict=True)],
            args.duration, _say(args.json))
        placements = [p.model_copy(update={"validation": ValidationAnswer.of(v, CYCLES)})
                      for p, v in zip(placements, validations, strict=True)]
    answer = PredictAnswer(run=run.source, placements=placements,
                           latencies_note=source.note)
    if args.json:
        print(answer.json_text())
    else:
        _print(answer.placements)
    return 0


def _say(quiet: bool) -> Callable[[str], None]:
    console = terminal(stderr=True)
    return lambda message: console.print(message) if not quiet else None


def _print(placements: list[PlacementAnswer]) -> None:
    console = terminal()
    for r in placements:
        moves = ", ".join(f"{h} → {s}" for h, s in r.move.items())
        table = names_table("transaction", r.transactions, "current ms", "predicted ms",
                            "95% interval", "change ms",
                            *(["measured ms", "inside"] if r.validation else []),
                            title=f"{r.placement}: {moves}")
        for name, t in r.transactions.items():
            row = [name, f"{t.current_ms:.1f}", f"{t.predicted_ms:.1f}",
                   f"[{t.ci95[0]:.1f}, {t.ci95[1]:.1f}]", f"{t.change_ms:+.1f}"]
            if r.validation:
                v = r.validation.transactions.get(name)
                row += [f"{v.measured_ms:.1f}" if v else "-",
                        ("yes" if v.inside else "[red]no") if v else "-"]
            table.add_row(*row)
        console.print(table)
        if r.passive_pairs:
            console.print(f"passive gradients (explain.json, not measured) for "
                          f"{', '.join(r.passive_pairs)}")
        for name, t in r.transactions.items():
            for note in t.notes:
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
                   "the standard error of the mean); without --latencies, the run's paths.json "
                   "gives them. Placement file: `move: {HOST: SITE}`. Links the run did not "
                   "inject take their passive gradient from its explain.json, labelled.",
            example=('linkgrad predict --gradients '
                     '"$(ls -d runs/testbed-quick-* | tail -1)"/gradients.json '
                     "--latencies experiments/placement/now.yaml "
                     "--placement experiments/placement/db-east.yaml")),
)

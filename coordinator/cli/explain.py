"""`linkgrad explain RUN_DIR [--json]`: each (transaction, link) of a run's graph with its
measured gradient, its passive gradient from the causal paths, and a verdict with its cause."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from coordinator.cli.command import Command
from coordinator.cli.explain_text import explanation_lines
from coordinator.cli.terminal import terminal
from coordinator.config.coordinator_process import interrupted_reason
from coordinator.config.run_dir import read_record
from coordinator.config.run_records import RunJournal
from coordinator.config.strict_json import dumps
from coordinator.explain.answer import Explanation
from coordinator.explain.run import explain_run
from linkgrad.errors import InputError, Problem


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, help="a run directory (linkgrad run's output)")


def run_explanation(run_dir: Path) -> Explanation:
    """The run explained; InputError naming the directory when it is no run's."""
    for name in ("experiment.json", "run.json"):
        if not (run_dir / name).exists():
            raise InputError(Problem(f"no {name}: not a linkgrad run directory",
                                     str(run_dir), field="run_dir"))
    journal = read_record(run_dir / "run.json", RunJournal, "how the run went")
    return explain_run(run_dir, interrupted_reason(journal))


def print_explanation(e: Explanation, say: Console | None = None) -> None:
    """The table on `say` (stdout when None)."""
    say = say or terminal()
    for line in explanation_lines(e):
        say.print(line, markup=False, soft_wrap=True)


def explain_command(args: argparse.Namespace) -> int:
    e = run_explanation(args.run_dir)
    if args.json:
        print(dumps(e.model_dump(mode="json")))
    else:
        print_explanation(e)
    return 0


COMMANDS = (
    Command("explain", "each gradient beside its causal paths, with a verdict and its cause",
            "Per transaction and link of a run's graph: the measured gradient with its 95% "
            "interval, the passive gradient its causal paths imply (the expected crossings on "
            "the critical path over all of its paths, with an interval from the path counts), "
            "and a verdict: agree; above (the cause from SNAP's classes and traffic, the "
            "gradient's trend with delay and load, the host probes: several round trips per "
            "message, a handshake per request, Nagle and delayed ACKs, retransmissions, a "
            "queue, a busy host; else unexplained); below (parallel branches, asynchronous "
            "calls); passive-only (not injected); active-only (no paths).",
            _arguments, explain_command, json_help="print the summary and every row as JSON",
            example='linkgrad explain "$(ls -d runs/testbed-quick-* | tail -1)"'),
)

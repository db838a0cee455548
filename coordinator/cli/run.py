"""`linkgrad run EXPERIMENT.yaml [--resume RUN_DIR] [--json]`."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console

from common.command import Command
from common.errors import InputError, Problem
from coordinator.config.experiment_file import load_experiment
from coordinator.live.run import run_experiment


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", type=Path, help="experiment YAML (see experiments/)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR",
                   help="continue a run, skipping the links it finished")


def _report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)


def report_command(args: argparse.Namespace) -> int:
    from coordinator.cli.report import write_report

    for name in ("experiment.json", "gradients.json", "plan.json", "run.json"):
        if not (args.run_dir / name).exists():
            raise InputError(Problem(f"no {name}: not a finished run directory",
                                     str(args.run_dir), field="run_dir"))
    target = write_report(args.run_dir)
    print(json.dumps({"report": str(target)}) if args.json else target)
    return 0


def run_command(args: argparse.Namespace) -> int:
    experiment = load_experiment(args.experiment)
    if args.resume is not None:
        if not (args.resume / "run.json").exists():
            raise InputError(Problem("not a run directory (no run.json)", str(args.resume),
                                     field="--resume"))
        run_dir = args.resume
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = experiment.output / f"{experiment.name}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    started = time.monotonic()

    def say(message: str) -> None:
        console.print(f"[dim]{time.monotonic() - started:7.1f} s[/] {message}")

    try:
        journal = run_experiment(experiment, run_dir, say, resume=args.resume is not None)
    finally:  # a report of what was measured, however the run ended
        report = _report_if_measured(run_dir)
    status = {**journal.model_dump(mode="json", exclude_none=True), "run_dir": str(run_dir),
              **({"report": str(report)} if report else {})}
    if args.json:
        print(json.dumps(status, indent=2, default=str))
    else:
        console.print(f"{journal.status}: {run_dir}/gradients.json")
    for problem in journal.cleanup_problems or []:
        console.print(f"[red]cleanup failed:[/] {problem}")
    return 0 if journal.succeeded else 1


def _report_if_measured(run_dir: Path) -> Path | None:
    if (run_dir / "gradients.json").exists() and (run_dir / "plan.json").exists():
        from coordinator.cli.report import write_report

        return write_report(run_dir)
    return None


COMMANDS = (
    Command("run", "measure the link gradient graph of a live application",
            "Connect to the experiment's hosts over SSH, start the sniffer and delay "
            "daemons, learn the communication graph and the noise in a passive phase, then "
            "measure every link (both directions) with a square-wave delay and write each "
            "transaction's gradient per link to RUN_DIR/gradients.json. Ctrl-C stops every "
            "injection and keeps what was measured.",
            _run_arguments, run_command, json_help="print the run's status as JSON"),
    Command("report", "(re)write RUN_DIR/report.html from a run's files",
            "The link gradient graph per transaction, every link's response series with its "
            "square wave, spectra and tables, in one self-contained HTML file.",
            _report_arguments, report_command),
)

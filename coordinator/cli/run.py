"""`linkgrad run EXPERIMENT.yaml [--resume RUN_DIR] [--json]`."""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from coordinator.cli.command import Command
from coordinator.cli.explain import print_explanation
from coordinator.cli.terminal import terminal
from coordinator.config.coordinator_process import interrupted_reason, still_running
from coordinator.config.experiment import Experiment
from coordinator.config.experiment_file import load_experiment
from coordinator.config.run_dir import RunDir, read_record
from coordinator.config.run_records import RunJournal
from coordinator.config.strict_json import dumps
from coordinator.config.yamlconf import line_of
from coordinator.explain.answer import Explanation
from coordinator.explain.run import EXPLAIN_FILE, explain_run, write_explanation
from coordinator.live.run import run_experiment
from coordinator.live.session import check_local_files
from linkgrad.errors import InputError, LinkgradError, Problem, RuntimeFailure


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
    journal = read_record(args.run_dir / "run.json", RunJournal, "how the run went")
    interrupted = interrupted_reason(journal)
    if interrupted:
        terminal(stderr=True).print(f"run.json says running, but {interrupted}: the run was "
                                    "interrupted", markup=False, soft_wrap=True)
    target = write_report(args.run_dir, interrupted)
    explanation = write_explanation(args.run_dir, interrupted)
    if args.json:
        print(dumps({"report": str(target), "status": "interrupted" if interrupted
                     else journal.status, **({"reason": interrupted} if interrupted else {}),
                     **explanation.model_dump(mode="json")}, indent=None))
        return 0
    print_explanation(explanation)
    print(f"report: {target}")
    return 0


def _resume_dir(path: Path, say: Console) -> None:
    """A run directory to resume: its journal and gradients read whole (exit 2 naming the
    file when either is cut short or wrong) and no coordinator still writing it."""
    if not (path / "run.json").exists():
        raise InputError(Problem("not a run directory (no run.json)", str(path),
                                 field="--resume"))
    journal = read_record(path / "run.json", RunJournal, "how the run went")
    measured = RunDir(path).measurements()
    if len(measured) < journal.links_done:  # resuming would plan them again, or say "done"
        raise InputError(Problem(
            f"holds {len(measured)} measurements where run.json counts {journal.links_done} "
            "(missing, replaced or cut short): the run's results are not all here",
            str(path / "gradients.json")))
    if (busy := still_running(journal)) is not None:
        raise InputError(Problem(f"run.json says running and {busy}: resume it when that run "
                                 "has ended (a coordinator ends its run on Ctrl-C or SIGTERM)",
                                 str(path / "run.json"), field="status"))
    if (gone := interrupted_reason(journal)) is not None:
        say.print(f"the previous run was interrupted: {gone}", markup=False, soft_wrap=True)


def _make_run_dir(experiment: Experiment, path: Path, resume: Path | None) -> Path:
    """The run's directory (made now): the one resumed, or output/NAME-TIME."""
    run_dir = resume or experiment.output / f"{experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(Problem(f"cannot create the run directory {run_dir}: "
                                 f"{e.strerror or e}", str(path),
                                 None if resume else line_of(path, ("output",)),
                                 "--resume" if resume else "output")) from e
    return run_dir


def run_command(args: argparse.Namespace) -> int:
    experiment = load_experiment(args.experiment)
    console = terminal(stderr=True)
    if args.resume is not None:
        _resume_dir(args.resume, console)
    # before the run directory is made or rewritten: a missing known_hosts or key found only
    # when Session.open connects would leave a failed run behind (or rewrite the resumed one);
    # the run connects to the endpoints checked, so the ssh_config is not looked up again
    endpoints = check_local_files(experiment)
    run_dir = _make_run_dir(experiment, args.experiment, args.resume)
    started = time.monotonic()

    def say(message: str) -> None:
        console.print(f"[dim]{time.monotonic() - started:7.1f} s[/] {message}")

    try:
        journal = run_experiment(experiment, run_dir, say, resume=args.resume is not None,
                                 endpoints=endpoints)
    except OSError as e:  # a file that cannot be written (disk full, directory removed)
        _say_failed(console, run_dir, args.experiment)
        where = f"{e.filename}: " if e.filename else ""
        raise RuntimeFailure(f"{where}{e.strerror or e}") from e
    except Exception:  # failed: say what it kept before the error is printed
        _say_failed(console, run_dir, args.experiment)
        raise
    finally:  # a report of what was measured, however the run ended
        report = _report_if_measured(run_dir)
        explanation = _explanation(run_dir)
    resume = _resume_argv(journal, run_dir, args.experiment)
    if args.json:
        status = {**journal.model_dump(mode="json", exclude_none=True), "run_dir": str(run_dir),
                  **({"report": str(report)} if report else {}),
                  "kept": sorted(_kept(run_dir, journal)),
                  **({"resume_argv": resume} if resume else {})}
        print(dumps(status))
    _say_outcome(console, journal, run_dir, args.experiment)
    for problem in journal.cleanup_problems or []:
        console.print(f"[red]cleanup failed:[/] {escape(problem)}")
    if explanation is not None and explanation.rows:
        console.print()
        print_explanation(explanation, console)
    return 0 if journal.succeeded else 1


def _say_failed(console: Console, run_dir: Path, experiment: Path) -> None:
    if (failed := _journal(run_dir)) is not None:
        _say_outcome(console, failed, run_dir, experiment)


def _journal(run_dir: Path) -> RunJournal | None:
    try:
        return read_record(run_dir / "run.json", RunJournal, "how the run went")
    except InputError:
        return None


def _kept(run_dir: Path, journal: RunJournal) -> dict[str, str]:
    """The files of the run directory worth naming that exist, each with what it holds."""
    described = {
        "graph.json": lambda: _graph_size(run_dir / "graph.json"),
        "baseline.json": lambda: "the response times before any delay",
        "plan.json": lambda: "the square wave's period and delay",
        "gradients.json": lambda: _measured(journal),
        "report.html": lambda: "the summary, the verdicts, the paths, graph and series",
        "explain.json": lambda: "each gradient beside its causal paths, with a verdict",
        "strategy.json": lambda: "which links passive-first injected, and why",
        "weblog.log": lambda: "the web log's requests",
        "snap.json": lambda: "SNAP's TCP profile of every host (classes per link)",
        "paths.json": lambda: "causal paths per transaction (crossings per link)",
        "hosts.json": lambda: "every host's CPU, memory, network and disk, per phase",
        "run.json": lambda: "how the run went",
    }
    return {name: what() for name, what in described.items() if (run_dir / name).exists()}


def _graph_size(path: Path) -> str:
    try:
        links = len(RunDir(path.parent).read(path.name))
    except (InputError, TypeError):
        return "the communication graph"
    return f"the communication graph: {links} link{'s' if links != 1 else ''}"


def _measured(journal: RunJournal) -> str:
    planned = f" of {journal.links_planned}" if journal.links_planned is not None else ""
    resumed = f" ({journal.links_resumed} from before)" if journal.links_resumed else ""
    return f"{journal.links_done}{planned} links measured{resumed}"


def _left(journal: RunJournal) -> int | None:
    """Measurements still missing; None when the run ended before it planned them."""
    if journal.links_planned is None:
        return None
    return max(0, journal.links_planned - journal.links_done)


def _resume_argv(journal: RunJournal, run_dir: Path, experiment: Path) -> list[str] | None:
    """`linkgrad run EXPERIMENT --resume RUN_DIR` when the run did not complete and something
    is left to measure."""
    if journal.status == "completed" or _left(journal) == 0:
        return None
    return ["linkgrad", "run", str(experiment), "--resume", str(run_dir)]


def _say_outcome(console: Console, journal: RunJournal, run_dir: Path, experiment: Path) -> None:
    """How the run ended, the files it kept (only those that exist) and, when something is
    left to measure, the command that measures only that."""
    reason = f": {journal.reason}" if journal.reason else ""
    console.print(f"{journal.status}{reason}", markup=False, soft_wrap=True)
    kept = _kept(run_dir, journal)
    if "gradients.json" not in kept:
        console.print("no link measured", markup=False)
    console.print(f"kept in {run_dir}:", markup=False, soft_wrap=True)
    width = max(map(len, kept), default=0)
    for name, what in kept.items():
        console.print(f"  {name:<{width}}  {what}", markup=False, soft_wrap=True)
    if (resume := _resume_argv(journal, run_dir, experiment)) is not None:
        left = _left(journal)
        what = (f"{left} link{'s' if left != 1 else ''} left to measure" if left is not None
                else "no link planned yet")
        console.print(f"{what}: {shlex.join(resume)}", markup=False, soft_wrap=True)


def _explanation(run_dir: Path) -> Explanation | None:
    """explain.json, when the run got as far as its experiment; one that cannot be made is
    said (the run's outcome stands)."""
    if not (run_dir / "experiment.json").exists() or not (run_dir / "run.json").exists():
        return None
    try:
        explanation = explain_run(run_dir)
        if explanation.rows:  # a run stopped in its passive phase before paths: nothing
            RunDir(run_dir).write(EXPLAIN_FILE, explanation.model_dump(mode="json"))
        return explanation
    except (LinkgradError, OSError) as e:
        terminal(stderr=True).print(f"no explain.json: {e}", markup=False, soft_wrap=True)
    return None


def _report_if_measured(run_dir: Path) -> Path | None:
    """report.html when there is something to draw; a report that cannot be made is said
    (the run's own outcome comes first)."""
    if (run_dir / "gradients.json").exists() and (run_dir / "plan.json").exists():
        from coordinator.cli.report import write_report

        try:
            return write_report(run_dir)
        except (LinkgradError, OSError) as e:
            terminal(stderr=True).print(f"no report.html: {e}", markup=False, soft_wrap=True)
    return None


COMMANDS = (
    Command("run", "measure the link gradient graph of a live application",
            "Connect to the experiment's hosts over SSH, start the sniffer and delay "
            "daemons, learn the communication graph and the noise in a passive phase, then "
            "measure every link (both directions) with a square-wave delay and write each "
            "transaction's gradient per link to RUN_DIR/gradients.json. Ctrl-C stops every "
            "injection and keeps what was measured.",
            _run_arguments, run_command, json_help="print the run's status as JSON",
            example="linkgrad run experiments/testbed-quick.yaml"),
    Command("report", "(re)write RUN_DIR/report.html from a run's files",
            "The link gradient graph per transaction, every link's response series with its "
            "square wave, spectra and tables, in one self-contained HTML file.",
            _report_arguments, report_command,
            example='linkgrad report "$(ls -d runs/testbed-quick-* | tail -1)"'),
)

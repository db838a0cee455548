"""`linkgrad regress SUITE.yaml`: one night of the nightly regression. Bring the suite's
testbed up, run its experiments, tear down, compare what was measured with the accepted
baseline, keep the night in the history and the trend page, and say it by exit code:
0 no regression, 1 regression, 2 bad suite, 3 the night itself failed."""

from __future__ import annotations

import argparse
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rich.markup import escape

from coordinator.cli.command import Command
from coordinator.cli.internal_error import internal_error_details
from coordinator.cli.regress_answer import CheckAnswer, RegressAnswer, SuiteAnswer
from coordinator.cli.regress_junit import junit_xml, write_junit
from coordinator.cli.regress_outcome import RESULT, Outcome, compare_night, run_and_compare
from coordinator.cli.regress_trend import write_trend
from coordinator.cli.terminal import terminal
from coordinator.config.suite import LoadedSuite, load_suite
from coordinator.config.topology_file import load_topology
from coordinator.regress.files import (
    Baseline,
    NightRecord,
    append_history,
    night_record,
    read_baseline,
    read_history,
    write_baseline,
    write_whole,
)
from coordinator.regress.values import (
    CheckValues,
    GradientValues,
    LinkValues,
    PathValues,
    PredictionValues,
    SnapValues,
)
from linkgrad.errors import InputError, Problem

EXIT = {"pass": 0, "accepted": 0, "regression": 1, "bad suite": 2, "failed": 3}
HISTORY, TREND = "history.jsonl", "trend.html"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", type=Path, help="suite YAML (see experiments/nightly.yaml)")
    p.add_argument("--baseline", type=Path, metavar="FILE",
                   help="the baseline to compare with, or with --accept to write (default: the "
                        "suite's `baseline`, else NAME.baseline.json beside the suite)")
    p.add_argument("--accept", action="store_true",
                   help="write tonight's measures as the new baseline (a file to commit); a "
                        "failed night writes nothing")
    p.add_argument("--junit", type=Path, metavar="FILE", help="also write JUnit XML here")
    p.add_argument("--netns", action="store_true",
                   help="build the testbed on plain network namespaces, not Mininet")
    p.add_argument("--topology", type=Path, metavar="FILE",
                   help="the testbed's topology instead of the suite's (another build of the "
                        "application: e.g. one whose service.extra_query plants a regression)")
    p.add_argument("--night", type=Path, metavar="DIR",
                   help="compare (or --accept) a night already run, from its run directories, "
                        "instead of running one: nothing is brought up, nothing added to the "
                        "history")


def regress_command(args: argparse.Namespace) -> int:
    suite = load_suite(args.suite, args.baseline)
    if args.topology is not None:
        suite = _with_topology(suite, args.topology)
    baseline = _baseline(suite, args.accept)
    # read first: a history that is not one is bad input, found before anything is built
    history = [] if args.night is not None else _history(suite)
    started = time.time()
    if args.night is not None:
        outcome = compare_night(suite, args.night, baseline)
    else:
        outcome = run_and_compare(suite, baseline, _mininet(suite, args.netns),
                                   _say(args.json))
    accepting = args.accept and outcome.status in ("pass", "regression")
    if accepting:
        outcome.status = "accepted"
    files = _keep(suite, outcome, started, args, history)
    if accepting and outcome.status == "accepted":  # last: a night not kept accepts nothing
        try:
            write_baseline(suite.baseline, suite.name, outcome.night, outcome.measures)
        except OSError as e:
            outcome.status, outcome.reason = "failed", f"no baseline written: {_os_error(e)}"
    result = _answer(suite, outcome, files, args.accept)
    if args.night is None:  # a night compared again keeps its own regress.json
        _write_result(outcome.night / RESULT, result)
    if args.json:
        print(result.json_text())
    else:
        _print(result)
    if outcome.status == "bad suite":
        terminal(stderr=True).print(f"linkgrad: error: {outcome.reason}", markup=False,
                                    soft_wrap=True)
    return EXIT[outcome.status]


def _history(suite: LoadedSuite) -> list[NightRecord]:
    """The suite's earlier nights (a history shared by several suites holds theirs too)."""
    return [n for n in read_history(suite.output / HISTORY) if n.suite == suite.name]


def _os_error(e: OSError) -> str:
    return f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}"


def _write_result(path: Path, result: RegressAnswer) -> None:
    """The night's regress.json, whole or not at all; said, not fatal (stdout has it)."""
    try:
        write_whole(path, result.json_text() + "\n")
    except OSError as e:
        terminal(stderr=True).print(f"no {path}: {_os_error(e)}", markup=False, soft_wrap=True)


def _mininet(suite: LoadedSuite, netns: bool) -> bool:
    return suite.suite.testbed.network == "mininet" and not netns


def _with_topology(suite: LoadedSuite, path: Path) -> LoadedSuite:
    return replace(suite, topology=load_topology(path))


def _baseline(suite: LoadedSuite, accept: bool) -> Baseline | None:
    """The baseline to compare with; none (only) when accepting the first one."""
    if suite.baseline.exists():
        try:
            return read_baseline(suite.baseline, suite.name)
        except InputError:
            if not accept:
                raise
            return None  # --accept replaces a broken one
    if accept:
        return None
    raise InputError(Problem(f"no baseline at {suite.baseline}: accept a good night first "
                             f"(linkgrad regress {suite.path} --accept)", str(suite.path),
                             field="baseline"))


def _keep(suite: LoadedSuite, outcome: Outcome, started: float, args: argparse.Namespace,
          history: list[NightRecord]) -> dict[str, str]:
    """The history line and the trend page (a night run, not one compared again) and the
    JUnit file: their paths. A file that cannot be written fails the night loudly (exit 3),
    naming the verdict it had."""
    files: dict[str, str] = {}
    base = outcome.baseline
    record = night_record(suite.name, outcome.night, started, outcome.status, outcome.checks,
                          outcome.measures.gradients,
                          suite.baseline if base or args.accept else None,
                          base.accepted_unix if base else None, outcome.reason)
    try:
        if args.night is None:
            append_history(suite.output / HISTORY, record)
            files["history"] = str(suite.output / HISTORY)
            write_trend(suite.output / TREND, suite.name, [*history, record])
            files["trend"] = str(suite.output / TREND)
        if args.junit is not None:
            failure = outcome.reason if outcome.status in ("failed", "bad suite") else None
            write_junit(args.junit, junit_xml(suite.name, outcome.checks, failure,
                                              time.time() - started,
                                              accepted=outcome.status == "accepted"))
            files["junit"] = str(args.junit)
    except Exception as e:  # a full disk, or a bug: never a pass, and the verdict is said
        was = outcome.status  # so that a regression is not hidden by a full disk
        why = (_os_error(e) if isinstance(e, OSError) else
               "internal error (a bug, please report it): {}; details in {}".format(
                   *internal_error_details(e)))
        outcome.status = "failed"
        outcome.reason = (f"{outcome.reason + '; ' if outcome.reason else ''}the night's "
                          f"verdict was {was!r}, but it could not be kept: {why}")
    return files


def _answer(suite: LoadedSuite, outcome: Outcome, files: dict[str, str], accept: bool
            ) -> RegressAnswer:
    return RegressAnswer(
        suite=SuiteAnswer(name=suite.name, file=str(suite.path)),
        night=str(outcome.night), status=outcome.status,
        exit_code=EXIT[outcome.status], reason=outcome.reason,
        baseline=str(suite.baseline) if outcome.baseline or accept else None,
        baseline_accepted_unix=outcome.baseline.accepted_unix if outcome.baseline else None,
        accepted=accept and outcome.status == "accepted",
        runs={name: str(path) for name, path in outcome.runs.items()},
        counts=dict(Counter(c.verdict for c in outcome.checks)),
        regressions=[c.name for c in outcome.checks if c.verdict == "regression"],
        checks=[CheckAnswer.of(c) for c in outcome.checks],
        history=files.get("history"), trend=files.get("trend"), junit=files.get("junit"))


def _say(quiet: bool) -> Callable[[str], None]:
    console = terminal(stderr=True)
    started = time.monotonic()

    def say(message: str) -> None:
        if quiet:
            return
        # a terminal that hung up: progress is lost, the night goes on to its end
        with contextlib.suppress(OSError):
            console.print(f"[dim]{time.monotonic() - started:7.1f} s[/] {message}")
    return say


def _print(result: RegressAnswer) -> None:
    console = terminal()
    status = result.status
    colour = {"pass": "green", "accepted": "green", "regression": "red"}.get(status, "yellow")
    console.print(f"[bold {colour}]{escape(status.upper())}[/] {escape(result.night)}"
                  + (f": {escape(result.reason)}" if result.reason else ""))
    for c in (c for c in result.checks if c.verdict == "regression"):
        why = c.reason.split(": ", 1)[-1] if c.kind in ("gradient", "prediction") else c.reason
        console.print(f"[red]✗[/] {c.kind} {escape(c.name)}\n    "
                      f"{escape(_value(c.kind, c.baseline))} → "
                      f"{escape(_value(c.kind, c.current))}: {escape(why)}", soft_wrap=True)
    counts = ", ".join(f"{n} {v}" for v, n in sorted(result.counts.items()))
    console.print(f"checks: {counts or 'none'}")
    if result.accepted and result.baseline:
        console.print(f"accepted as the baseline: {escape(result.baseline)}")
    elif result.baseline:
        console.print(f"baseline: {escape(result.baseline)}")
    for key, path in (("history", result.history), ("trend", result.trend),
                      ("junit", result.junit)):
        if path is not None:
            console.print(f"{key}: {escape(path)}")


def _value(kind: str, v: CheckValues) -> str:
    """A check's value as a person reads it: `3.03 [2.96, 3.11]`, `62.4 ± 1.1 ms`; a
    night with no value of a count (a link, a SNAP class) counts 0."""
    if kind == "gradient" and isinstance(v, GradientValues) and v.gradient is not None:
        lo, hi = v.ci95 or (v.gradient, v.gradient)
        return f"{v.gradient:.2f} [{lo:.2f}, {hi:.2f}]"
    if kind == "prediction" and isinstance(v, PredictionValues):
        return f"{v.predicted_ms:.1f} ± {1.96 * v.se_ms:.1f} ms"
    if kind == "link":
        return f"{v.messages if isinstance(v, LinkValues) else 0} messages"
    if kind == "path" and isinstance(v, PathValues) and v.dominant:
        return f"dominant in {v.count} of {v.requests} requests"
    if kind == "snap":
        return f"{v.rate if isinstance(v, SnapValues) else 0:.3g} per s"
    return "-"


COMMANDS = (
    Command("regress", "nightly regression: run a suite on a fresh testbed, compare with the "
            "baseline",
            "Bring the suite's testbed up (Mininet by default), run its experiments, tear "
            "everything down (also on failure, Ctrl-C and SIGTERM), and compare what was "
            "measured with the accepted baseline: every gradient (Welch's test on both "
            "intervals, Holm's correction over the night, and a least change), every "
            "prediction of the suite's placements, the communication graph's links (new, "
            "vanished), each transaction's dominant causal path and each link's SNAP classes "
            "(new). The night goes into OUTPUT/history.jsonl and OUTPUT/trend.html, its result "
            "into its directory's regress.json. Exit 0: no regression (or --accept), 1: "
            "regression, 2: bad suite, 3: the night itself failed (testbed, SSH, a run aborted "
            "or interrupted): a failed night is never a pass.",
            _arguments, regress_command,
            epilog="Run nightly: see docs/regress.md (a systemd timer, or a cron line).",
            json_help="print the suite, the baseline and every check with its values and "
                      "verdict as JSON",
            example="linkgrad regress experiments/nightly.yaml",
            exits=((0, "no regression (or --accept)"), (1, "a regression: what changed, named"),
                   (2, "bad suite: the file, line and field are named"),
                   (3, "the night itself failed (testbed, SSH, a run aborted or interrupted)"))),
)

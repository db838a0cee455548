"""A night's outcome for `linkgrad regress`: a night run (the testbed's night, then judged) or
one run before (`--night`: its run directories read back and judged), with the status the
exit code says. A night that did not run whole, or a bug on the way, is `failed`: never
judged, never a pass."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.cli.internal_error import internal_error_details
from coordinator.config.run_dir import read_record
from coordinator.config.run_records import RunJournal
from coordinator.config.suite import LoadedSuite
from coordinator.regress.check import Check
from coordinator.regress.compare import compare
from coordinator.regress.files import Baseline, NightStatus
from coordinator.regress.measures import NightMeasures, night_measures
from linkgrad.errors import InputError, Problem
from testbed.state import default_root


@dataclass
class Outcome:
    """How the night ended and everything said of it."""

    status: NightStatus
    night: Path
    checks: list[Check] = field(default_factory=list)
    measures: NightMeasures = field(default_factory=NightMeasures)
    runs: dict[str, Path] = field(default_factory=dict)
    reason: str | None = None
    baseline: Baseline | None = None


def _night_dir(suite: LoadedSuite) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, n = suite.output / f"{suite.name}-{stamp}", 1
    while path.exists():  # two nights in one second
        n += 1
        path = suite.output / f"{suite.name}-{stamp}-{n}"
    path.mkdir(parents=True)
    return path


def run_and_compare(suite: LoadedSuite, baseline: Baseline | None, mininet: bool,
                     say: Callable[[str], None]) -> Outcome:
    from coordinator.live.night import run_night  # paramiko: loaded only to run

    try:
        directory = _night_dir(suite)
    except OSError as e:
        raise InputError(Problem(f"cannot create the night's directory: {e.strerror or e}",
                                 str(suite.path), field="output")) from e
    outcome = Outcome("failed", directory, baseline=baseline)
    try:
        night = run_night(suite, directory, mininet, default_root(), say)
        outcome.runs, outcome.measures = night.runs, night.measures
        teardown = "; ".join(night.teardown_problems)
        if night.bad_suite is not None:  # a testbed left behind outweighs it: failed
            outcome.status = "failed" if teardown else "bad suite"
            outcome.reason = "; ".join(filter(None, [str(night.bad_suite), teardown]))
        elif night.failed:
            outcome.reason = "; ".join(filter(None, [night.failure, teardown]))
        else:
            _judge(outcome, suite)
    except Exception as e:  # a bug: the night failed (exit 3), never a pass; kept as one
        summary, where = internal_error_details(e)
        outcome.status = "failed"
        outcome.reason = f"internal error (a bug, please report it): {summary}; details in {where}"
    return outcome


def compare_night(suite: LoadedSuite, directory: Path, baseline: Baseline | None) -> Outcome:
    """A night already run: its experiments' run directories read back and judged. A run
    that did not complete makes the night a failed one, as it was (never judged, never
    accepted)."""
    if (verdict := _verdict_when_run(directory)) in ("failed", "bad suite"):
        return Outcome("failed", directory, baseline=baseline,
                       reason=f"the night was {verdict!r} when it ran ({directory / RESULT})")
    measures = NightMeasures()
    runs = {}
    for e in suite.experiments:
        run_dir = directory / e.name
        if not (run_dir / "run.json").exists():
            raise InputError(Problem(f"no run of experiment {e.name!r} in this night (no "
                                     f"{run_dir / 'run.json'})", str(directory),
                                     field="--night"))
        runs[e.name] = run_dir
        journal = read_record(run_dir / "run.json", RunJournal, "how the run went")
        if not journal.succeeded:
            reason = journal.reason or journal.status
            return Outcome("failed", directory, runs=runs, baseline=baseline,
                           reason=f"experiment {e.name} {journal.status}: {reason}")
        measures = measures.merged(night_measures(e.name, run_dir, e.latencies, e.placements))
    outcome = Outcome("pass", directory, runs=runs, measures=measures, baseline=baseline)
    _judge(outcome, suite)
    return outcome


def _judge(outcome: Outcome, suite: LoadedSuite) -> None:
    if outcome.baseline is None:  # accepting the first baseline: nothing to compare with
        outcome.status = "pass"
        return
    outcome.checks = compare(outcome.baseline.measures, outcome.measures, suite.suite.checks)
    regressed = any(c.verdict == "regression" for c in outcome.checks)
    outcome.status = "regression" if regressed else "pass"


RESULT = "regress.json"  # the night's own result, as it ran


def _verdict_when_run(directory: Path) -> str | None:
    """The status the night's own regress.json gave (None: it has none, or not one to read:
    then its runs' journals decide)."""
    try:
        data = json.loads((directory / RESULT).read_text())
    except (OSError, ValueError):
        return None
    status = data.get("status") if isinstance(data, dict) else None
    return status if isinstance(status, str) else None

"""One night of `linkgrad regress`: the suite's testbed brought up, its experiments run on it
one after another, what each measured read back, and the testbed torn down whatever happened
(an error, Ctrl-C, SIGTERM from a timer's timeout), with the signals held off while it is.

A night that could not measure everything (the testbed would not come up, SSH failed, a run
was aborted or interrupted) is a failed night with its reason: never compared, never a pass.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import InputError, LinkgradError
from coordinator.config.experiment_file import load_experiment
from coordinator.config.suite import LoadedSuite, SuiteExperimentFile
from coordinator.live.run import run_experiment
from coordinator.live.session import check_local_files, sigterm_interrupts
from coordinator.regress.measures import NightMeasures, night_measures
from testbed.lifecycle import down, up

Say = Callable[[str], None]


@dataclass
class Night:
    """What a night did: its run directories, what they measured, and why it failed (if)."""

    directory: Path
    runs: dict[str, Path] = field(default_factory=dict)  # experiment -> its run directory
    measures: NightMeasures = field(default_factory=NightMeasures)
    failure: str | None = None
    bad_suite: InputError | None = None  # found only once the run was there (a placement)
    teardown_problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.failure is not None or bool(self.teardown_problems)


def run_night(suite: LoadedSuite, directory: Path, mininet: bool, testbed_root: Path,
              say: Say) -> Night:
    """Bring the testbed up, run every experiment, read what it measured, tear down."""
    night = Night(directory)
    tag = suite.tag
    with sigterm_interrupts():  # SIGTERM ends the night as Ctrl-C: the testbed goes down
        try:
            try:
                say(f"testbed {tag} up ({'Mininet' if mininet else 'network namespaces'})")
                up(suite.topology, tag, testbed_root, mininet=mininet)
                for entry in suite.experiments:
                    _run_one(night, entry, testbed_root, say)
                    if night.failure:
                        break
            finally:
                with _interrupts_held():
                    say(f"testbed {tag} down")
                    night.teardown_problems = _down(tag, testbed_root)
        except KeyboardInterrupt:
            night.failure = "interrupted (Ctrl-C or SIGTERM)"
        except InputError as e:
            night.bad_suite = e
        except (LinkgradError, OSError) as e:
            night.failure = str(e) if not isinstance(e, OSError) else _os_error(e)
    return night


def _run_one(night: Night, entry: SuiteExperimentFile, testbed_root: Path, say: Say) -> None:
    experiment = load_experiment(entry.path, testbed_root)
    endpoints = check_local_files(experiment)
    run_dir = night.directory / entry.name
    run_dir.mkdir(parents=True, exist_ok=True)
    night.runs[entry.name] = run_dir
    say(f"experiment {entry.name}: {run_dir}")
    journal = run_experiment(experiment, run_dir, say, endpoints=endpoints)
    if journal.status == "interrupted":
        raise KeyboardInterrupt
    if not journal.succeeded:
        reason = journal.reason or "; ".join(journal.cleanup_problems or []) or journal.status
        night.failure = f"experiment {entry.name} {journal.status}: {reason}"
        return
    night.measures = night.measures.merged(
        night_measures(entry.name, run_dir, entry.latencies, entry.placements))


def _down(tag: str, testbed_root: Path) -> list[str]:
    try:
        down(tag, root=testbed_root)
    except (LinkgradError, OSError) as e:
        return [f"testbed {tag} down: {e}"]
    return []


def _os_error(e: OSError) -> str:
    return f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}"


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM ignored while the testbed is torn down: half a teardown would leave
    namespaces and servers behind every night."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)

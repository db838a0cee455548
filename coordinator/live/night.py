"""One night of `linkgrad regress`: the suite's testbed brought up, its experiments run on it
one after another, what each measured read back, and the testbed torn down whatever happened
(an error, Ctrl-C, SIGTERM from a timer's timeout, SIGHUP), with the signals held off while
it is. A suite with `network: none` runs on the experiments' own hosts: nothing is brought up
or down.

A night that could not measure everything (the testbed would not come up, SSH failed, a run
was aborted or interrupted, another night holds the testbed) is a failed night with its
reason: never compared, never a pass.
"""

from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.config.experiment_file import load_experiment
from coordinator.config.suite import LoadedSuite, SuiteExperimentFile
from coordinator.live.run import run_experiment
from coordinator.live.session import Say, check_local_files, sigterm_interrupts
from coordinator.regress.measures import NightMeasures, night_measures
from linkgrad.errors import InputError, LinkgradError, RuntimeFailure
from testbed.lifecycle import down, up
from testbed.state import directory_for


@dataclass
class Night:
    """What a night did: its run directories, what they measured, and why it failed (if)."""

    directory: Path
    runs: dict[str, Path] = field(default_factory=dict)  # experiment -> its run directory
    measures: NightMeasures = field(default_factory=NightMeasures)
    failure: str | None = None
    bad_suite: InputError | None = None  # found only once the testbed was up
    teardown_problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.failure is not None or bool(self.teardown_problems)


def run_night(suite: LoadedSuite, directory: Path, mininet: bool, testbed_root: Path,
              say: Say) -> Night:
    """Bring the testbed up, run every experiment, read what it measured, tear down."""
    night = Night(directory)
    own_hosts = suite.suite.testbed.network == "none"
    with sigterm_interrupts():  # SIGTERM and SIGHUP end the night as Ctrl-C: the testbed goes
        try:
            with _lock(suite.output / ".regress.lock", f"suite {suite.name}'s output"):
                if own_hosts:
                    _run_all(night, suite, testbed_root, say)
                else:
                    with _lock(_tag_lock(suite.tag, testbed_root), f"testbed {suite.tag}"):
                        _on_testbed(night, suite, mininet, testbed_root, say)
        except KeyboardInterrupt:
            night.failure = "interrupted (Ctrl-C, SIGTERM or SIGHUP)"
        except InputError as e:
            night.bad_suite = e
        except (LinkgradError, OSError) as e:
            night.failure = str(e) if not isinstance(e, OSError) else _os_error(e)
    return night


def _on_testbed(night: Night, suite: LoadedSuite, mininet: bool, testbed_root: Path,
                say: Say) -> None:
    tag = suite.tag
    try:
        say(f"testbed {tag} up ({'Mininet' if mininet else 'network namespaces'})")
        up(suite.topology, tag, testbed_root, mininet=mininet)
        _run_all(night, suite, testbed_root, say)
    finally:
        with _interrupts_held():
            night.teardown_problems = _down(suite, testbed_root)  # before a word is said: a
            say(f"testbed {tag} down")  # terminal that hung up must not skip it


def _run_all(night: Night, suite: LoadedSuite, testbed_root: Path, say: Say) -> None:
    for entry in suite.experiments:
        _run_one(night, entry, testbed_root, say)
        if night.failure:
            return


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
    try:
        measured = night_measures(entry.name, run_dir, entry.latencies, entry.placements)
    except InputError as e:  # the run's own files: a failed night, not a bad suite
        night.failure = f"experiment {entry.name}: its run's files cannot be read: {e}"
        return
    night.measures = night.measures.merged(measured)


def _down(suite: LoadedSuite, testbed_root: Path) -> list[str]:
    try:
        # the topology: without a state file, down finds what is left by its names
        down(suite.tag, suite.topology, root=testbed_root)
    except (LinkgradError, OSError) as e:
        return [f"testbed {suite.tag} down: {e}"]
    return []


def _os_error(e: OSError) -> str:
    return f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}"


def _tag_lock(tag: str, testbed_root: Path) -> Path:
    """Beside the testbed's directory: one night per tag at a time (`up` would take down
    another night's testbed of the same tag as a crashed one's)."""
    return directory_for(tag, testbed_root).with_name(f"linkgrad-regress-{tag}.lock")


@contextmanager
def _lock(path: Path, what: str) -> Iterator[None]:
    """An exclusive flock on `path` (made if needed, never through a symlink, ours only),
    held for the night; RuntimeFailure at once if another night holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise RuntimeFailure(f"{path} is another user's: remove it (it only locks {what})")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise RuntimeFailure(f"another night is running on {what} ({path} is locked)") from e
        yield
    finally:
        os.close(fd)


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP ignored while the testbed is torn down: half a teardown would
    leave namespaces and servers behind every night."""
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)

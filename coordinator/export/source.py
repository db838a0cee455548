"""What an export reads of a run directory, through the run's own readers: every link
measurement (`gradients.json`, required), the journal (`run.json`) and the hosts' addresses
(`experiment.json`), each optional, and the host probes' series (`hosts.json`) only for the
targets that export them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from coordinator.config.hosts_file import HostsFile, read_hosts
from coordinator.config.run_dir import read_measurements, read_record
from coordinator.config.run_records import (
    ExperimentAsRun,
    LinkMeasurement,
    RunJournal,
)
from linkgrad.errors import InputError, Problem

__all__ = ["RunExport", "read_run"]


@dataclass(frozen=True)
class RunExport:
    """A run as the builders see it: plain models, no files."""

    run: str  # the run directory's name
    experiment: str
    links: tuple[LinkMeasurement, ...]  # every measurement, in gradients.json's order
    hosts: HostsFile | None = None  # None: no hosts.json, or not read (not exported)
    journal: RunJournal | None = None
    addresses: Mapping[str, str] = field(default_factory=dict)  # host name -> address

    def last_per_link(self) -> list[LinkMeasurement]:
        """Each link's last measurement (a link measured at several delays has several): the
        run's last state, one series per link."""
        last = {m.link.label: m for m in self.links}
        return [last[label] for label in sorted(last)]


def read_run(run_dir: Path, *, hosts: bool) -> RunExport:
    """The run at `run_dir`, with its `hosts.json` if `hosts` (a target that exports host
    metrics); InputError naming the directory or the file and field.

    A `hosts.json` read is read strictly: one that is there but cut short or wrong is
    InputError, not an export without host metrics, which would look whole and replace a
    previous file's host series with none. A target that has no use for it never opens it.
    """
    if not run_dir.is_dir():
        raise InputError(Problem("no such run directory", str(run_dir)))
    links = read_measurements(run_dir / "gradients.json")
    journal_path, experiment_path = run_dir / "run.json", run_dir / "experiment.json"
    journal = read_record(journal_path, RunJournal, "the run journal") \
        if _there(journal_path) else None
    experiment = read_record(experiment_path, ExperimentAsRun,
                             "the experiment as run") if _there(experiment_path) else None
    name = experiment.name if experiment else run_dir.resolve().name  # the same for any target
    return RunExport(run=run_dir.resolve().name, experiment=name, links=tuple(links),
                     hosts=read_hosts(run_dir) if hosts else None, journal=journal,
                     addresses={h.name: h.address for h in (experiment.hosts if experiment
                                                             else ()) if h.address})


def _there(path: Path) -> bool:
    """A file to read: one that exists, or a link to nothing (a file gone wrong, said)."""
    return path.exists() or path.is_symlink()

"""`hosts.json`: what every host's probe reported over the run (Kissel et al.'s BLiPP series),
and the run's phases (the probe contexts the coordinator opened: the passive phase, each group
of links measured), so each report reads against what was injected then."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from coordinator.config.fields import Str
from coordinator.config.run_dir import read_record
from linkgrad.calipers import CaliperSummary
from linkgrad.hostprobe.load import HostLoad, ReportedRates, load_during
from linkgrad.protocol.hosts import HostReportEvent, Probing

__all__ = ["HostReport", "HostSeries", "HostsFile", "ProbePhase", "read_hosts"]


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ProbePhase(_File):
    """A probe context: from when the coordinator opened it to when the next began."""

    context: Str  # "passive", "measure tcp app1:0 -> db:5432, ..."
    start_s: float
    end_s: float | None = None  # None: the run ended inside it before the probes stopped
    fast: list[Str] = Field(default_factory=list)  # hosts sampled at the fast rate
    links: list[Str] = Field(default_factory=list)  # the links injected in it


class HostReport(ReportedRates):
    """One `host` report as the file keeps it."""

    context: Str
    samples: int = Field(ge=1)
    series: dict[Str, CaliperSummary] = Field(default_factory=dict)

    @classmethod
    def of(cls, event: HostReportEvent) -> HostReport:
        return cls(context=event.context, from_s=event.from_s, to_s=event.to_s,
                   samples=event.samples, host=event.host, cgroup=event.cgroup,
                   series=event.series)


class HostSeries(_File):
    probing: Probing | None = None  # what its probe could give (cgroup, what is missing)
    reports: list[HostReport] = Field(default_factory=list)

    def load_during(self, start_s: float, end_s: float) -> HostLoad | None:
        return load_during(self.reports, start_s, end_s)


class HostsFile(_File):
    experiment: Str
    phases: list[ProbePhase] = Field(default_factory=list)
    hosts: dict[Str, HostSeries] = Field(default_factory=dict)

    def merged(self, later: HostsFile) -> HostsFile:
        """This file's series and phases followed by a later session's (a resumed run)."""
        hosts = dict(self.hosts)
        for name, series in later.hosts.items():
            before = hosts.get(name)
            hosts[name] = series if before is None else HostSeries(
                probing=series.probing or before.probing,
                reports=[*before.reports, *series.reports])
        return HostsFile(experiment=later.experiment, phases=[*self.phases, *later.phases],
                         hosts=hosts)


def read_hosts(run_dir: Path) -> HostsFile | None:
    """The run's `hosts.json`; None for a run made without host probes."""
    path = run_dir / "hosts.json"
    there = path.exists() or path.is_symlink()  # a link to nothing is a file gone wrong
    return read_record(path, HostsFile, "the host probes' series") if there else None

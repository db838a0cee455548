"""`snap.json`: what each host's SNAP profiler could give, which host each address is, and
every report (`linkgrad.protocol.snap.SnapReportEvent`, with its host)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from coordinator.config.fields import Str
from coordinator.config.run_dir import read_record
from linkgrad.protocol.base import Message
from linkgrad.protocol.snap import Profiling, SnapReportEvent


class _Hosted(Message):
    # a base listed after SnapReportEvent: pydantic puts its field before that class's
    host: Str


class HostSnapReport(SnapReportEvent, _Hosted):
    """A host's `snap` report as snap.json keeps it: `host` first, and `socket_calls_lost`
    written null too (as it always was)."""

    absent_when_none: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def of(cls, host: str, event: SnapReportEvent) -> HostSnapReport:
        return cls(host=host, **dict(event))


class SnapFile(BaseModel):
    """Written with `model_dump(mode="json", by_alias=True)`: the reports' wire names."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    hosts: dict[Str, Profiling] = Field(default_factory=dict)
    addresses: dict[Str, Str] = Field(default_factory=dict)
    reports: list[HostSnapReport] = Field(default_factory=list)


def read_snap(run_dir: Path) -> SnapFile | None:
    """The run's `snap.json`; None for a run made before SNAP (or without sniffers)."""
    path = run_dir / "snap.json"
    return read_record(path, SnapFile, "SNAP's profile") if path.exists() else None

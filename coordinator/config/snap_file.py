"""`snap.json` read back: what each host's SNAP profiler could give, which host each address
is, and every report (`linkgrad.protocol.snap.SnapReportEvent`, with its host)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coordinator.config.fields import Str
from coordinator.config.run_dir import read_record
from linkgrad.protocol.snap import Profiling, SnapReportEvent


class HostSnapReport(SnapReportEvent):
    host: Str


class SnapFile(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    hosts: dict[Str, Profiling] = Field(default_factory=dict)
    addresses: dict[Str, Str] = Field(default_factory=dict)
    reports: list[HostSnapReport] = Field(default_factory=list)

    def report_dicts(self) -> list[dict[str, Any]]:
        """The reports as `linkgrad.snap.evidence` reads them (the wire's JSON)."""
        return [r.model_dump(mode="json", by_alias=True) for r in self.reports]


def read_snap(run_dir: Path) -> SnapFile | None:
    """The run's `snap.json`; None for a run made before SNAP (or without sniffers)."""
    path = run_dir / "snap.json"
    return read_record(path, SnapFile, "SNAP's profile") if path.exists() else None

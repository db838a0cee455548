"""What the passive half saw of one (transaction, link) while its gradient was measured: the
inputs of the verdict's causes, each None where the run had no such evidence."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Branches", "DirectionTraffic", "HostBusy", "LinkEvidence", "Trend"]


@dataclass(frozen=True)
class DirectionTraffic:
    """One sending direction of the link during its measurement, from SNAP's connection sums:
    sockets that began in the window, the application's writes and the segments they took."""

    src_host: str
    dst_host: str
    opened: int  # connections first seen in the window
    opened_passive: int | None  # the same in the passive phase (None: not known)
    writes: float
    write_bytes: float
    segments: float  # data segments sent

    @property
    def segments_per_write(self) -> float | None:
        return self.segments / self.writes if self.writes > 0 else None

    @property
    def bytes_per_write(self) -> float | None:
        return self.write_bytes / self.writes if self.writes > 0 else None


@dataclass(frozen=True)
class HostBusy:
    """A host's CPU and disk during the measurement beside the passive phase (None: no
    report)."""

    host: str
    cpu_busy: float | None  # the machine's
    own_cores: float | None  # the host's cgroup's
    passive_own_cores: float | None
    disk_busy: float | None
    passive_cpu_busy: float | None = None


@dataclass(frozen=True)
class Trend:
    """The gradient at two settings: the quiet and busy cycles (load), or the least and the
    largest delay (linearity), and whether they differ beyond their intervals."""

    what: str  # "delay" or "load"
    low: float
    high: float
    differ: bool


@dataclass(frozen=True)
class Branches:
    """The link's messages in the transaction's patterns, as the paths drew them."""

    crossing_requests: int  # requests whose pattern crosses the link at all
    critical_share: float  # of their crossings, on the critical path
    parallel: tuple[str, ...]  # sibling messages sent beside the link's (host pairs)


@dataclass(frozen=True)
class LinkEvidence:
    window_requests: int  # every transaction's requests in the measurement window
    passive_requests: int = 0  # and in the passive phase (0: not known)
    snap: dict[str, float] = field(default_factory=dict)  # class -> seconds, measurement
    snap_passive: dict[str, float] = field(default_factory=dict)  # the same, passive phase
    traffic: tuple[DirectionTraffic, ...] = ()  # the link's two directions
    hosts: tuple[HostBusy, ...] = ()
    trends: tuple[Trend, ...] = ()
    branches: Branches | None = None
    packets_delayed: int | None = None

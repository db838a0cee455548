"""The sniffer's SNAP profiling: the `profile` request, and the `snap` reports it emits.

`profile` starts polling every TCP socket of the host (SNAP §2, §7) and emits a `snap` event
every `report_interval_s` until `unprofile`, which first emits a last one. A report holds, per
connection that moved data or had a problem since the previous report, its sums (seconds in
each Table 2 class, bytes, segments, retransmissions); and a full record (the classes, the
Table 1 statistics, the socket calls) for each interval with a problem.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictFloat

from linkgrad.protocol.base import Message, Request, Result
from linkgrad.protocol.fields import LIMIT_UNIX_S

__all__ = [
    "Number",
    "Profile",
    "Profiling",
    "Seconds",
    "SnapConnection",
    "SnapEnd",
    "SnapRecord",
    "SnapReportEvent",
    "UnixS",
    "Unprofile",
]

Seconds = Annotated[float, Field(ge=0, lt=LIMIT_UNIX_S)]
UnixS = Annotated[float, Field(ge=0, lt=LIMIT_UNIX_S)]
Number = Annotated[float, Field(ge=0)]


class Profiling(Result):
    """`profile`'s answer: what this host can and cannot give."""

    table_interval_s: float
    socket_calls: bool  # socket-call logs (tracepoints) are on
    missing: tuple[str, ...] = ()  # what this host lacks, each with its consequence
    ephemeral_range: tuple[int, int] | None = None  # the host's: which local ports are clients


class Profile(Request[Profiling]):
    """Start profiling; parameters of SNAP §7 (budget, in percent of one core) and Table 2."""

    cmd: Literal["profile"] = "profile"
    report_interval_s: StrictFloat = Field(5.0, ge=0.1, le=3600)
    # the connections' sums (the bulk of the log) go out this often, the problem records with
    # every report
    sums_interval_s: StrictFloat = Field(60.0, ge=0.1, le=86400)
    table_interval_s: StrictFloat = Field(0.5, ge=0.01, le=3600)
    table_interval_max_s: StrictFloat = Field(30.0, ge=0.01, le=3600)
    fast_interval_min_s: StrictFloat = Field(0.05, ge=0.01, le=3600)
    cpu_lower_pct: StrictFloat = Field(2.0, gt=0, le=100)
    cpu_upper_pct: StrictFloat = Field(5.0, gt=0, le=100)
    history_s: StrictFloat = Field(60.0, gt=0, le=86400)
    max_queuing_delay_s: StrictFloat = Field(0.010, gt=0, le=10)
    delayed_ack_timeout_s: StrictFloat = Field(0.042, gt=0, le=10)
    socket_calls: StrictBool = True
    seed: int | None = None  # of the Poisson polling times


class Unprofile(Request[Profiling]):
    cmd: Literal["unprofile"] = "unprofile"


class SnapEnd(Message):
    """One end of a connection, as the reporting host sees it."""

    addr: str
    port: int = Field(ge=0, le=65535)


class SnapConnection(Message):
    local: SnapEnd
    remote: SnapEnd
    pid: int | None = None
    process: str | None = None
    first_s: UnixS  # the start of its first interval in this report
    last_s: UnixS
    polls: int = Field(ge=0)
    seconds: dict[str, Seconds]  # Table 2 class -> seconds held
    sums: dict[str, Number]  # bytes_acked, data_segs_out, retrans, rto, writes, ...
    delayed_acks: Number
    problem_intervals: int = Field(ge=0)
    # sockets summed here: 1, or the short ones (closed before any poll) of one logical link,
    # whose client port is written 0
    sockets: int = Field(1, ge=1)


class SnapRecord(Message):
    """An interval with a problem: SNAP's full log entry."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              allow_inf_nan=False)
    local: SnapEnd
    remote: SnapEnd
    from_s: UnixS = Field(alias="from")
    to_s: UnixS = Field(alias="to")
    classes: tuple[str, ...]
    delayed_acks: Number | None = None
    tcp: dict[str, float]  # the Table 1 statistics: counters' differences, snapshots' values
    calls: dict[str, Number] | None = None  # writes, write_bytes, small_writes; None: untraced


class SnapReportEvent(Message):
    """The sniffer's `snap` event; `socket_calls_lost` and `notice_losses` are on the wire
    only when some were."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              allow_inf_nan=False)
    absent_when_none: ClassVar[tuple[str, ...]] = ("socket_calls_lost", "notice_losses")
    event: Literal["snap"] = "snap"
    from_s: UnixS = Field(alias="from")
    to_s: UnixS = Field(alias="to")
    cpu_pct: Number  # the profiler's CPU share over the report, percent of one core
    table_interval_s: Number
    fast_connections: int = Field(ge=0)
    sockets: int = Field(ge=0)  # TCP connections the last table read held
    connections: tuple[SnapConnection, ...] = ()
    records: tuple[SnapRecord, ...] = ()
    dropped_records: int = Field(0, ge=0)
    socket_calls_lost: str | None = None  # the tracer's maps overflowed: what was not counted
    # times the kernel's notices of closed sockets were lost since the last report: a
    # connection closing then is missing from the closed connections' statistics
    notice_losses: int | None = Field(None, ge=0)

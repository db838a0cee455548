"""The sniffer daemon's protocol: requests, and the reports of links that carried traffic.

`poll` answers with every link that carried at least `threshold` messages since the previous
poll; `watch` emits such a report as an event every `interval_s` until `unwatch`, which first
emits a last report up to that moment.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictFloat, TypeAdapter

from linkgrad.protocol.base import Empty, Message, Request, Result
from linkgrad.protocol.fields import LIMIT_UNIX_S, Count
from linkgrad.protocol.hosts import Probe, Unprobe
from linkgrad.protocol.snap import Profile, Unprofile
from linkgrad.protocol.trace import TraceRequest, Untrace

__all__ = [
    "SNIFFER_REQUEST",
    "AnySnifferRequest",
    "HealthRequest",
    "LinkCount",
    "LinkEnd",
    "Poll",
    "Report",
    "ReportEvent",
    "RttAnswer",
    "SnifferHealth",
    "SnifferReady",
    "SnifferRequest",
    "Stop",
    "Unwatch",
    "Watch",
    "Watching",
]

WATCH_MIN_S, WATCH_MAX_S = 0.05, 3600.0  # a report at most 20 times a second, at least hourly


class LinkEnd(Message):
    addr: str
    port: int  # 0: an ephemeral port
    pid: int | None = None
    process: str | None = None  # /proc/PID/comm of the socket's owner, where known


class LinkCount(Message):
    proto: str
    src: LinkEnd
    dst: LinkEnd
    messages: int | None  # data segments (None: seen, not counted: UDP, listening)


class Report(Result):
    """Links seen from `from` to `to` (unix s) on the reporting host: `poll`'s answer."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              allow_inf_nan=False)
    from_s: float = Field(alias="from", ge=0, lt=LIMIT_UNIX_S)  # the daemon's clock
    to_s: float = Field(alias="to", ge=0, lt=LIMIT_UNIX_S)
    links: tuple[LinkCount, ...] = ()
    # times the kernel's notices of closed sockets were lost since the previous report (an
    # overrun of its queue drops an unknown number; a datagram unreadable): a connection that
    # closed then is counted only to its last dump, and one shorter than a poll not at all;
    # absent: none
    absent_when_none = ("notice_losses",)
    notice_losses: Count | None = None


class ReportEvent(Report):
    """A report sent while watching, as an event."""

    event: Literal["report"] = "report"


class SnifferReady(Message):
    event: Literal["ready"] = "ready"
    pid: int
    absent_when_none = ("warning", "ipv6_addresses", "boot_id")
    closed_sockets: bool  # the kernel's notices of freed sockets are heard
    warning: str | None = None  # what the sniffer cannot do on this host
    # the host's own IPv6 addresses (not ::1): what names the hosts of an IPv6 link, whose
    # addresses the experiment does not list; None: not known
    ipv6_addresses: tuple[Annotated[str, Field(max_length=64)], ...] | None = None
    # the kernel's boot (/proc/sys/kernel/random/boot_id): hosts that give the same one share
    # a machine, and SNAP's CPU budget with it; None: not known
    boot_id: Annotated[str, Field(max_length=64)] | None = None


class SnifferHealth(Result):
    pid: int
    ephemeral_range: tuple[int, int]
    watching: bool


class Watching(Result):
    interval_s: float = Field(ge=WATCH_MIN_S, le=WATCH_MAX_S)


class HealthRequest(Request[SnifferHealth]):
    cmd: Literal["health"] = "health"


class Poll(Request[Report]):
    cmd: Literal["poll"] = "poll"
    threshold: Count = 1


class Watch(Request[Watching]):
    cmd: Literal["watch"] = "watch"
    interval_s: StrictFloat = Field(1.0, ge=WATCH_MIN_S, le=WATCH_MAX_S)
    threshold: Count = 1


class Unwatch(Request[Empty]):
    cmd: Literal["unwatch"] = "unwatch"


class Stop(Request[Empty]):
    cmd: Literal["stop"] = "stop"


AnySnifferRequest = (HealthRequest | Poll | Watch | Unwatch | Profile | Unprofile | TraceRequest
                     | Untrace | Probe | Unprobe | Stop)
SnifferRequest = Annotated[AnySnifferRequest, Field(discriminator="cmd")]
SNIFFER_REQUEST: TypeAdapter[AnySnifferRequest] = TypeAdapter(SnifferRequest)


class RttAnswer(Message):
    """What `python -m sniffer.rtt` prints: TCP connect round trips (s), and failed connects."""

    rtt_s: tuple[Annotated[StrictFloat, Field(ge=0)], ...]
    failed: Count

"""The injector daemon's protocol: links, schedules, requests, replies and its statistics.

Schedules (after Toxiproxy's toxics: one kind per impairment, units in field names): `off`,
`constant` (for `duration_s`, default the cap) and `square` (50% duty, on first: the rising
edge at `start`, `cycles` periods). Times are unix seconds, so the phase matches the web
log's clock; delays are milliseconds on the wire.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from linkgrad.protocol.base import UNION_FIELDS, Message, Request, Result
from linkgrad.protocol.fields import (
    LIMIT_CYCLES,
    LIMIT_DURATION_S,
    LIMIT_MAGNITUDE_MS,
    MAX_TEXT,
    MIN_PERIOD_S,
    Count,
    LinkId,
    UnixTime,
    family,
    parse_endpoint_text,
)
from linkgrad.square_wave import SquareWave

__all__ = [
    "INJECTOR_REQUEST",
    "LIMIT_HELD_MS",
    "SCHEDULE",
    "Add",
    "Added",
    "AllStats",
    "Calipers",
    "Caps",
    "ConstantSchedule",
    "Duration",
    "Endpoint",
    "Health",
    "HealthRequest",
    "HeldMs",
    "InjectorReady",
    "InjectorRequest",
    "LinkSpec",
    "LinkStats",
    "Magnitude",
    "OffSchedule",
    "PhaseStats",
    "Remove",
    "Removed",
    "Schedule",
    "ScheduleSet",
    "ScheduleSpec",
    "SetSchedule",
    "SquareSchedule",
    "StatsRequest",
    "Stop",
    "Stopping",
]

OFF, ON, CONSTANT = "off", "on", "constant"  # a link's phases


Endpoint = Annotated[str, Field(max_length=MAX_TEXT)]


class LinkSpec(Message):
    """What the injector matches: protocol and `IP[:PORT]` or `NET/PREFIX[:PORT]` ends, IPv4
    or IPv6 (`[fd00::3]:5432`; an IPv4-mapped address is its IPv4 address), both of one
    version (port 0 or none: any); at least one address."""

    proto: Literal["tcp", "udp", "icmp"] = "tcp"
    src: Endpoint | None = None
    dst: Endpoint | None = None

    @field_validator("src", "dst")
    @classmethod
    def _endpoint(cls, text: str | None) -> str | None:
        if text is not None:
            try:
                parse_endpoint_text(text)
            except ValueError as e:
                raise PydanticCustomError("endpoint", str(e)) from e
        return text  # as given: the wire form stays what the sender wrote

    @model_validator(mode="after")
    def _addressed(self) -> LinkSpec:
        if self.src is None and self.dst is None:
            raise PydanticCustomError("no_address", "give a source or destination address: "
                                      "a link without one would delay the whole protocol")
        ends = [parse_endpoint_text(end) for end in (self.src, self.dst) if end is not None]
        if self.proto == "icmp" and any(port for _, port in ends):
            raise PydanticCustomError("icmp_port", "icmp has no ports")
        if len({family(address) for address, _ in ends}) > 1:
            raise PydanticCustomError("ip_version", "src and dst are of different IP versions "
                                      "(IPv4 and IPv6): no packet has both")
        return self


Magnitude = Annotated[StrictFloat, Field(le=LIMIT_MAGNITUDE_MS)]  # and the daemon's own cap
Duration = Annotated[StrictFloat, Field(gt=0.0, le=LIMIT_DURATION_S)]


class _Schedule(Message):
    loss_fraction: StrictFloat = Field(0.0, ge=0.0, le=1.0)


class OffSchedule(_Schedule):
    kind: Literal["off"] = "off"


class ConstantSchedule(_Schedule):
    kind: Literal["constant"] = "constant"
    magnitude_ms: Annotated[Magnitude, Field(ge=0.0)]
    start: UnixTime | None = None  # unix s; default now
    duration_s: Duration | None = None  # default: the duration cap


class SquareSchedule(_Schedule):
    kind: Literal["square"] = "square"
    magnitude_ms: Annotated[Magnitude, Field(gt=0.0)]
    start: UnixTime | None = None  # unix s of the first rising edge; default now
    period_s: Annotated[StrictFloat, Field(ge=MIN_PERIOD_S, le=LIMIT_DURATION_S)]
    cycles: Annotated[StrictInt, Field(ge=1, le=LIMIT_CYCLES)]

    @classmethod
    def of(cls, wave: SquareWave) -> SquareSchedule:
        return cls(start=float(wave.start_s), period_s=float(wave.period_s),
                   cycles=int(wave.cycles), magnitude_ms=float(wave.magnitude_s) * 1e3)


ScheduleSpec = OffSchedule | ConstantSchedule | SquareSchedule
Schedule = Annotated[ScheduleSpec, Field(discriminator="kind")]
SCHEDULE: TypeAdapter[ScheduleSpec] = TypeAdapter(Schedule)


# No packet is held longer than a schedule lasts: a delay (or its error) beyond is no
# measurement. The coordinator takes a link's mean as the delay it injected, brought within an
# injection record's narrower limits by `record.recorded_delay_ms` (with a note)
LIMIT_HELD_MS = LIMIT_DURATION_S * 1e3
HeldMs = Annotated[float, Field(ge=-LIMIT_HELD_MS, le=LIMIT_HELD_MS)]  # errors go below 0


class Calipers(Message):
    """Summary statistics of a delay, in ms (Kissel et al.'s calipers); nulls when empty."""

    count: Count = 0
    min_ms: HeldMs | None = None
    max_ms: HeldMs | None = None
    mean_ms: HeldMs | None = None
    std_ms: Annotated[HeldMs, Field(ge=0)] | None = None


class PhaseStats(Message):
    actual: Calipers  # the delay each packet got
    error: Calipers  # actual minus requested


class LinkStats(Message):
    """A link's statistics: per schedule (its id, 0 the first) and phase."""

    link: str
    schedule_id: int
    dropped: int
    held: int
    schedules: dict[str, dict[str, PhaseStats]]
    # unix times of the latest drops (at most 100,000), when asked for (StatsRequest.drop_times)
    drop_times_s: tuple[float, ...] | None = None

    def applied(self, schedule_id: int = 0, phase: str = ON) -> Calipers:
        """The delay actually applied in `phase` of schedule `schedule_id`."""
        entry = self.schedules.get(str(schedule_id), {}).get(phase)
        return entry.actual if entry is not None else Calipers()


class Caps(Message):
    max_magnitude_ms: Annotated[float, Field(gt=0, le=LIMIT_MAGNITUDE_MS)]
    max_duration_s: Annotated[float, Field(gt=0, le=LIMIT_DURATION_S)]


class InjectorReady(Message):
    event: Literal["ready"] = "ready"
    pid: int
    chain: str
    stale_removed: bool


class Health(Result):
    pid: int
    backend: str
    chain: str
    links: int
    held: int
    callback_errors: int
    realtime: bool
    stale_removed: bool
    caps: Caps


class Added(Result):
    link_id: int
    link: str
    schedule_id: int


class ScheduleSet(Result):
    schedule_id: int


class Removed(Result):
    stats: LinkStats


class AllStats(Result):
    links: dict[str, LinkStats] = Field(default_factory=dict)


class Stopping(Result):
    stats: dict[str, LinkStats]  # every link's, as the daemon stops


class HealthRequest(Request[Health]):
    cmd: Literal["health"] = "health"


class Add(Request[Added]):
    cmd: Literal["add"] = "add"
    link: LinkSpec
    schedule: Schedule


class SetSchedule(Request[ScheduleSet]):
    cmd: Literal["schedule"] = "schedule"
    link_id: LinkId
    schedule: Schedule


class Remove(Request[Removed]):
    cmd: Literal["remove"] = "remove"
    link_id: LinkId


class StatsRequest(Request[AllStats]):
    cmd: Literal["stats"] = "stats"
    link_id: LinkId | None = None  # none: every link
    drop_times: StrictBool | None = None  # true: also each link's latest drops' times


class Stop(Request[Stopping]):
    cmd: Literal["stop"] = "stop"


InjectorRequest = Annotated[HealthRequest | Add | SetSchedule | Remove | StatsRequest | Stop,
                            Field(discriminator="cmd")]
INJECTOR_REQUEST: TypeAdapter[HealthRequest | Add | SetSchedule | Remove | StatsRequest | Stop] \
    = TypeAdapter(InjectorRequest)
UNION_FIELDS["schedule"] = ("off", "constant", "square")

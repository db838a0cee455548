"""Schedules: what the injector does to a link over time (off, constant, square wave).

One tiny interface, a registry by name, units in field names (after Toxiproxy's toxics): an
unknown kind or a misspelt field is an error, never "no delay". Times are unix seconds (the
phase must match the web log's clock); delays are seconds inside, milliseconds at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from common.errors import InputError, Problem

OFF, ON, CONSTANT = "off", "on", "constant"


class Schedule(Protocol):
    def phase(self, now_s: float) -> str: ...

    def delay_s(self, now_s: float) -> float: ...

    @property
    def loss_fraction(self) -> float: ...

    @property
    def end_s(self) -> float | None: ...  # None: never ends by itself

    def next_change_s(self, now_s: float) -> float | None: ...  # next edge after now, if any


@dataclass(frozen=True)
class Off:
    loss_fraction: float = 0.0
    end_s: float | None = None

    def phase(self, now_s: float) -> str:
        return OFF

    def delay_s(self, now_s: float) -> float:
        return 0.0

    def next_change_s(self, now_s: float) -> float | None:
        return None


@dataclass(frozen=True)
class Constant:
    magnitude_s: float
    start_s: float
    duration_s: float
    loss_fraction: float = 0.0

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    def phase(self, now_s: float) -> str:
        return CONSTANT if self.start_s <= now_s < self.end_s else OFF

    def delay_s(self, now_s: float) -> float:
        return self.magnitude_s if self.start_s <= now_s < self.end_s else 0.0

    def next_change_s(self, now_s: float) -> float | None:
        return next((t for t in (self.start_s, self.end_s) if t > now_s), None)


@dataclass(frozen=True)
class Square:
    """50% duty, on first: the rising edge at start_s, `cycles` periods."""

    magnitude_s: float
    start_s: float
    period_s: float
    cycles: int
    loss_fraction: float = 0.0

    @property
    def end_s(self) -> float:
        return self.start_s + self.cycles * self.period_s

    def phase(self, now_s: float) -> str:
        if not self.start_s <= now_s < self.end_s:
            return OFF
        return ON if (now_s - self.start_s) % self.period_s < self.period_s / 2 else OFF

    def delay_s(self, now_s: float) -> float:
        return self.magnitude_s if self.phase(now_s) == ON else 0.0

    def next_change_s(self, now_s: float) -> float | None:
        if now_s < self.start_s:
            return self.start_s
        half = self.period_s / 2
        edge = self.start_s + (int((now_s - self.start_s) // half) + 1) * half
        return edge if edge <= self.end_s else None


@dataclass(frozen=True)
class Caps:
    """Hard limits every schedule must respect."""

    max_magnitude_ms: float = 500.0
    max_duration_s: float = 3600.0


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    loss_fraction: float = Field(0.0, ge=0.0, le=1.0)


class OffSpec(_Spec):
    kind: Literal["off"]


class ConstantSpec(_Spec):
    kind: Literal["constant"]
    magnitude_ms: float = Field(ge=0.0)
    start: float | None = None  # unix s; default now
    duration_s: float | None = Field(None, gt=0.0)  # default: the duration cap


class SquareSpec(_Spec):
    kind: Literal["square"]
    magnitude_ms: float = Field(gt=0.0)
    start: float | None = None  # unix s of the first rising edge; default now
    period_s: float = Field(gt=0.0)
    cycles: int = Field(ge=1)


ScheduleSpec = Annotated[OffSpec | ConstantSpec | SquareSpec, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[OffSpec | ConstantSpec | SquareSpec] = TypeAdapter(ScheduleSpec)


def schedule_from_json(data: object, now_s: float, caps: Caps, where: str = "schedule") -> Schedule:
    """Validate a schedule (JSON object) against the schema and the caps, and build it."""
    try:
        spec = _ADAPTER.validate_python(data)
    except ValidationError as e:
        raise InputError([
            Problem("unknown field" if err["type"] == "extra_forbidden" else err["msg"],
                    field=".".join([where, *(str(p) for p in _without_tag(err["loc"]))]))
            for err in e.errors()
        ]) from e
    return build_schedule(spec, now_s, caps, where)


def _without_tag(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """pydantic puts the union's tag first in an error's path; a person reads the field."""
    return loc[1:] if loc and loc[0] in ("off", "constant", "square") else loc


def build_schedule(
    spec: OffSpec | ConstantSpec | SquareSpec, now_s: float, caps: Caps, where: str = "schedule"
) -> Schedule:
    if isinstance(spec, OffSpec):
        return Off(spec.loss_fraction)
    problems = []
    if spec.magnitude_ms > caps.max_magnitude_ms:
        problems.append(Problem(f"{spec.magnitude_ms} ms is above the cap of "
                                f"{caps.max_magnitude_ms} ms", field=f"{where}.magnitude_ms"))
    start = now_s if spec.start is None else spec.start
    if isinstance(spec, ConstantSpec):
        duration = caps.max_duration_s if spec.duration_s is None else spec.duration_s
        schedule: Schedule = Constant(spec.magnitude_ms / 1e3, start, duration, spec.loss_fraction)
    else:
        duration = spec.period_s * spec.cycles
        schedule = Square(spec.magnitude_ms / 1e3, start, spec.period_s, spec.cycles,
                          spec.loss_fraction)
    if duration > caps.max_duration_s:
        problems.append(Problem(f"{duration:g} s is above the duration cap of "
                                f"{caps.max_duration_s:g} s", field=f"{where}.duration"))
    if problems:
        raise InputError(problems)
    return schedule

"""Schedules: what the injector does to a link over time (off, constant, square wave).

One tiny interface, a registry by name, units in field names (after Toxiproxy's toxics): an
unknown kind or a misspelt field is an error, never "no delay". Times are unix seconds (the
phase must match the web log's clock); delays are seconds inside, milliseconds at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from linkgrad.errors import InputError, Problem
from linkgrad.protocol.fields import LIMIT_DURATION_S, LIMIT_MAGNITUDE_MS
from linkgrad.protocol.injector import (
    CONSTANT,
    OFF,
    ON,
    ConstantSchedule,
    OffSchedule,
    ScheduleSpec,
)

__all__ = ["CONSTANT", "OFF", "ON", "Caps", "Schedule", "build_schedule"]


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
    """Hard limits every schedule must respect: finite, positive, and within the protocol's
    absolute limits (an infinite or NaN cap would switch the cap off)."""

    max_magnitude_ms: float = 500.0
    max_duration_s: float = 3600.0

    def __post_init__(self) -> None:
        problems = [
            Problem(f"{value!r} is not a cap: give a number above 0 and at most {limit:g} "
                    f"({what})", field=option)
            for option, value, limit, what in (
                ("--max-magnitude-ms", self.max_magnitude_ms, LIMIT_MAGNITUDE_MS,
                 "a longer delay breaks TCP, whatever the experiment"),
                ("--max-duration-s", self.max_duration_s, LIMIT_DURATION_S, "a day"))
            if isinstance(value, bool) or not isinstance(value, int | float)
            or not 0 < value <= limit]  # NaN fails every comparison: refused too
        if problems:
            raise InputError(problems)


def build_schedule(spec: ScheduleSpec, now_s: float, caps: Caps,
                   where: str = "schedule") -> Schedule:
    """The schedule a protocol spec asks for, checked against the caps (all problems)."""
    if isinstance(spec, OffSchedule):
        return Off(spec.loss_fraction)
    problems = []
    if spec.magnitude_ms > caps.max_magnitude_ms:
        problems.append(Problem(f"{spec.magnitude_ms} ms is above the cap of "
                                f"{caps.max_magnitude_ms} ms", field=f"{where}.magnitude_ms"))
    start = now_s if spec.start is None else spec.start
    if isinstance(spec, ConstantSchedule):
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

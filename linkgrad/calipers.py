"""Calipers (Kissel et al. §III.D; NetLogger's nl_calipers): a high-rate series summarised in
memory as it goes, nothing kept per event.

Each event has a value v (bytes moved, a delay, a counter's increase). An event that was timed
(it ran from `start_s` to `end_s`) also has a rate r = v / duration, and a gap g: the time from
the previous timed event's end to its start. Each of the three series keeps count, sum, min,
max, mean and standard deviation, by Welford's one-pass update (exact to rounding, however long
the series). Calipers also keep the wall time from the first timed event's start to the last
one's end, and the time spent inside events (NetLogger's `dur` and `dur.i`): their ratio is how
busy the instrumented resource was. Two calipers merge (Chan et al.'s pairwise update), so
summaries from several threads or intervals add up to the summary of all their events.

The paper's bottleneck test reads mean(r) of each I/O resource: its *instantaneous throughput*,
which counts only the time spent doing the I/O, not waiting for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

__all__ = ["CaliperSummary", "Calipers", "Moments", "SeriesSummary"]


@dataclass
class Moments:
    """Count, sum, min, max, mean and the sum of squared deviations of one series."""

    count: int = 0
    total: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: float) -> None:
        self.count += 1
        self.total += x
        if x < self.low:
            self.low = x
        if x > self.high:
            self.high = x
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)

    def merge(self, other: Moments) -> None:
        """Take in `other`'s events, as if each had been added here."""
        if not other.count:
            return
        if not self.count:
            self.count, self.total, self.low, self.high, self.mean, self.m2 = (
                other.count, other.total, other.low, other.high, other.mean, other.m2)
            return
        n = self.count + other.count
        delta = other.mean - self.mean
        self.m2 += other.m2 + delta * delta * self.count * other.count / n
        self.mean += delta * other.count / n
        self.count, self.total = n, self.total + other.total
        self.low, self.high = min(self.low, other.low), max(self.high, other.high)

    @property
    def sd(self) -> float:
        """The sample standard deviation (n - 1); 0 of fewer than two events."""
        return math.sqrt(max(self.m2, 0.0) / (self.count - 1)) if self.count > 1 else 0.0

    def summary(self, scale: float = 1.0, digits: int = 9) -> SeriesSummary | None:
        """In the unit `scale` turns it into (1e3: seconds to ms); None when empty."""
        if not self.count:
            return None
        return SeriesSummary(count=self.count, sum=round(self.total * scale, digits),
                             min=round(self.low * scale, digits),
                             max=round(self.high * scale, digits),
                             mean=round(self.mean * scale, digits),
                             sd=round(self.sd * scale, digits))


class SeriesSummary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int
    sum: float
    min: float
    max: float
    mean: float
    sd: float


class CaliperSummary(BaseModel):
    """What calipers hold, as reports carry it: the value series, and for timed events their
    rate and gap series, the wall time they spanned and the time spent inside them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int
    value: SeriesSummary | None
    rate: SeriesSummary | None = None  # per second of the event's own duration
    gap: SeriesSummary | None = None  # s from one timed event's end to the next one's start
    duration_s: float | None = None  # from the first timed event's start to the last's end
    busy_s: float | None = None  # summed durations of the timed events


@dataclass
class Calipers:
    """One series of events, summarised (module docstring)."""

    value: Moments = field(default_factory=Moments)
    rate: Moments = field(default_factory=Moments)
    gap: Moments = field(default_factory=Moments)
    first_s: float = math.inf  # the first timed event's start
    end_s: float = -math.inf  # the latest timed event's end
    busy_s: float = 0.0

    @property
    def count(self) -> int:
        return self.value.count

    def add(self, value: float) -> None:
        """An event with no duration (a delay, a sample of a gauge)."""
        self.value.add(value)

    def time(self, value: float, start_s: float, end_s: float) -> None:
        """An event that ran from `start_s` to `end_s` and moved `value` (bytes, calls...).
        An event of no measurable duration has no rate (it would be infinite)."""
        self.value.add(value)
        duration = end_s - start_s
        if duration > 0:
            self.rate.add(value / duration)
            self.busy_s += duration
        if self.end_s > -math.inf:
            self.gap.add(max(start_s - self.end_s, 0.0))  # overlapping events: no gap
        if start_s < self.first_s:
            self.first_s = start_s
        if end_s > self.end_s:
            self.end_s = end_s

    def merge(self, other: Calipers) -> None:
        """Take in `other`'s events (another thread's, or a later interval's). The gap from
        one's last event to the other's first is not known, so it is not counted."""
        self.value.merge(other.value)
        self.rate.merge(other.rate)
        self.gap.merge(other.gap)
        self.first_s = min(self.first_s, other.first_s)
        self.end_s = max(self.end_s, other.end_s)
        self.busy_s += other.busy_s

    def summary(self, digits: int = 9) -> CaliperSummary:
        timed = self.end_s > -math.inf
        return CaliperSummary(
            count=self.count, value=self.value.summary(digits=digits),
            rate=self.rate.summary(digits=digits), gap=self.gap.summary(digits=digits),
            duration_s=round(self.end_s - self.first_s, digits) if timed else None,
            busy_s=round(self.busy_s, digits) if timed else None)

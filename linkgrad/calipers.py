"""Calipers (Kissel et al. §III.D; NetLogger's nl_calipers): a high-rate series summarised in
memory as it goes: at most a block of events waits, nothing is kept per event.

Each event has a value v (bytes moved, a delay, a counter's increase). An event that was timed
(it ran from `start_s` to `end_s`) also has a rate r = v / duration, and a gap g: the time from
the previous timed event's end to its start. Each of the three series keeps count, sum, min,
max, mean and standard deviation. Events wait in a block of at most BLOCK, summarised at once by
numpy and merged into the series (Chan et al.'s pairwise update, exact to rounding however long
the series): a Python update per event costs three times as much (benchmarks/probe_cost.py),
and the block bounds what is held. Calipers also keep the wall time from the first timed
event's start to the last one's end, and the time spent inside events (NetLogger's `dur` and
`dur.i`): their ratio is how busy the instrumented resource was. Two calipers merge the
same way, so summaries from several threads or intervals add up to the summary of all their events.

The paper's bottleneck test reads mean(r) of each I/O resource: its *instantaneous throughput*,
which counts only the time spent doing the I/O, not waiting for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

__all__ = ["BLOCK", "CaliperSummary", "Calipers", "Moments", "SeriesSummary"]


@dataclass
class Moments:
    """Count, sum, min, max, mean and the sum of squared deviations of one series."""

    count: int = 0
    total: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    mean: float = 0.0
    m2: float = 0.0

    @classmethod
    def of(cls, x: np.ndarray) -> Moments:
        """A block's moments at once (numpy's sums: exact to rounding as Welford's)."""
        if not len(x):
            return cls()
        mean = float(x.mean())
        return cls(count=len(x), total=float(x.sum()), low=float(x.min()), high=float(x.max()),
                   mean=mean, m2=float(((x - mean) ** 2).sum()))

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


BLOCK = 1024  # events that wait to be summarised at once (module docstring)


class Calipers:
    """One series of events, summarised (module docstring). Not thread-safe: reading one
    summarises its pending block, so a writer on another thread and the reader share a lock."""

    __slots__ = ("_busy_s", "_end_s", "_first_s", "_gap", "_rate", "_timed", "_value",
                 "_values")

    def __init__(self) -> None:
        self._value, self._rate, self._gap = Moments(), Moments(), Moments()
        self._first_s = math.inf  # the first timed event's start
        self._end_s = -math.inf  # the latest timed event's end
        self._busy_s = 0.0
        self._values: list[float] = []  # events not yet summarised: at most BLOCK of each
        self._timed: list[tuple[float, float, float]] = []

    def add(self, value: float) -> None:
        """An event with no duration (a delay, a sample of a gauge)."""
        self._values.append(value)
        if len(self._values) >= BLOCK:
            self._flush()

    def time(self, value: float, start_s: float, end_s: float) -> None:
        """An event that ran from `start_s` to `end_s` and moved `value` (bytes, calls...).
        An event of no measurable duration has no rate (it would be infinite); events that
        overlap have no gap (not a negative one)."""
        self._timed.append((value, start_s, end_s))
        if len(self._timed) >= BLOCK:
            self._flush()

    def _flush(self) -> None:
        if self._values:
            self._value.merge(Moments.of(np.asarray(self._values)))
            self._values.clear()
        if not self._timed:
            return
        events = np.asarray(self._timed)
        self._timed.clear()
        value, start, end = events[:, 0], events[:, 1], events[:, 2]
        self._value.merge(Moments.of(value))
        duration = end - start
        timed = duration > 0
        self._rate.merge(Moments.of(value[timed] / duration[timed]))
        self._busy_s += float(duration[timed].sum())
        # each event's gap is from the latest end before it (its predecessors' and the
        # earlier blocks')
        latest = np.maximum.accumulate(np.concatenate(([self._end_s], end)))[:-1]
        known = latest > -math.inf
        self._gap.merge(Moments.of(np.maximum(start[known] - latest[known], 0.0)))
        self._first_s = min(self._first_s, float(start.min()))
        self._end_s = max(self._end_s, float(end.max()))

    @property
    def value(self) -> Moments:
        self._flush()
        return self._value

    @property
    def rate(self) -> Moments:
        self._flush()
        return self._rate

    @property
    def gap(self) -> Moments:
        self._flush()
        return self._gap

    @property
    def count(self) -> int:
        return self.value.count

    def merge(self, other: Calipers) -> None:
        """Take in `other`'s events (another thread's, or a later interval's). The gap from
        one's last event to the other's first is not known, so it is not counted."""
        self._flush()
        other._flush()
        self._value.merge(other._value)
        self._rate.merge(other._rate)
        self._gap.merge(other._gap)
        self._first_s = min(self._first_s, other._first_s)
        self._end_s = max(self._end_s, other._end_s)
        self._busy_s += other._busy_s

    def summary(self, digits: int = 9) -> CaliperSummary:
        self._flush()
        timed = self._end_s > -math.inf
        return CaliperSummary(
            count=self.count, value=self._value.summary(digits=digits),
            rate=self._rate.summary(digits=digits), gap=self._gap.summary(digits=digits),
            duration_s=round(self._end_s - self._first_s, digits) if timed else None,
            busy_s=round(self._busy_s, digits) if timed else None)

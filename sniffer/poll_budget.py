"""SNAP's dynamic polling rate (§7): pure. The operator bounds the profiler's CPU share; the
polling moves inside the bounds, faster for the connections with recent problems.

Two kinds of poll, as SNAP's "reading the TCP table" and "polling TCP statistics": a table read
(one sock_diag dump of every socket) at `table_interval_s`, and exact lookups of chosen
connections at their own, shorter, intervals (the "fast" ones). Each control step compares the
CPU share measured since the last step with the bounds:
- above `cpu_upper_pct`: the table reads slow down (to `table_interval_max_s`); at that, the
  fast connections with the fewest recent problems slow down (back to the table's rate);
- below `cpu_lower_pct`: table reads slowed earlier speed back up toward their base
  interval, and the connections with the most recent problems speed up (to
  `fast_interval_min_s`), always faster than the table.
So on a busy host the table is read slowly and the problem connections fast, as SNAP wants: a
read of ten thousand sockets costs what a thousand lookups do. A fast connection with no
problem within T_history goes back to the table's rate.
SNAP moves one connection a step; here a step moves a tenth of the candidates (at least one),
so ten thousand connections settle in tens of steps, not thousands.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class BudgetSettings:
    """cpu_*_pct: percent of one core, the profiler's own process and its tracer together."""

    cpu_lower_pct: float = 2.0
    cpu_upper_pct: float = 5.0
    table_interval_s: float = 0.5  # SNAP's 500 ms (§3.2)
    table_interval_max_s: float = 30.0
    fast_interval_min_s: float = 0.05  # SNAP's Figure 8 goes down to 50 ms
    history_s: float = 60.0  # T_history: what "recent problems" means
    step: float = 2.0  # how much an interval moves in one control step
    share: float = 0.1  # the fraction of the candidates moved in one step

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{f.name}={value!r} must be positive and finite")
        if self.cpu_lower_pct >= self.cpu_upper_pct:
            raise ValueError(f"cpu_lower_pct={self.cpu_lower_pct} must be below "
                             f"cpu_upper_pct={self.cpu_upper_pct}")
        if not self.fast_interval_min_s <= self.table_interval_s <= self.table_interval_max_s:
            raise ValueError(f"table_interval_s={self.table_interval_s} must be between "
                             f"fast_interval_min_s={self.fast_interval_min_s} and "
                             f"table_interval_max_s={self.table_interval_max_s}")
        if self.step <= 1:
            raise ValueError(f"step={self.step} must exceed 1")
        if self.share > 1:
            raise ValueError(f"share={self.share} must be at most 1")


class PollBudget:
    """The current intervals: the table's, and each fast connection's (keyed by cookie)."""

    def __init__(self, settings: BudgetSettings) -> None:
        self.settings = settings
        self.table_interval_s = settings.table_interval_s
        self.fast: dict[int, float] = {}

    def interval_of(self, connection: int) -> float:
        return self.fast.get(connection, self.table_interval_s)

    def adjust(self, cpu_pct: float, problems: Mapping[int, float]) -> str:
        """One control step; `problems`: each live connection's seconds with a problem within
        T_history (seconds, not intervals: a fast connection has more intervals, and would
        stay fast for it). Returns what it did, for the report."""
        # closed ones go, and those whose problems are older than T_history
        self.fast = {c: i for c, i in self.fast.items() if problems.get(c, 0) > 0}
        s = self.settings
        if cpu_pct > s.cpu_upper_pct:
            return self._slow_down(problems)
        if cpu_pct < s.cpu_lower_pct:
            return self._speed_up(problems)
        return "hold"

    def _slow_down(self, problems: Mapping[int, float]) -> str:
        s = self.settings
        if self.table_interval_s < s.table_interval_max_s:
            self.table_interval_s = min(s.table_interval_max_s, self.table_interval_s * s.step)
            return "slower table"
        if not self.fast:
            return "hold"  # as slow as it may be
        for c in _pick(sorted(self.fast, key=lambda c: problems.get(c, 0)), s.share):
            interval = self.fast[c] * s.step
            if interval >= self.table_interval_s:
                del self.fast[c]
            else:
                self.fast[c] = interval
        return "slower connections"

    def _speed_up(self, problems: Mapping[int, float]) -> str:
        """Table reads slowed earlier toward their base interval (else a table slowed to its
        maximum would stay there until every problem connection is at its fastest: minutes),
        and the connections with the most recent problems faster than the table."""
        s, done = self.settings, []
        if self.table_interval_s > s.table_interval_s:
            self.table_interval_s = max(s.table_interval_s, self.table_interval_s / s.step)
            self.fast = {c: i for c, i in self.fast.items() if i < self.table_interval_s}
            done.append("faster table")
        candidates = [c for c, n in problems.items()
                      if n > 0 and self.interval_of(c) > s.fast_interval_min_s]
        if candidates:
            candidates.sort(key=lambda c: problems[c], reverse=True)
            for c in _pick(candidates, s.share):
                self.fast[c] = max(s.fast_interval_min_s, self.interval_of(c) / s.step)
            done.append("faster connections")
        return " and ".join(done) or "hold"


def _pick(ordered: list[int], share: float) -> list[int]:
    return ordered[:max(1, math.ceil(share * len(ordered)))]

"""The delay off and on in turn for `predict --validate`: off, on, off, ..., off (2·cycles + 1
sub-windows of equal length), and which requests count for which side. Pure functions.

Measuring the current latencies for a while and then the new ones for a while compares two
stretches of time: a machine whose load drifts, or a minute of somebody else's work on it, moves
one side only (seen on the testbed: a 15 s episode lifted the measured side by 3 ms and two
transactions fell outside their intervals together). In turn, and with an off sub-window at
each end, a linear drift weighs both sides alike and an episode lands in a few sub-windows,
where the batch means see it and widen the standard error instead of biasing the mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linkgrad.square_wave import SquareWave

__all__ = ["Alternation"]

OFF, ON, NEITHER = 0, 1, -1


@dataclass(frozen=True)
class Alternation:
    start_s: float  # unix s: the first off sub-window begins
    half_s: float  # each sub-window's length
    cycles: int  # on sub-windows (off ones: one more)
    guard_s: float  # after each edge (queues settle) and before it (requests finish)

    @classmethod
    def for_window(cls, start_s: float, window_s: float, cycles: int,
                   guard_s: float) -> Alternation:
        """Each side measured for `window_s` in all (its guards not counted)."""
        if window_s <= 0 or cycles < 1 or guard_s < 0:
            raise ValueError(f"{window_s=}, {cycles=}, {guard_s=}")
        return cls(start_s, window_s / cycles + 2 * guard_s, cycles, guard_s)

    @property
    def end_s(self) -> float:
        return self.start_s + (2 * self.cycles + 1) * self.half_s

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def usable_s(self) -> float:
        """Of each sub-window, the part measured."""
        return self.half_s - 2 * self.guard_s

    def wave(self, magnitude_ms: float) -> SquareWave:
        """The injector's square wave (on first), starting after the first off sub-window."""
        return SquareWave(self.start_s + self.half_s, 2 * self.half_s, self.cycles,
                          magnitude_ms / 1e3)

    def sides(self, start_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For requests that started at `start_s`: OFF, ON or NEITHER (outside, or within a
        guard of an edge), and the time each side has been measured when it started (its
        sub-windows laid end to end, so equal-time batches span all of them)."""
        t = np.asarray(start_s, dtype=float) - self.start_s
        k = np.floor(t / self.half_s)
        within = t - k * self.half_s
        usable = (t >= 0) & (t < self.duration_s) & (within >= self.guard_s) \
            & (within < self.half_s - self.guard_s)
        side = np.where(usable, (k % 2).astype(int), NEITHER)
        measured = (k // 2) * self.usable_s + (within - self.guard_s)
        return side, np.where(usable, measured, np.nan)

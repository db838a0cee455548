"""The square-wave delay schedule as the estimator sees it: 50% duty, on-phase first."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SquareWave"]


@dataclass(frozen=True)
class SquareWave:
    """`cycles` periods of `period_s`, starting with the rising edge at `start_s`.

    During the first half of each period every packet of the link is delayed by
    `magnitude_s` (the mean delay actually injected); during the second half nothing is.
    """

    start_s: float
    period_s: float
    cycles: int
    magnitude_s: float

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError(f"{self.period_s=} must be positive")
        if self.cycles < 1:
            raise ValueError(f"{self.cycles=} must be at least 1")
        if not self.magnitude_s > 0:
            raise ValueError(f"{self.magnitude_s=} must be positive")

    @property
    def half_s(self) -> float:
        return self.period_s / 2

    @property
    def duration_s(self) -> float:
        return self.cycles * self.period_s

    @property
    def end_s(self) -> float:
        """When the last off-phase ends."""
        return self.start_s + self.cycles * self.period_s

    @property
    def frequency_hz(self) -> float:
        return 1.0 / self.period_s

    def is_on(self, t_s: np.ndarray) -> np.ndarray:
        """True where the delay is applied at time `t_s`."""
        phase = np.asarray(t_s, dtype=float) - self.start_s
        inside = (phase >= 0) & (phase < self.cycles * self.period_s)
        return inside & (np.mod(phase, self.period_s) < self.half_s)

    def delay_s(self, t_s: np.ndarray) -> np.ndarray:
        """The delay a packet crossing at `t_s` receives."""
        return np.where(self.is_on(t_s), self.magnitude_s, 0.0)

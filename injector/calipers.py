"""Summary statistics of the delay actually applied ("calipers", Kissel et al.): no per-packet
records, constant memory, mergeable."""

from __future__ import annotations

import math
from dataclasses import dataclass

from linkgrad.protocol import injector as protocol


@dataclass
class Calipers:
    """Count, min, max, mean and standard deviation by Welford's update."""

    count: int = 0
    min_s: float = math.inf
    max_s: float = -math.inf
    mean_s: float = 0.0
    _m2: float = 0.0

    def add(self, x_s: float) -> None:
        self.count += 1
        if x_s < self.min_s:
            self.min_s = x_s
        if x_s > self.max_s:
            self.max_s = x_s
        delta = x_s - self.mean_s
        self.mean_s += delta / self.count
        self._m2 += delta * (x_s - self.mean_s)

    @property
    def std_s(self) -> float:
        return math.sqrt(self._m2 / (self.count - 1)) if self.count > 1 else 0.0

    def summary(self) -> protocol.Calipers:
        """In milliseconds, the unit people read; empty calipers give nulls."""
        if not self.count:
            return protocol.Calipers()
        return protocol.Calipers(count=self.count, min_ms=round(self.min_s * 1e3, 6),
                                 max_ms=round(self.max_s * 1e3, 6),
                                 mean_ms=round(self.mean_s * 1e3, 6),
                                 std_ms=round(self.std_s * 1e3, 6))

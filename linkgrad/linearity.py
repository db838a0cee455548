"""Is a transaction's gradient the same at a small delay as at a large one?

A link gradient is a derivative; the thesis measures it with delays small enough that the
response is linear (ch. 6 names where it is not: timeouts, windows, queues near saturation).
When one link was measured at several delays (`magnitudes_ms`, or an adaptive cycle at another
delay), the change of the gradient with the delay is part of the result: a weighted straight
line through (delay, gradient) with each point's own standard error, its slope per ms and the
gradient's change from the smallest delay to the largest, each with a 95% interval.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict

from linkgrad.spectral.result import GradientResult

__all__ = ["MIN_HALF_WIDTH", "MIN_SPAN", "Z95", "DelayPoint", "Linearity", "LinearityRecord",
           "PointRecord", "fit", "linearity"]

Z95 = 1.96
MIN_SPAN = 1.5  # delays closer than this ratio say nothing about linearity
# Half-widths are weighted as at least this: gradients.json keeps 4 decimals, so a real one is
# 0 or 5e-5 and more, and a weight (1.96/1e-300)² would be infinite
MIN_HALF_WIDTH = 1e-9


@dataclass(frozen=True)
class DelayPoint:
    delay_ms: float  # the delay the injector actually applied (mean)
    gradient: float
    half_width: float  # of its 95% interval
    source: str  # "measurement" or "adaptive"


class PointRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    delay_ms: float
    gradient: float
    half_width: float
    source: str


class LinearityRecord(BaseModel):
    """A `Linearity` as `gradients.json` keeps it (under "linearity")."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    link: str
    transaction: str
    points: list[PointRecord]
    change_per_ms: float
    change_per_ms_ci95: tuple[float, float]
    difference: float
    difference_ci95: tuple[float, float]
    relative_difference: float | None
    linear: bool


@dataclass(frozen=True)
class Linearity:
    link: str
    transaction: str
    points: tuple[DelayPoint, ...]  # by delay
    change_per_ms: float  # slope of the gradient over the delay
    change_per_ms_half_width: float
    difference: float  # the fitted gradient at the largest delay minus at the smallest
    difference_half_width: float

    @property
    def linear(self) -> bool:
        """The change is within its 95% interval of none."""
        return abs(self.change_per_ms) <= self.change_per_ms_half_width

    @property
    def relative_difference(self) -> float | None:
        small = self.points[0].gradient
        return self.difference / abs(small) if abs(small) > 1e-9 else None

    def record(self) -> LinearityRecord:
        """As `gradients.json` keeps it, rounded."""
        rel = self.relative_difference
        lo, hi = (self.change_per_ms - self.change_per_ms_half_width,
                  self.change_per_ms + self.change_per_ms_half_width)
        return LinearityRecord(
            link=self.link, transaction=self.transaction,
            points=[PointRecord(delay_ms=round(p.delay_ms, 4), gradient=round(p.gradient, 4),
                                half_width=round(p.half_width, 4), source=p.source)
                    for p in self.points],
            change_per_ms=round(self.change_per_ms, 5),
            change_per_ms_ci95=(round(lo, 5), round(hi, 5)),
            difference=round(self.difference, 4),
            difference_ci95=(round(self.difference - self.difference_half_width, 4),
                             round(self.difference + self.difference_half_width, 4)),
            relative_difference=None if rel is None else round(rel, 4),
            linear=self.linear)

    def describe(self) -> str:
        points = ", ".join(f"{p.gradient:.3g} ± {p.half_width:.2g} at {p.delay_ms:.2f} ms"
                           + (" (adaptive)" if p.source == "adaptive" else "")
                           for p in self.points)
        rel = self.relative_difference
        change = (f"{self.difference:+.3g} ± {self.difference_half_width:.2g}"
                  + (f" ({rel:+.0%})" if rel is not None else ""))
        verdict = "linear within the intervals" if self.linear else "NOT linear"
        return (f"{self.transaction} on {self.link}: {points}; from the smallest delay to the "
                f"largest {change}: {verdict}")


def fit(link: str, transaction: str, points: Iterable[DelayPoint]) -> Linearity | None:
    """The weighted least-squares line gradient = a + b·delay (weights 1/se², the points'
    errors taken as known), or None unless the delays span MIN_SPAN× and every point has a
    positive interval."""
    pts = tuple(sorted(points, key=lambda p: p.delay_ms))
    if len(pts) < 2 or pts[-1].delay_ms < MIN_SPAN * pts[0].delay_ms:
        return None
    if any(not p.half_width > 0 for p in pts):
        return None
    d = np.array([p.delay_ms for p in pts])
    g = np.array([p.gradient for p in pts])
    w = (Z95 / np.maximum([p.half_width for p in pts], MIN_HALF_WIDTH)) ** 2
    d_bar = float(np.sum(w * d) / np.sum(w))
    sxx = float(np.sum(w * (d - d_bar) ** 2))
    slope = float(np.sum(w * (d - d_bar) * g) / sxx)
    slope_se = float(np.sqrt(1.0 / sxx))
    span = float(d[-1] - d[0])
    return Linearity(link=link, transaction=transaction, points=pts, change_per_ms=slope,
                     change_per_ms_half_width=Z95 * slope_se, difference=slope * span,
                     difference_half_width=Z95 * slope_se * span)


def linearity(measurements: Iterable[tuple[str, float, str, Mapping[str, GradientResult]]]
              ) -> list[Linearity]:
    """Per link and transaction measured at delays spanning MIN_SPAN× or more: the fit.
    `measurements`: (link label, delay applied in ms, "measurement"|"adaptive", each
    transaction's result)."""
    by_cell: dict[tuple[str, str], list[DelayPoint]] = {}
    for label, delay_ms, source, transactions in measurements:
        for name, t in transactions.items():
            if t.gradient is None or t.half_width is None:
                continue
            by_cell.setdefault((label, name), []).append(
                DelayPoint(delay_ms, t.gradient, t.half_width, source))
    out = [fit(link, name, pts) for (link, name), pts in sorted(by_cell.items())]
    return [x for x in out if x is not None]

"""How far the passive gradient is from the measured one, measured, never assumed: fitted on
(transaction, link) pairs where both were measured, and applied to make the passive gradient
an estimate with an honest interval (a prior for the measurement, or a gradient of its own
where the link was not injected).

The passive gradient counts messages; the gradient also sees what the messages do not show
(TCP's extra round trips, a mislinked path, the delay's second-order effects). Each pair gives
a residual d = (gradient − passive) / s on the scale s = max(|passive|, 1 crossing) (a
miscount grows with the messages; near 0 it is absolute). Their mean is the bias, and the
spread beyond what the two sides' own standard errors explain is the random-effects variance
τ² of DerSimonian and Laird (1986), so a calibrated passive gradient is passive + bias·s with
a standard error sqrt(se² + (τ² + se_bias²)·s²).

Applications differ (one's replies exceed a window, another's paths are linked cleanly), so
the points are grouped by application and fitted at two levels: within each application as
above, and between applications over their biases (the same random-effects estimate, each
bias with its own standard error). For an application with enough points of its own (the
user's runs of it) its own fit serves; for any other, the mean bias of the applications, and a
spread of both levels: within an application and between them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from linkgrad.explain.passive import PassiveGradient

__all__ = ["MIN_POINTS", "SCALE_FLOOR", "Z95", "Calibrated", "Calibration", "CalibrationPoint",
           "calibrate", "combine", "fit_calibration"]

Z95 = 1.959964
SCALE_FLOOR = 1.0  # crossings: below it a residual is read as absolute
MIN_POINTS = 5  # fewer say nothing of a spread


@dataclass(frozen=True)
class CalibrationPoint:
    """One (transaction, link) where both halves measured."""

    passive: float
    passive_se: float
    gradient: float
    gradient_se: float
    source: str  # "run transaction pair", for the record
    group: str = ""  # the application it was measured on

    @property
    def scale(self) -> float:
        return max(abs(self.passive), SCALE_FLOOR)


@dataclass(frozen=True)
class Calibration:
    bias: float  # relative (on the scale): the gradient is passive + bias·s on average
    bias_se: float
    spread: float  # τ: the relative sd of the gradient about the calibrated passive
    points: int
    described: str  # where the points came from

    def describe(self) -> str:
        return (f"{self.described}: bias {self.bias:+.1%} ± {Z95 * self.bias_se:.1%}, "
                f"spread {self.spread:.1%}")


@dataclass(frozen=True)
class Calibrated:
    estimate: float
    se: float
    ci95: tuple[float, float]


def fit_calibration(points: Sequence[CalibrationPoint], described: str,
                    own: str | None = None) -> Calibration | None:
    """The calibration for application `own` (its own points when it has MIN_POINTS, else
    every application's, both levels); None with fewer than MIN_POINTS in all."""
    groups: dict[str, list[CalibrationPoint]] = {}
    for p in points:
        groups.setdefault(p.group, []).append(p)
    if own is not None and len(groups.get(own, ())) >= MIN_POINTS:
        fit = _random_effects(*_residuals(groups[own]))
        return Calibration(bias=fit[0], bias_se=fit[1], spread=fit[2], points=len(groups[own]),
                           described=f"{described}; its own {len(groups[own])} points")
    fitted = [(_random_effects(*_residuals(g)), len(g)) for g in groups.values()
              if len(g) >= MIN_POINTS]
    if not fitted:
        return None
    if len(fitted) == 1:  # one application: no spread between applications can be read
        (bias, bias_se, spread), n = fitted[0]
        return Calibration(bias=bias, bias_se=bias_se, spread=spread, points=n,
                           described=f"{described}; one application")
    within2 = sum(n * tau ** 2 for (_, _, tau), n in fitted) / sum(n for _, n in fitted)
    bias, bias_se, between = _random_effects([f[0] for f, _ in fitted],
                                             [f[1] ** 2 for f, _ in fitted])
    return Calibration(bias=bias, bias_se=bias_se, spread=math.sqrt(within2 + between ** 2),
                       points=sum(n for _, n in fitted),
                       described=f"{described}; {len(fitted)} applications")


def _residuals(points: Sequence[CalibrationPoint]) -> tuple[list[float], list[float]]:
    d = [(p.gradient - p.passive) / p.scale for p in points]
    # a residual's own variance: both sides' standard errors, on its scale (never 0: a
    # passive gradient and a gradient both exact would weigh infinitely)
    v = [max((p.gradient_se ** 2 + p.passive_se ** 2) / p.scale ** 2, 1e-8) for p in points]
    return d, v


def _random_effects(d: Sequence[float], v: Sequence[float]) -> tuple[float, float, float]:
    """DerSimonian–Laird: the mean of `d` (variances `v`), its standard error, and τ."""
    w = [1 / x for x in v]
    fixed = sum(wi * di for wi, di in zip(w, d, strict=True)) / sum(w)
    q = sum(wi * (di - fixed) ** 2 for wi, di in zip(w, d, strict=True))
    c = sum(w) - sum(wi * wi for wi in w) / sum(w)
    tau2 = max(0.0, (q - (len(d) - 1)) / c) if c > 0 else 0.0
    w_star = [1 / (x + tau2) for x in v]
    mean = sum(wi * di for wi, di in zip(w_star, d, strict=True)) / sum(w_star)
    return mean, math.sqrt(1 / sum(w_star)), math.sqrt(tau2)


def calibrate(p: PassiveGradient, cal: Calibration) -> Calibrated:
    """The passive gradient as an estimate of the gradient: shifted by the bias, its count
    interval widened by the spread and the bias's own uncertainty."""
    s = max(abs(p.estimate), SCALE_FLOOR)
    shift = cal.bias * s
    extra = math.sqrt(cal.spread ** 2 + cal.bias_se ** 2) * s
    lo, hi = p.ci95
    # the count interval's own width (its unseen share included), read as a normal one's
    se = math.hypot(max(p.se, (hi - lo) / (2 * Z95)), extra)
    return Calibrated(estimate=p.estimate + shift, se=se,
                      ci95=(lo + shift - Z95 * extra, hi + shift + Z95 * extra))


def combine(gradient: float, ci95: tuple[float, float], prior: Calibrated
            ) -> Calibrated:
    """The measurement and the calibrated passive gradient in one estimate, each weighted by
    its precision (the measurement's se read off its 95% interval as a normal one's: its t
    quantile's extra width is kept as a little extra caution, not lost)."""
    se_m = max((ci95[1] - ci95[0]) / (2 * Z95), 1e-9)
    se_p = max(prior.se, 1e-9)
    w_m, w_p = 1 / se_m ** 2, 1 / se_p ** 2
    estimate = (w_m * gradient + w_p * prior.estimate) / (w_m + w_p)
    se = math.sqrt(1 / (w_m + w_p))
    return Calibrated(estimate=estimate, se=se, ci95=(estimate - Z95 * se, estimate + Z95 * se))

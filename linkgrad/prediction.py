"""What-if prediction from link gradients (thesis §2.1 eq. 2.1, §5.3): pure functions.

    rt² = rt¹ + Σ_links ∇rt_i · (l²_i − l¹_i)

and, for a link measured at two or more delays (thesis ch. 6), the second-order term
c_i·(l²_i − l¹_i)². The interval carries every uncertainty: the current mean response time's,
the latency measurements' and — unlike the thesis's variance formula in §5.3 — the gradients'
own. For independent g and Δl, var(g·Δl) = g²·var(Δl) + Δl²·var(g) + var(g)·var(Δl).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from linkgrad.linearity import MIN_SPAN

__all__ = [
    "MIN_SE_RATIO",
    "Z95",
    "Curve",
    "Estimate",
    "Prediction",
    "Term",
    "batch_mean",
    "fit_curve",
    "predict",
]

Z95 = 1.959964
# A curve's points' standard errors at most 1e6 apart: weights 1e12 apart keep its least
# squares well within a float's 16 digits (a run's are within 10x of each other)
MIN_SE_RATIO = 1e-6


@dataclass(frozen=True)
class Estimate:
    """A measured quantity: its mean and the standard error of that mean."""

    mean: float
    se: float = 0.0

    @property
    def variance(self) -> float:
        return self.se**2


@dataclass(frozen=True)
class Curve:
    """How a mean response time changes with a link's added latency d (ms):
    gradient·d + curvature·d², the curvature known only when measured at two or more delays."""

    gradient: Estimate
    curvature: Estimate = Estimate(0.0)  # ms per ms²
    covariance: float = 0.0  # of gradient and curvature


def fit_curve(points: list[tuple[float, float, float]]) -> Curve:
    """(delay ms, gradient, its se) of one link at one or more delays -> its curve.

    One delay: the gradient. Several: the effect g·m at each delay m, fitted as
    slope·m + curvature·m² through the origin (no delay, no change) by weighted least squares
    (thesis ch. 6's regression on several magnitudes). A curvature needs delays MIN_SPAN apart
    with standard errors: closer ones say nothing of it (as for `linkgrad.linearity`) and would
    divide by their difference; without, the largest delay's gradient is the curve.
    """
    known = [p for p in points if math.isfinite(p[2])]
    delays = [m for m, _, _ in known]
    if len(known) < 2 or max(delays) < MIN_SPAN * min(delays):
        m, g, se = max(points)  # one delay (repeated: the largest measurement)
        return Curve(Estimate(g, se))
    m = np.array(delays)
    se = m * np.array([p[2] for p in known])  # of each effect
    se = np.maximum(se, max(1e-9, MIN_SE_RATIO * float(se.max())))
    top = float(m.max())  # delays as fractions of it: both columns of order 1
    a = np.column_stack([m / top, (m / top) ** 2]) / se[:, None]
    left, s, vt = np.linalg.svd(a, full_matrices=False)  # full rank: delays apart, se > 0
    beta = vt.T @ ((left.T @ (m * np.array([p[1] for p in known]) / se)) / s)
    scale = np.array([top, top * top])
    beta, cov = beta / scale, (vt.T / s**2) @ vt / np.outer(scale, scale)
    return Curve(Estimate(float(beta[0]), math.sqrt(cov[0, 0])),
                 Estimate(float(beta[1]), math.sqrt(cov[1, 1])), float(cov[0, 1]))


@dataclass(frozen=True)
class Term:
    """One host pair's share of a prediction."""

    pair: tuple[str, str]  # (src host, dst host)
    curve: Curve
    delta_ms: Estimate

    @property
    def gradient(self) -> Estimate:
        return self.curve.gradient

    @property
    def change_ms(self) -> float:
        d = self.delta_ms.mean
        return self.curve.gradient.mean * d + self.curve.curvature.mean * d * d

    @property
    def variance(self) -> float:
        g, c, d = self.curve.gradient, self.curve.curvature, self.delta_ms
        slope = g.mean + 2 * c.mean * d.mean  # d(change)/d(Δl)
        return (d.mean**2 * g.variance + d.mean**4 * c.variance
                + 2 * d.mean**3 * self.curve.covariance
                + slope**2 * d.variance + g.variance * d.variance)


@dataclass(frozen=True)
class Prediction:
    transaction: str
    current_ms: Estimate
    terms: tuple[Term, ...]

    @property
    def predicted_ms(self) -> float:
        return self.current_ms.mean + sum(t.change_ms for t in self.terms)

    @property
    def se_ms(self) -> float:
        return math.sqrt(self.current_ms.variance + sum(t.variance for t in self.terms))

    @property
    def ci95(self) -> tuple[float, float]:
        half = Z95 * self.se_ms
        return self.predicted_ms - half, self.predicted_ms + half


def predict(current_ms: Mapping[str, Estimate],
            gradients: Mapping[str, Mapping[tuple[str, str], Curve]],
            delta_ms: Mapping[tuple[str, str], Estimate]) -> dict[str, Prediction]:
    """Every transaction's new mean response time; a pair without a gradient has none (its
    link carried no traffic), and a pair whose latency does not change adds nothing."""
    out = {}
    for name, now in current_ms.items():
        mine = gradients.get(name, {})
        terms = tuple(Term(pair, mine[pair], d) for pair, d in sorted(delta_ms.items())
                      if pair in mine and (d.mean != 0 or d.se != 0))
        out[name] = Prediction(name, now, terms)
    return out


def batch_mean(t_s: np.ndarray, y: np.ndarray, batches: int = 20) -> Estimate:
    """Mean of `y` and its standard error from equal-time batch means: response times are
    autocorrelated (load, GC, caches), so std/sqrt(n) would claim too much."""
    if len(y) == 0:
        raise ValueError("no requests to take a mean of")
    plain = Estimate(float(np.mean(y)), float(np.std(y, ddof=1) / math.sqrt(len(y)))
                     if len(y) > 1 else math.inf)
    if len(y) < 2 * batches:
        return plain
    edges = np.linspace(t_s.min(), t_s.max() + 1e-9, batches + 1)
    which = np.clip(np.searchsorted(edges, t_s, side="right") - 1, 0, batches - 1)
    counts = np.bincount(which, minlength=batches)
    sums = np.bincount(which, weights=y, minlength=batches)
    full = counts > 0
    if full.sum() < 2:  # every request at one instant: no batches to spread over
        return plain
    means, weights = sums[full] / counts[full], counts[full] / counts[full].sum()
    mean = float(np.sum(weights * means))
    spread = np.sum(weights * (means - mean) ** 2) / (1 - np.sum(weights**2))
    return Estimate(mean, float(math.sqrt(spread * np.sum(weights**2))))

"""How far the passive gradient is from the measured one, measured, never assumed: fitted on
(transaction, link) pairs where both were measured, and applied to make the passive gradient
an estimate with an honest interval (a prior for the measurement, or a gradient of its own
where the link was not injected).

The passive gradient counts messages; the gradient also sees what the messages do not show
(TCP's extra round trips, a mislinked path, the delay's second-order effects). Each pair gives
a residual d = (gradient − passive) / s: relative (s = passive) from half a crossing up, where
a miscount grows with the messages, and absolute (s = 1) below, two families fitted apart and
applied together (bias b_rel·passive + b_abs, variance summed the same way).
Their mean is the bias, and the spread beyond what the two sides' own standard errors explain
is the random-effects variance τ² of DerSimonian and Laird (1986), so a calibrated passive
gradient is passive + bias·s with a standard error sqrt(se² + (τ² + se_bias²)·s²) per family.

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

# scipy is imported in the functions that use it: a command's --help need not load it

__all__ = ["MIN_POINTS", "SCALE_FLOOR", "Z95", "Calibrated", "Calibration", "CalibrationPoint",
           "Fit", "calibrate", "combine", "fit_calibration", "measured_se"]

Z95 = 1.959964
SCALE_FLOOR = 0.5  # crossings: a point below it is fitted in absolute terms
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
    run: str = ""  # the run: its rows share cycles and load, so they are not independent

    @property
    def scale(self) -> float:
        """Its residual's: the count itself from a crossing up, else 1 (absolute)."""
        return abs(self.passive) if abs(self.passive) >= SCALE_FLOOR else 1.0

    @property
    def relative(self) -> bool:
        return abs(self.passive) >= SCALE_FLOOR


@dataclass(frozen=True)
class Fit:
    """One family of residuals fitted: their mean, its standard error, and τ."""

    bias: float
    bias_se: float
    spread: float
    points: int


@dataclass(frozen=True)
class Calibration:
    """Two families: a count of a crossing or more errs in proportion (a miscount grows with
    the messages), one below it errs in absolute crossings (a link the paths say nothing
    crosses still has the measurement's own second-order effects)."""

    relative: Fit | None  # residuals / crossings, fitted where crossings ≥ SCALE_FLOOR
    absolute: Fit | None  # residuals in crossings, fitted below it
    described: str  # where the points came from

    @property
    def points(self) -> int:
        return sum(f.points for f in (self.relative, self.absolute) if f is not None)

    def describe(self) -> str:
        parts = []
        if self.relative is not None:
            r = self.relative
            parts.append(f"bias {r.bias:+.1%} ± {Z95 * r.bias_se:.1%}, spread {r.spread:.1%}")
        if self.absolute is not None:
            a = self.absolute
            parts.append(f"and {a.bias:+.3f} ± {Z95 * a.bias_se:.3f} crossings, spread "
                         f"{a.spread:.3f}")
        return f"{self.described}: {'; '.join(parts)}"

    def error(self, crossings: float) -> tuple[float, float]:
        """The bias and the sd of the gradient about a count: both families at once, the
        relative one in proportion to the count and the absolute one beside it, so a count
        of 0.99 and one of 1.01 are calibrated alike."""
        shift, var = 0.0, 0.0
        for fit, scale in ((self.relative, abs(crossings)), (self.absolute, 1.0)):
            if fit is not None:
                shift += fit.bias * scale
                var += (fit.spread ** 2 + fit.bias_se ** 2) * scale ** 2
        return shift, math.sqrt(var)


@dataclass(frozen=True)
class Calibrated:
    estimate: float
    se: float
    ci95: tuple[float, float]


def fit_calibration(points: Sequence[CalibrationPoint], described: str,
                    own: str | None = None) -> Calibration | None:
    """The calibration for application `own` (its own points in a family when it has
    MIN_POINTS there, else every application's, both levels); None with too few points."""
    relative = _fit_family([p for p in points if p.relative], own)
    absolute = _fit_family([p for p in points if not p.relative], own)
    if relative is None and absolute is None:
        return None
    said = [f"{what} from {x[1]}" for what, x in (("relative", relative),
                                                  ("absolute", absolute)) if x is not None]
    return Calibration(relative=relative[0] if relative else None,
                       absolute=absolute[0] if absolute else None,
                       described=f"{described} ({', '.join(said)})")


def _fit_family(points: Sequence[CalibrationPoint], own: str | None
                ) -> tuple[Fit, str] | None:
    groups: dict[str, list[CalibrationPoint]] = {}
    for p in points:
        groups.setdefault(p.group, []).append(p)
    if own is not None and len(groups.get(own, ())) >= MIN_POINTS:
        n = len(groups[own])
        return Fit(*_within(groups[own]), points=n), "its own points"
    fitted = [(_within(g), len(g)) for g in groups.values() if len(g) >= MIN_POINTS]
    if not fitted:
        return None
    if len(fitted) == 1:  # one application: the spread between applications is not known
        (bias, bias_se, spread), n = fitted[0]
        return Fit(bias, bias_se, spread, n), "one application (none to compare it with)"
    # each application's spread alike, however many points it gave
    within2 = sum(tau ** 2 for (_, _, tau), _ in fitted) / len(fitted)
    biases, variances = [f[0] for f, _ in fitted], [f[1] ** 2 for f, _ in fitted]
    bias, _, between = _random_effects(biases, variances)
    return (Fit(bias, _hartung_knapp(biases, variances, between ** 2),
                math.sqrt(within2 + between ** 2), sum(n for _, n in fitted)),
            f"{len(fitted)} applications")


def _within(points: Sequence[CalibrationPoint]) -> tuple[float, float, float]:
    """One application: DerSimonian–Laird over its points, the bias's standard error the
    larger of the model's and the one robust to the rows of a run moving together."""
    d, v = _residuals(points)
    bias, bias_se, tau = _random_effects(d, v)
    runs: dict[str, float] = {}
    total = 0.0
    for p, di, vi in zip(points, d, v, strict=True):
        w = 1 / (vi + tau ** 2)
        runs[p.run] = runs.get(p.run, 0.0) + w * (di - bias)
        total += w
    if len(runs) > 1:  # a sandwich over runs, with its small-sample factor
        clustered = math.sqrt(len(runs) / (len(runs) - 1) * sum(x * x for x in runs.values()))
        bias_se = max(bias_se, clustered / total)
    return bias, bias_se, tau


def _hartung_knapp(d: Sequence[float], v: Sequence[float], tau2: float) -> float:
    """The mean's standard error over few studies (Hartung and Knapp 2001): the weighted
    spread of the means about it, scaled by Student's t with k − 1 degrees of freedom to a
    normal quantile's terms (two applications give a very wide bias: what two can say)."""
    from scipy import stats
    w = [1 / (x + tau2) for x in v]
    mean = sum(wi * di for wi, di in zip(w, d, strict=True)) / sum(w)
    k = len(d)
    q = sum(wi * (di - mean) ** 2 for wi, di in zip(w, d, strict=True)) / ((k - 1) * sum(w))
    se = max(math.sqrt(q), math.sqrt(1 / sum(w)))
    return se * float(stats.t.ppf(0.975, k - 1)) / Z95


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
    shift, extra = cal.error(p.estimate)
    lo, hi = p.ci95
    # the count's interval (asymmetric where unplaced requests may cross more) widened on
    # both sides; one se read off it, for `combine`, so interval and se never disagree
    lo, hi = lo + shift - Z95 * extra, hi + shift + Z95 * extra
    return Calibrated(estimate=p.estimate + shift, se=(hi - lo) / (2 * Z95), ci95=(lo, hi))


def measured_se(ci95: tuple[float, float], dof: int | None) -> float:
    """A measurement's standard error from its 95% interval: Student's t with its degrees of
    freedom where known (a normal quantile would make the se a third too large at 5)."""
    from scipy import stats
    q = float(stats.t.ppf(0.975, dof)) if dof else Z95
    return (ci95[1] - ci95[0]) / (2 * q)


def combine(gradient: float, ci95: tuple[float, float], prior: Calibrated,
            dof: int | None = None) -> Calibrated:
    """The measurement and the calibrated passive gradient in one estimate, each weighted by
    its precision. Only where the verdict is agree: a pre-test, whose effect on the
    interval's coverage is measured (benchmarks/coverage.py), not assumed away."""
    se_m = max(measured_se(ci95, dof), 1e-9)
    se_p = max(prior.se, 1e-9)
    w_m, w_p = 1 / se_m ** 2, 1 / se_p ** 2
    estimate = (w_m * gradient + w_p * prior.estimate) / (w_m + w_p)
    se = math.sqrt(1 / (w_m + w_p))
    return Calibrated(estimate=estimate, se=se, ci95=(estimate - Z95 * se, estimate + Z95 * se))

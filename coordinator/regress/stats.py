"""The tests a night's comparison makes: two estimates with their intervals (Welch), two
proportions, and Holm's step-down correction over a night's many tests, so that `alpha` is
the chance of any false alarm among them (a nightly job runs every night: per-test alpha would
cry wolf once a week)."""

from __future__ import annotations

import math
from collections.abc import Sequence

# scipy is imported in the functions that use it: a command's --help need not load it

Z_95 = 1.959963984540054


def se_from_ci95(ci95: tuple[float, float], dof: float | None) -> float:
    """The standard error a symmetric 95% interval stands for (Student's t at `dof`, normal
    without one)."""
    from scipy import stats
    quantile = Z_95 if dof is None or not math.isfinite(dof) else float(stats.t.ppf(0.975, dof))
    return (ci95[1] - ci95[0]) / 2 / quantile


def welch_p(a: float, se_a: float, dof_a: float | None, b: float, se_b: float,
            dof_b: float | None) -> float:
    """Two-sided p-value that two independent estimates have the same mean: Welch's t with
    the Welch–Satterthwaite degrees of freedom, normal where either has none."""
    from scipy import stats
    se = math.hypot(se_a, se_b)
    if se == 0:
        return 1.0 if a == b else 0.0
    t = (b - a) / se
    dof = _welch_dof(se_a, dof_a, se_b, dof_b)
    if dof is None:
        return float(2 * stats.norm.sf(abs(t)))
    return float(2 * stats.t.sf(abs(t), dof))


def _welch_dof(se_a: float, dof_a: float | None, se_b: float, dof_b: float | None
               ) -> float | None:
    if dof_a is None or dof_b is None or dof_a <= 0 or dof_b <= 0:
        return None
    va, vb = se_a**2, se_b**2
    denominator = va**2 / dof_a + vb**2 / dof_b
    return (va + vb) ** 2 / denominator if denominator > 0 else None


def drop_p(k_before: int, n_before: int, k_now: int, n_now: int) -> float:
    """One-sided p-value that a proportion fell from k_before/n_before to k_now/n_now (the
    pooled two-proportion z-test)."""
    from scipy import stats
    if n_before <= 0 or n_now <= 0:
        return 1.0
    pooled = (k_before + k_now) / (n_before + n_now)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_before + 1 / n_now))
    diff = k_before / n_before - k_now / n_now
    if se == 0:
        return 0.0 if diff > 0 else 1.0
    return float(stats.norm.sf(diff / se))


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Which hypotheses Holm's step-down procedure rejects at family-wise level `alpha`."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected

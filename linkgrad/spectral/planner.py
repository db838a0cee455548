"""Experiment planning from training data alone: how long, or how large, for a wanted CI.

The estimate's noise is measured, not modelled: our estimator is run on the unperturbed
training requests with sham square waves (nothing was injected, so every sham effect is pure
noise) laid back to back before the injection would start. Their standard errors give the
noise of the effect for that period and number of cycles; the effect of a delay A on a gradient
g is g·A, so a CI half-width h (gradient units) needs A = t·SE/h, and at a fixed A the number
of cycles grows as (t·SE/(A·h))² (SE falls as 1/sqrt(duration)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from linkgrad.spectral.lockin import LockinSettings, lockin_gradient
from linkgrad.square_wave import SquareWave

# scipy is imported in the functions that use it: a command's --help need not load it

__all__ = ["NoiseProbe", "probe_noise"]


@dataclass(frozen=True)
class NoiseProbe:
    """Noise of the lockin effect (seconds) for a schedule, measured on sham injections."""

    period_s: float
    cycles: int
    se_s: float  # root mean square of the shams' standard errors, scaled to `cycles`
    empirical_s: float  # root mean square of the sham effects themselves (should be similar)
    shams: int
    dof: int

    def t_quantile(self, confidence: float = 0.95) -> float:
        from scipy import stats
        return float(stats.t.ppf(0.5 + confidence / 2, self.dof))

    def half_width(self, magnitude_s: float, confidence: float = 0.95) -> float:
        """CI half-width in gradient units at this delay."""
        return self.t_quantile(confidence) * self.se_s / magnitude_s

    def magnitude_for(self, half_width: float, confidence: float = 0.95) -> float:
        """Delay (s) that gives `half_width` with this schedule."""
        return self.t_quantile(confidence) * self.se_s / half_width

    def cycles_for(self, half_width: float, magnitude_s: float, confidence: float = 0.95) -> int:
        """Cycles of this period that give `half_width` at `magnitude_s`."""
        ratio = self.half_width(magnitude_s, confidence) / half_width
        return max(2, math.ceil(self.cycles * ratio**2))


def probe_noise(
    t_s: np.ndarray, response_s: np.ndarray, end_s: float, period_s: float, cycles: int,
    settings: LockinSettings | None = None, max_shams: int = 9,
) -> NoiseProbe:
    """Run the estimator on sham waves over the training data before `end_s`."""
    t = np.asarray(t_s, dtype=float)
    y = np.asarray(response_s, dtype=float)
    available = end_s - t.min() if len(t) else 0.0
    sham_cycles = cycles
    while sham_cycles > 2 and (sham_cycles + 0.5) * period_s > available:
        sham_cycles -= 1
    length = (sham_cycles + 0.5) * period_s
    n_shams = min(max_shams, int(available // length))
    if n_shams < 1:
        raise ValueError(
            f"training data spans {available:.0f} s; a sham of 2 cycles of {period_s:g} s "
            f"needs {2.5 * period_s:.0f} s"
        )
    errors, effects, dofs = [], [], []
    for i in range(n_shams):
        first_edge = end_s - (i + 1) * length + period_s / 2
        sham = SquareWave(first_edge, period_s, sham_cycles, 1.0)
        try:
            est = lockin_gradient(t, y, sham, settings=settings)
        except ValueError:
            continue
        errors.append(est.se_s)
        effects.append(est.effect_s)
        dofs.append(est.dof)
    if not errors:
        raise ValueError("too few training requests to probe the noise")
    scale = math.sqrt(sham_cycles / cycles)  # SE ∝ 1/sqrt(duration)
    return NoiseProbe(
        period_s, cycles,
        se_s=scale * float(np.sqrt(np.mean(np.square(errors)))),
        empirical_s=scale * float(np.sqrt(np.mean(np.square(effects)))),
        shams=len(errors),
        dof=int(min(dofs)),
    )

"""The gradient in the cycles where responses were at their usual level against the cycles
where they were much slower.

Other work on the machine can change an application's gradient, not only its noise:
MediaWiki's web<->db gradients of 42-71 idle rise by 5-25% under a steady disk writer, 10-60%
under a CPU hog and 50-100% under both (benchmarks/RESULTS.md, the truth under steady other
work). One number then averages the states in whatever mix the run happened to see (the
gradient of its mean response), and its interval,
however honest about the noise, says nothing about the other mix a later hour brings. The
response level of each cycle is what every run has to tell the states apart (no host probe
needed): the cycles are split at their median level, the wave fitted in each half, and where
the two gradients differ beyond both intervals the result says so and its interval spans both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linkgrad.spectral.lockin import LockinEstimate, LockinSettings, lockin_gradient
from linkgrad.square_wave import SquareWave

__all__ = ["MIN_CYCLES_PER_SIDE", "MIN_LEVEL_RATIO", "LevelSplit", "cycle_of", "split_by_level"]

MIN_LEVEL_RATIO = 1.5  # busy cycles' median response over quiet ones': below it, one state
MIN_CYCLES_PER_SIDE = 3  # fewer: a side's own fit is too loose to compare


@dataclass(frozen=True)
class LevelSplit:
    """The wave fitted separately in the quiet and the busy cycles."""

    level_ratio: float  # the busy cycles' median response over the quiet cycles'
    quiet: LockinEstimate
    busy: LockinEstimate
    quiet_cycles: int
    busy_cycles: int

    @property
    def differ(self) -> bool:
        """The two gradients differ beyond both intervals (their half-widths combined)."""
        half_q = (self.quiet.ci[1] - self.quiet.ci[0]) / 2
        half_b = (self.busy.ci[1] - self.busy.ci[0]) / 2
        return abs(self.busy.gradient - self.quiet.gradient) > float(np.hypot(half_q, half_b))

    @property
    def span(self) -> tuple[float, float]:
        """An interval covering both sides' intervals."""
        return min(self.quiet.ci[0], self.busy.ci[0]), max(self.quiet.ci[1], self.busy.ci[1])


def cycle_of(t: np.ndarray, wave: SquareWave) -> np.ndarray:
    """Each request's cycle as the lockin counts them (the leading off half goes with the
    first), -1 outside the window."""
    rel = t - (wave.start_s - wave.half_s)
    n_halves = 2 * wave.cycles + 1
    inside = (rel >= 0) & (rel < n_halves * wave.half_s)
    half = np.floor(np.where(inside, rel, 0.0) / wave.half_s).astype(np.int64)
    cycle = np.minimum(np.maximum(half - 1, 0) // 2, wave.cycles - 1)
    return np.where(inside, cycle, -1)


def split_by_level(t: np.ndarray, y: np.ndarray, wave: SquareWave,
                   periodic_hz: tuple[float, ...] = (), settings: LockinSettings | None = None,
                   others: tuple[SquareWave, ...] = ()) -> LevelSplit | None:
    """The quiet and busy cycles' gradients, or None when the levels are alike (within
    MIN_LEVEL_RATIO), too few cycles fall on a side, or a side cannot be fitted."""
    cycle = cycle_of(t, wave)
    cycles = np.unique(cycle[cycle >= 0])
    if len(cycles) < 2 * MIN_CYCLES_PER_SIDE:
        return None
    level = np.array([np.median(y[cycle == c]) for c in cycles])
    busy_cycles = cycles[level > np.median(level)]
    quiet_cycles = cycles[level <= np.median(level)]
    if min(len(busy_cycles), len(quiet_cycles)) < MIN_CYCLES_PER_SIDE:
        return None
    ratio = float(np.median(level[level > np.median(level)])
                  / max(np.median(level[level <= np.median(level)]), 1e-9))
    if ratio < MIN_LEVEL_RATIO:
        return None
    fits = []
    for side in (quiet_cycles, busy_cycles):
        keep = (cycle < 0) | np.isin(cycle, side)
        try:
            fit = lockin_gradient(t[keep], y[keep], wave, periodic_hz, settings, others)
        except ValueError:  # too few requests on a side to fit even the plainest model
            return None
        if not np.all(np.isfinite([fit.gradient, *fit.ci])):
            return None
        fits.append(fit)
    return LevelSplit(ratio, fits[0], fits[1], len(quiet_cycles), len(busy_cycles))

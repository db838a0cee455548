"""Choosing the square wave for a run from its training requests (thesis §3.2 steps 1-4, and
our planner for the delay a wanted interval needs): pure functions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from coordinator.core.spectral.binning import sampling_interval_s
from coordinator.core.spectral.planner import probe_noise
from coordinator.core.spectral.training import baseline_spectrum, choose_injection


class PlanSettings(Protocol):
    """What the plan reads (an experiment's `parameters` has it): thesis §3.2's knobs."""

    k: int
    n_bins: int
    chunks: int
    scale_d: float
    cycles: int
    period_s: float | None
    magnitude_ms: float | None
    half_width: float
    max_delay_ms: float


@dataclass(frozen=True)
class WavePlan:
    period_s: float
    cycles: int
    magnitude_s: float
    n_bins: int
    notes: tuple[str, ...] = field(default=())

    @property
    def duration_s(self) -> float:
        return self.period_s * self.cycles


def plan_wave(by_transaction: dict[str, tuple[np.ndarray, np.ndarray]], end_s: float,
              params: PlanSettings) -> WavePlan:
    """`by_transaction`: training (start times, response times) per transaction."""
    notes: list[str] = []
    busiest = max(by_transaction.items(), key=lambda kv: len(kv[1][0]))
    t, y = busiest[1]
    if len(t) < 4 * params.k:
        raise ValueError(f"training saw {len(t)} requests of {busiest[0]!r}: too few to plan")
    bin_s = sampling_interval_s(t, params.k)
    span = end_s - float(t.min())
    n_bins = params.n_bins
    while n_bins > 8 and 2 * n_bins * bin_s > span:
        n_bins //= 2  # training must hold two chunks of N bins
    period, choice = params.period_s, None
    if period is None:
        try:
            choice = choose_injection(baseline_spectrum(t, y, end_s, bin_s, n_bins, params.chunks),
                                      params.scale_d, (2, max(2, min(16, n_bins // 2 - 1))))
            period = choice.period_s
            notes.append(f"period from training: k_d={choice.k_d} of N={n_bins} bins of "
                         f"{bin_s:.2f} s ({busiest[0]})")
        except ValueError as e:
            period = max(4 * bin_s, 10.0)
            notes.append(f"training too short for the spectrum ({e}); period {period:.1f} s")
    magnitude = _magnitude(by_transaction, end_s, period, params, choice, notes)
    return WavePlan(period, params.cycles, magnitude, n_bins, tuple(notes))


def _magnitude(by_transaction: dict[str, tuple[np.ndarray, np.ndarray]], end_s: float,
               period: float, params: PlanSettings, choice: object, notes: list[str]) -> float:
    if params.magnitude_ms is not None:
        return min(params.magnitude_ms, params.max_delay_ms) / 1e3
    wanted = []
    for t, y in by_transaction.values():
        try:
            wanted.append(probe_noise(t, y, end_s, period, params.cycles)
                          .magnitude_for(params.half_width))
        except ValueError:
            continue
    if wanted:
        magnitude = float(np.median(wanted))
        notes.append(f"delay for a ±{params.half_width:g} interval (median over "
                     f"{len(wanted)} transactions): {magnitude * 1e3:.1f} ms")
    else:
        magnitude = getattr(choice, "magnitude_s", params.max_delay_ms / 1e3)
        notes.append("no sham fitted in the training data: the thesis's d·σ delay")
    capped = min(max(magnitude, 0.001), params.max_delay_ms / 1e3)
    if capped < magnitude:
        notes.append(f"capped at max_delay_ms={params.max_delay_ms:g}")
    return capped

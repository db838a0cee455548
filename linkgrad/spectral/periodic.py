"""Periodic noise (garbage collection, cron jobs) found in the training spectrum (thesis §2.2).

A frequency is periodic noise when its averaged periodogram stands far above its neighbours:
under locally flat noise the mean of M periodograms is S·χ²(2M)/(2M), so a ratio to the local
median beyond the (1 - α/K) quantile of that law (K frequencies tested) is a peak. Each peak is
then located precisely on the whole training series, whose resolution is M times finer.
"""

from __future__ import annotations

import numpy as np

from linkgrad.spectral.binning import bin_series, fill_empty
from linkgrad.spectral.training import BaselineSpectrum

# scipy is imported in the functions that use it: a command's --help need not load it

__all__ = ["periodic_noise_hz", "refine_frequency_hz", "spectral_peaks"]


def spectral_peaks(
    power: np.ndarray, chunks: int, alpha: float = 1e-3, min_k: int = 3, half_width: int = 8
) -> list[int]:
    """Indices k (min_k ≤ k < N/2) whose averaged power is a significant local peak."""
    from scipy import stats
    n_half = len(power) // 2
    candidates = range(min_k, n_half)
    if not candidates:
        return []
    dof = 2 * chunks
    median_ratio = stats.chi2.median(dof) / dof
    threshold = stats.chi2.ppf(1 - alpha / len(candidates), dof) / dof
    peaks = []
    for k in candidates:
        near = [j for j in range(max(1, k - half_width), min(n_half, k + half_width + 1))
                if abs(j - k) > 1]
        background = np.median(power[near]) / median_ratio
        is_max = power[k] >= power[k - 1] and power[k] >= power[min(k + 1, n_half - 1)]
        if is_max and power[k] > threshold * background:
            peaks.append(k)
    return peaks


def refine_frequency_hz(series: np.ndarray, bin_s: float, guess_hz: float, span_hz: float) -> float:
    """The frequency near `guess_hz` where the series' DFT magnitude is largest."""
    x = series - series.mean()
    t = np.arange(len(x)) * bin_s
    grid = np.linspace(guess_hz - span_hz, guess_hz + span_hz, 81)
    grid = grid[grid > 0]
    # a few grid rows at a time: the whole grid × series matrix of a long series is gigabytes
    rows = max(1, _BLOCK_ELEMENTS // max(len(t), 1))
    magnitude = np.concatenate([np.abs(np.exp(-2j * np.pi * np.outer(grid[i:i + rows], t)) @ x)
                                for i in range(0, len(grid), rows)])
    return float(grid[np.argmax(magnitude)])


_BLOCK_ELEMENTS = 1 << 20  # complex elements per block of refine_frequency_hz: 16 MB


def periodic_noise_hz(
    spectrum: BaselineSpectrum, t_s: np.ndarray, y: np.ndarray, end_s: float, max_terms: int = 2
) -> tuple[float, ...]:
    """The strongest periodic-noise frequencies of the training data, strongest first."""
    peaks = spectral_peaks(spectrum.power, spectrum.chunks)
    peaks = sorted(peaks, key=lambda k: spectrum.power[k], reverse=True)[:max_terms]
    if not peaks:
        return ()
    n_total = spectrum.chunks * spectrum.n_bins
    first = end_s - n_total * spectrum.bin_s
    means, _ = bin_series(t_s, y, first, spectrum.bin_s, n_total)
    series = fill_empty(means)
    resolution = 1.0 / (spectrum.n_bins * spectrum.bin_s)
    return tuple(
        refine_frequency_hz(series, spectrum.bin_s, float(spectrum.frequency_hz(k)), resolution)
        for k in peaks
    )

"""The training phase (thesis §3.2 steps 2–4): baseline spectrum, injection frequency and magnitude.

Units. The series is in seconds of response time; its FFT (eq. 2.3, unnormalised) is in seconds
too. A square wave of magnitude A_d with k_d cycles in N bins has |FFT(f_kd)| = k_d·A_d/sin(π/2n)
with 2n = N/k_d (eq. 2.4). The thesis sets the injected component to d times the natural spread of
that FFT coefficient, d·σ(FFT⁰)(f_kd), so by eq. 2.5 the delay is

    A_d = d · σ(FFT⁰)(f_kd) · sin(π·k_d/N) / k_d          (seconds, like the series)

where σ(FFT⁰) is the spread of the complex coefficient over the M training chunks,
sqrt(mean |X - mean X|²).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linkgrad.spectral.binning import bin_series, fill_empty

__all__ = [
    "BaselineSpectrum",
    "InjectionChoice",
    "baseline_spectrum",
    "choose_injection",
    "injection_magnitude_s",
]


@dataclass(frozen=True)
class BaselineSpectrum:
    """Mean and spread of the FFT of M chunks of N bins of the unperturbed series (step 2)."""

    mean: np.ndarray  # complex, index k = frequency k/(N·bin_s)
    std: np.ndarray  # real, sqrt(mean |X - mean X|²) over chunks
    power: np.ndarray  # real, mean |X|² over chunks (averaged periodogram)
    chunks: int
    n_bins: int
    bin_s: float

    def frequency_hz(self, k: int | np.ndarray) -> float | np.ndarray:
        return np.asarray(k) / (self.n_bins * self.bin_s)


@dataclass(frozen=True)
class InjectionChoice:
    """Step 4: the quietest relative frequency k_d and the delay A_d it needs."""

    k_d: int
    magnitude_s: float
    period_s: float
    magnitude_by_k: dict[int, float]


def baseline_spectrum(
    t_s: np.ndarray, y: np.ndarray, end_s: float, bin_s: float, n_bins: int, chunks: int
) -> BaselineSpectrum:
    """FFT statistics of the `chunks` whole chunks of `n_bins` bins that end at `end_s`.

    Uses the most recent chunks before `end_s` (the training data right before the
    injection); fewer if the log is shorter, at least 2 (a spread needs two).
    """
    t_s = np.asarray(t_s, dtype=float)
    chunk_s = n_bins * bin_s
    if not chunk_s > 0:
        raise ValueError(f"bins of {bin_s:g} s: the requests' start times do not spread")
    available = int(np.floor((end_s - t_s.min()) / chunk_s)) if len(t_s) else 0
    used = min(chunks, available)
    if used < 2:
        raise ValueError(
            f"baseline holds {available} chunk(s) of {n_bins} bins × {bin_s:.3g} s; need at least 2"
        )
    ffts = []
    for c in range(used):
        first = end_s - (used - c) * chunk_s
        means, _ = bin_series(t_s, y, first, bin_s, n_bins)
        ffts.append(np.fft.fft(fill_empty(means)))
    spectra = np.array(ffts)
    mean = spectra.mean(axis=0)
    std = np.sqrt(np.mean(np.abs(spectra - mean) ** 2, axis=0))
    power = np.mean(np.abs(spectra) ** 2, axis=0)
    return BaselineSpectrum(mean, std, power, used, n_bins, bin_s)


def injection_magnitude_s(sigma_fft: float, k_d: int, n_bins: int, scale_d: float) -> float:
    """A_d = d·σ(FFT⁰)(f_kd)·sin(π·k_d/N)/k_d: the delay whose FFT spike is d·σ (eq. 2.5)."""
    if not 0 < k_d < n_bins / 2:
        raise ValueError(f"{k_d=} must lie in (0, N/2) for {n_bins=}")
    return float(scale_d * sigma_fft * np.sin(np.pi * k_d / n_bins) / k_d)


def choose_injection(
    spectrum: BaselineSpectrum, scale_d: float, k_range: tuple[int, int] = (2, 16)
) -> InjectionChoice:
    """Step 4 restricted as in §4.2: k_d in [2, 16] with the smallest A_d."""
    lo, hi = k_range
    hi = min(hi, spectrum.n_bins // 2 - 1)
    if hi < lo:
        raise ValueError(f"N={spectrum.n_bins} bins leave no relative frequency in [{lo}, {hi}]")
    by_k = {
        k: injection_magnitude_s(float(spectrum.std[k]), k, spectrum.n_bins, scale_d)
        for k in range(lo, hi + 1)
    }
    k_d = min(by_k, key=by_k.__getitem__)
    period = spectrum.n_bins * spectrum.bin_s / k_d
    return InjectionChoice(k_d, by_k[k_d], period, by_k)

"""The thesis's estimate, eq. 2.6, exactly as written: kept as the reference method."""

from __future__ import annotations

import numpy as np

__all__ = ["square_wave_fft_magnitude", "thesis_gradient"]


def square_wave_fft_magnitude(k_d: int, n_bins: int, magnitude: float) -> float:
    """|FFT(f_kd)| of a square wave, k_d cycles in N bins: k_d·A/sin(π/2n) (eq. 2.4)."""
    return float(k_d * magnitude / np.sin(np.pi * k_d / n_bins))


def thesis_gradient(
    series: np.ndarray, k_d: int, magnitude: float, fft0_at_kd: complex = 0j
) -> float:
    """Link gradient by eq. 2.6: |FFT^d(f_kd) - FFT⁰(f_kd)|·sin(π/2n) / (Δl·k_d), 2n = N/k_d.

    `series` is the binned response time during injection (N bins covering k_d whole cycles),
    `fft0_at_kd` the unperturbed coefficient (the training mean, step 2), `magnitude` the delay
    Δl in the series' unit. Unsigned: the modulus discards the phase the injector knows.
    When N is not a multiple of 2·k_d, bins straddle the wave's edges and the result is
    smoothed, as thesis §4.2 discusses; the formula is applied as written all the same.
    """
    n = len(series)
    if not 0 < k_d < n / 2:
        raise ValueError(f"k_d={k_d} cycles need more than {2 * k_d} bins, got N={n}")
    fft_d = np.fft.fft(np.asarray(series, dtype=float))[k_d]
    return float(abs(fft_d - fft0_at_kd) * np.sin(np.pi * k_d / n) / (magnitude * k_d))

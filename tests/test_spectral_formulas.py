"""The thesis's formulas against analytic answers (eq. 2.3–2.6, §3.2 steps 1–4)."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from linkgrad.spectral.binning import (
    MAX_BINS,
    bin_series,
    bins_for_window,
    fill_empty,
    sampling_interval_s,
)
from linkgrad.spectral.thesis import square_wave_fft_magnitude, thesis_gradient
from linkgrad.spectral.training import (
    baseline_spectrum,
    choose_injection,
    injection_magnitude_s,
)


def square(n_bins: int, k_d: int, magnitude: float, shift: int = 0) -> np.ndarray:
    """k_d cycles of an on-then-off square wave in n_bins bins, shifted by `shift` bins."""
    half = n_bins // (2 * k_d)
    return magnitude * (((np.arange(n_bins) + shift) // half) % 2 == 0)


@pytest.mark.parametrize(("n_bins", "k_d"), [(64, 2), (64, 4), (128, 8), (128, 16), (48, 3)])
def test_square_wave_fft_has_the_magnitude_of_eq_2_4(n_bins, k_d):
    x = square(n_bins, k_d, 0.025)
    assert_allclose(abs(np.fft.fft(x)[k_d]), square_wave_fft_magnitude(k_d, n_bins, 0.025),
                    rtol=1e-12)


@pytest.mark.parametrize("shift", [0, 1, 3, 7, 15])
def test_eq_2_6_gives_back_the_gradient_exactly_whatever_the_phase(shift):
    # §2.3: the phase of the wave relative to the bins does not enter eq. 2.6
    base = 0.1 + 0.02 * np.sin(np.arange(128) / 5.0)  # an unperturbed series
    fft0 = np.fft.fft(base)[4]
    perturbed = base + 0.7 * square(128, 4, 0.03, shift)
    assert_allclose(thesis_gradient(perturbed, 4, 0.03, fft0), 0.7, rtol=1e-12)


def test_eq_2_6_is_unsigned():
    # a wave in antiphase (response falls while the delay is on) still reads as +g
    perturbed = -0.5 * square(64, 2, 0.01)
    assert_allclose(thesis_gradient(perturbed, 2, 0.01), 0.5, rtol=1e-12)


def test_eq_2_6_refuses_a_wave_beyond_nyquist():
    with pytest.raises(ValueError, match="need more than 16 bins"):
        thesis_gradient(np.zeros(16), 8, 0.01)


def test_eq_2_6_smooths_when_bins_straddle_edges():
    # 64 bins over 14 cycles: half-periods of 2.29 bins; the modulus of the smoothed wave is low
    fine = square(64 * 14, 14, 0.03)
    straddled = fine.reshape(64, 14).mean(axis=1)
    assert 0.6 < thesis_gradient(straddled, 14, 0.03) < 0.95


def test_magnitude_from_scale_factor_puts_the_spike_at_d_sigma():
    # eq. 2.5 units: the delay A_d = d·σ·sin(πk/N)/k makes |FFT(f_kd)| = d·σ exactly
    sigma, d, k_d, n = 0.8, 30.0, 4, 128
    a_d = injection_magnitude_s(sigma, k_d, n, d)
    assert_allclose(square_wave_fft_magnitude(k_d, n, a_d), d * sigma, rtol=1e-12)
    assert_allclose(a_d, 30 * 0.8 * np.sin(np.pi * 4 / 128) / 4, rtol=1e-12)


def test_sampling_interval_is_mean_plus_three_std_of_k_spans():
    t = np.array([0.0, 1.0, 3.0, 4.0, 6.0, 7.0])  # gaps 1, 2, 1, 2, 1
    spans = np.array([3.0, 3.0, 3.0, 3.0])  # k = 2: t[i+2] - t[i]
    assert sampling_interval_s(t, 2) == pytest.approx(spans.mean() + 3 * spans.std())
    regular = np.arange(100.0) * 0.5
    assert sampling_interval_s(regular, 8) == pytest.approx(4.0)


def test_bins_keep_edges_on_bin_borders():
    assert bins_for_window(160.0, 4, 3.0) == 48  # 6 bins of 3.33 s per half-period
    assert bins_for_window(160.0, 4, 100.0) == 16  # at least two bins per half
    assert bins_for_window(160.0, 4, 3.0) % 8 == 0


def test_bins_are_capped_and_need_a_spread():
    """Requests all at one instant gave ΔTs = 0 and an OverflowError (int of infinity); a
    nanosecond bin would have allocated gigabytes."""
    n = bins_for_window(160.0, 4, 1e-9)
    assert n <= MAX_BINS
    assert n % 8 == 0
    with pytest.raises(ValueError, match="do not spread"):
        bins_for_window(160.0, 4, 0.0)
    with pytest.raises(ValueError, match="do not spread"):
        baseline_spectrum(np.zeros(50), np.ones(50), 1.0, 0.0, 64, 9)


def test_bin_series_means_counts_and_empty_bins():
    means, counts = bin_series(np.array([0.1, 0.2, 2.5, 9.0]), np.array([1.0, 3.0, 5.0, 7.0]),
                               0.0, 1.0, 4)
    assert counts.tolist() == [2, 0, 1, 0]
    assert means[0] == 2.0
    assert means[2] == 5.0
    assert np.isnan(means[1])
    assert fill_empty(means).tolist() == [2.0, 3.5, 5.0, 3.5]


def _noise_series(rng, chunks, n_bins, bin_s, loud_k=None):
    """Requests every bin_s/10 s, white noise; optionally noise at index loud_k whose phase
    wanders from chunk to chunk (a cron job that is not exactly periodic)."""
    t = np.arange(0, chunks * n_bins * bin_s, bin_s / 10)
    y = 0.1 + 0.01 * rng.standard_normal(len(t))
    if loud_k is not None:
        chunk_phase = rng.uniform(0, 2 * np.pi, chunks)[(t // (n_bins * bin_s)).astype(int)]
        y += 0.05 * np.sin(2 * np.pi * loud_k * t / (n_bins * bin_s) + chunk_phase)
    return t, y


def test_baseline_spectrum_spread_matches_white_noise_theory():
    rng = np.random.default_rng(1)
    t, y = _noise_series(rng, 40, 64, 1.0)
    spectrum = baseline_spectrum(t, y, 40 * 64.0, 1.0, 64, 40)
    # bin means of 10 requests: σ_bin = 0.01/sqrt(10); σ(FFT) = σ_bin·sqrt(N)
    expected = 0.01 / np.sqrt(10) * np.sqrt(64)
    assert_allclose(np.median(spectrum.std[1:32]), expected, rtol=0.1)
    assert spectrum.chunks == 40


def test_training_avoids_a_frequency_with_periodic_noise():
    rng = np.random.default_rng(2)
    t, y = _noise_series(rng, 9, 64, 1.0, loud_k=5)
    spectrum = baseline_spectrum(t, y, 9 * 64.0, 1.0, 64, 9)
    choice = choose_injection(spectrum, 30.0)
    assert 2 <= choice.k_d <= 16
    assert choice.k_d != 5
    assert choice.magnitude_by_k[5] > 10 * choice.magnitude_s
    assert choice.period_s == pytest.approx(64.0 / choice.k_d)
    assert choice.magnitude_s == min(choice.magnitude_by_k.values())


def test_baseline_spectrum_needs_two_chunks():
    t = np.arange(0.0, 100.0, 0.1)
    with pytest.raises(ValueError, match="need at least 2"):
        baseline_spectrum(t, np.ones_like(t), 100.0, 1.0, 64, 9)

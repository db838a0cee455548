"""Periodic-noise detection in training data, and the planner's promise against real estimates."""

import numpy as np
import pytest

from linkgrad.spectral.lockin import lockin_gradient
from linkgrad.spectral.periodic import periodic_noise_hz, spectral_peaks
from linkgrad.spectral.planner import probe_noise
from linkgrad.spectral.training import baseline_spectrum
from linkgrad.square_wave import SquareWave


def test_spectral_peaks_find_a_line_and_nothing_in_white_noise():
    rng = np.random.default_rng(5)
    n, chunks = 128, 9
    white = rng.standard_normal((chunks, n))
    power = np.mean(np.abs(np.fft.fft(white, axis=1)) ** 2, axis=0)
    assert spectral_peaks(power, chunks) == []
    lined = white + 0.8 * np.sin(2 * np.pi * 21 * np.arange(n) / n)
    power = np.mean(np.abs(np.fft.fft(lined, axis=1)) ** 2, axis=0)
    assert spectral_peaks(power, chunks) == [21]


def test_periodic_noise_frequency_is_refined_beyond_the_chunk_resolution():
    rng = np.random.default_rng(6)
    t = np.sort(rng.uniform(0, 2000, 40_000))
    true_hz = 1 / 31.0  # between two chunk frequencies
    y = 0.1 + 0.01 * rng.standard_normal(len(t)) + 0.01 * np.sin(2 * np.pi * true_hz * t)
    spectrum = baseline_spectrum(t, y, 2000.0, 1.0, 200, 9)
    found = periodic_noise_hz(spectrum, t, y, 2000.0)
    assert len(found) >= 1
    assert found[0] == pytest.approx(true_hz, abs=1 / 1800 / 4)  # a quarter of the fine grid


def test_planner_predicts_the_half_width_a_measurement_then_gets():
    rng = np.random.default_rng(7)
    rate, sigma = 8.0, 0.04
    training_end, period, cycles = 5000.0, 30.0, 4
    t = np.sort(rng.uniform(0, training_end, int(rate * training_end)))
    y = 0.1 + sigma * rng.standard_normal(len(t))
    probe = probe_noise(t, y, training_end, period, cycles)
    assert probe.shams == 9
    # white noise: on minus off means, n = rate·window requests in each of on and off
    window = cycles * period
    theory = sigma * np.sqrt(2 / (rate * window / 2) * 1.05)  # ~5% lost to edge guards
    assert probe.se_s == pytest.approx(theory, rel=0.2)
    assert probe.empirical_s == pytest.approx(theory, rel=0.5)  # 9 shams: a rough check

    magnitude = probe.magnitude_for(0.2)
    widths = []
    for seed in range(20):
        r = np.random.default_rng(100 + seed)
        wave = SquareWave(training_end, period, cycles, magnitude)
        tm = np.sort(r.uniform(training_end - period, wave.end_s, int(rate * (window + period))))
        ym = 0.1 + sigma * r.standard_normal(len(tm)) + wave.delay_s(tm)
        est = lockin_gradient(tm, ym, wave)
        widths.append((est.ci[1] - est.ci[0]) / 2)
    assert np.median(widths) == pytest.approx(0.2, rel=0.25)
    assert probe.cycles_for(0.1, magnitude) >= 4 * cycles - 1  # half the width: 4× the time


def test_planner_needs_some_training_data():
    t = np.arange(0.0, 50.0, 0.1)
    with pytest.raises(ValueError, match="training data spans"):
        probe_noise(t, np.ones_like(t), 50.0, 30.0, 4)

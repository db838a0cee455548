"""A seeded synthetic web workload with known link gradients, for tests and benchmarks.

Each transaction crosses the measured link a random number of times whose mean is its true
gradient (0.3 = a cache missed 30% of the time, 6 = six sequential calls), at moments spread
over its service time, so requests that straddle an edge of the square wave are delayed only
partly, as on a real system. The noise is what production logs show: long-tailed (lognormal)
service times, rare multi-second spikes, periodic stop-the-world pauses, and slow drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from linkgrad.square_wave import SquareWave


@dataclass(frozen=True)
class TransactionSpec:
    name: str
    gradient: float  # mean number of link crossings on the critical path
    rate_per_s: float = 4.0
    service_median_s: float = 0.08
    service_sigma: float = 0.6  # lognormal shape (0 = constant, 1 = very long tail); for
    # "normal", the standard deviation relative to the mean
    service_kind: str = "lognormal"  # or "normal" (thesis ch. 4: mean 100 ms, sd 30 ms)
    per_crossing_s: float = 0.0  # work of the remote tier per crossing (a cache miss is slower)


@dataclass(frozen=True)
class NoiseSpec:
    """Noise shared by every transaction (it comes from the shared servers)."""

    spike_probability: float = 0.002
    spike_range_s: tuple[float, float] = (1.0, 6.0)
    pause_period_s: float = 0.0  # stop-the-world pauses (0 = none)
    pause_length_s: float = 0.0
    drift_amplitude_s: float = 0.0  # slow drift of every response time, between 0 and this
    drift_period_s: float = 3600.0
    drift_slope_s_per_h: float = 0.0  # a steady rise (never negative: times stay positive)

    @classmethod
    def production(cls) -> NoiseSpec:
        """Everything at once, at levels seen in real logs."""
        return cls(
            spike_probability=0.003,
            pause_period_s=31.0,
            pause_length_s=0.6,
            drift_amplitude_s=0.03,
            drift_period_s=1800.0,
            drift_slope_s_per_h=0.02,
        )


@dataclass(frozen=True)
class Workload:
    transactions: tuple[TransactionSpec, ...]
    noise: NoiseSpec = field(default_factory=NoiseSpec)


@dataclass(frozen=True)
class SyntheticRequests:
    """Generated requests sorted by start time; `transaction` indexes `workload.transactions`."""

    start_s: np.ndarray
    response_s: np.ndarray
    transaction: np.ndarray
    workload: Workload

    def of(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(start_s, response_s) of one transaction."""
        names = [t.name for t in self.workload.transactions]
        mask = self.transaction == names.index(name)
        return self.start_s[mask], self.response_s[mask]

    def urls(self) -> np.ndarray:
        names = np.array([f"/{t.name}" for t in self.workload.transactions], dtype=object)
        return names[self.transaction]


STANDARD_GRADIENTS = (0.0, 0.3, 0.5, 1.0, 2.0, 6.0)


def standard_workload(noise: NoiseSpec | None = None, rate_per_s: float = 4.0) -> Workload:
    """Transactions with gradients 0, 0.3, 0.5, 1, 2 and 6, named after their pattern."""
    names = ("async", "cache_p0.3", "balanced", "single", "sequential2", "sequential6")
    pairs = zip(names, STANDARD_GRADIENTS, strict=True)
    specs = tuple(TransactionSpec(name, g, rate_per_s) for name, g in pairs)
    return Workload(specs, noise or NoiseSpec())


def _service_s(rng: np.random.Generator, spec: TransactionSpec, n: int) -> np.ndarray:
    z = rng.standard_normal(n)
    if spec.service_kind == "normal":
        return np.maximum(spec.service_median_s * (1 + spec.service_sigma * z), 0.001)
    if spec.service_kind == "lognormal":
        return spec.service_median_s * np.exp(spec.service_sigma * z)
    raise ValueError(f"unknown {spec.service_kind=}")


def _crossings(rng: np.random.Generator, gradient: float, n: int) -> np.ndarray:
    """floor(g) crossings always, one more with probability frac(g): mean exactly g."""
    whole = int(np.floor(gradient))
    return whole + (rng.random(n) < gradient - whole).astype(np.int64)


def _link_delay(
    rng: np.random.Generator, start: np.ndarray, service: np.ndarray, crossings: np.ndarray,
    wave: SquareWave | None,
) -> np.ndarray:
    """Delay added to each request: the wave's value at each crossing, summed."""
    delay = np.zeros(len(start))
    if wave is None:
        return delay
    for j in range(int(crossings.max(initial=0))):
        crossing = crossings > j
        # crossing j happens at a random point of the request's service time
        at = start[crossing] + service[crossing] * rng.random(int(crossing.sum()))
        delay[crossing] += wave.delay_s(at)
    return delay


def _shared_noise(
    rng: np.random.Generator, start: np.ndarray, noise: NoiseSpec, phases: tuple[float, float],
    origin_s: float,
) -> np.ndarray:
    """Spikes, pauses and drift; `phases` (pause, drift) are drawn once per run, not per request."""
    pause_phase, drift_phase = phases
    extra = np.zeros(len(start))
    spikes = rng.random(len(start)) < noise.spike_probability
    extra[spikes] += rng.uniform(*noise.spike_range_s, int(spikes.sum()))
    if noise.pause_period_s > 0:
        into_pause = np.mod(start + pause_phase * noise.pause_period_s, noise.pause_period_s)
        paused = into_pause < noise.pause_length_s
        extra[paused] += noise.pause_length_s - into_pause[paused]
    extra += noise.drift_slope_s_per_h * (start - origin_s) / 3600.0
    drift_angle = 2 * np.pi * (start / noise.drift_period_s + drift_phase)
    extra += noise.drift_amplitude_s * (1 + np.sin(drift_angle)) / 2
    return extra


def generate(
    workload: Workload, start_s: float, duration_s: float, wave: SquareWave | None, seed: int,
    noise_seed: int | None = None, origin_s: float | None = None,
) -> SyntheticRequests:
    """Poisson arrivals of every transaction over [start_s, start_s + duration_s).

    Two calls with the same `noise_seed` and `origin_s` continue the same shared noise (pause
    and drift phases, the trend's origin), as one system's log would: training data and
    measurement can then be generated separately without a jump between them.
    """
    noise_rng = np.random.default_rng(seed if noise_seed is None else noise_seed)
    phases = (float(noise_rng.random()), float(noise_rng.random()))
    rng = np.random.default_rng(seed)
    starts, responses, kinds = [], [], []
    for index, spec in enumerate(workload.transactions):
        n = rng.poisson(spec.rate_per_s * duration_s)
        start = np.sort(rng.uniform(start_s, start_s + duration_s, n))
        service = _service_s(rng, spec, n)
        crossings = _crossings(rng, spec.gradient, n)
        service += spec.per_crossing_s * crossings
        response = service + _link_delay(rng, start, service, crossings, wave)
        response += _shared_noise(
            rng, start, workload.noise, phases, start_s if origin_s is None else origin_s)
        starts.append(start)
        responses.append(response)
        kinds.append(np.full(n, index))
    start = np.concatenate(starts)
    order = np.argsort(start, kind="stable")
    return SyntheticRequests(
        start[order], np.concatenate(responses)[order], np.concatenate(kinds)[order], workload
    )

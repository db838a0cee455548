"""Choosing the square wave for a run from its training requests (thesis §3.2 steps 1-4), and
the delay each link is measured at: pure functions.

The period comes from the quietest frequency of the training spectrum (thesis §3.2). The delay
is ours. A gradient g measured with delay A shows as an effect g·A on the response time, and
our estimator's noise on that effect is measured on sham waves laid over the training data
(`probe_noise`): its 95% half-width `noise_s`. The interval on g is then ±noise_s/A. So:

* a wanted precision ±h (gradient units) needs A = noise_s/h;
* a relative one, ±r·g (and ±r below a gradient of 1), needs the *effect* g·A = noise_s/r,
  whatever g is: the delay is that effect divided by the gradient;
* each transaction's effect is kept below its response time's spread in training (thesis
  §4.4: the delay "never exceeds standard deviation of the system response time" —
  intrusiveness comparable with the system's own variance); where that cap binds, the wanted
  precision needs more cycles, and the plan chooses them (or says how many).

The gradient is not known before the link is measured, so each link starts small (`FIRST_DELAY_S`,
never the cap) and the delay grows by `GROWTH` per adaptive cycle until a rough gradient is
known well enough to size the delay by (`next_delay`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from linkgrad.spectral.binning import sampling_interval_s
from linkgrad.spectral.planner import probe_noise
from linkgrad.spectral.training import baseline_spectrum, choose_injection

__all__ = [
    "FIRST_DELAY_S",
    "GROWTH",
    "MIN_CYCLES",
    "MIN_DELAY_S",
    "MIN_EFFECT_CAP_S",
    "MIN_PERIOD_S",
    "PERIOD_PER_RESPONSE",
    "PRECISION_SLACK",
    "DelayChoice",
    "PlanBeyondCap",
    "PlanSettings",
    "Precision",
    "RoughGradient",
    "WavePlan",
    "measuring_delay",
    "next_delay",
    "plan_wave",
    "pooled",
    "precision_shortfall",
    "shortest_period_s",
    "training_needed_s",
]

FIRST_DELAY_S = 0.001  # the adaptive cycle's first delay: small on any application
MIN_DELAY_S = 0.0005  # below this NFQUEUE's own jitter (~0.04 ms) is no longer small
GROWTH = 4.0  # an unresolved rough gradient: the next adaptive cycle's delay is this × larger
TRAIN_CHUNKS, TRAIN_BINS = 4, 16  # automatic training: this many chunks of this many bins
MIN_CYCLES = 6  # automatic cycles: at least this many (the thesis's default)
MIN_PERIOD_S = 4.0  # the square wave's period from the spectrum: at least this
PERIOD_PER_RESPONSE = 20.0  # ... and this many times the slowest transaction's p90 response
MIN_EFFECT_CAP_S = 0.002  # an effect this small is below anyone's notice, whatever the spread


@dataclass(frozen=True)
class Precision:
    """A wanted 95% CI half-width: `value` in gradient units, or, `relative`, a fraction of
    the gradient (of 1 for gradients below 1, so a gradient of 0 can be measured too)."""

    value: float
    relative: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.value) and self.value > 0):
            raise ValueError(f"half-width must be a positive number, not {self.value!r}")
        if self.relative and self.value >= 1:
            raise ValueError(f"relative half-width {self.value:.0%} must be below 100%")

    @classmethod
    def parse(cls, text: str) -> Precision:
        """'10%' (relative) or '0.2' (gradient units)."""
        body = text.strip()
        relative = body.endswith("%")
        try:
            number = float(body.rstrip("%").strip())
        except ValueError as e:
            raise ValueError(f"{text!r}: a percentage like '10%' or a positive number") from e
        return cls(number / 100 if relative else number, relative)

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"

    def at(self, gradient: float) -> float:
        """The half-width (gradient units) wanted for a gradient of this size."""
        return self.value * max(abs(gradient), 1.0) if self.relative else self.value


PRECISION_SLACK = 1.5  # an interval this much wider than wanted is said, not left to be found


def precision_shortfall(gradient: float | None, ci95: tuple[float, float] | None,
                        wanted: Precision) -> str | None:
    """A note when a measured interval is much wider than the precision asked for: the run
    completed, but its answer is not what was wanted (noisier responses than training saw,
    or the effect cap kept the delay small), and nothing else would say so."""
    if gradient is None or ci95 is None:
        return None
    half, goal = (ci95[1] - ci95[0]) / 2, wanted.at(gradient)
    if not half > PRECISION_SLACK * goal:
        return None
    return (f"wider than wanted: ±{half:.3g} against ±{goal:.3g} (half_width {wanted}); "
            "the responses were noisier than training saw or the effect cap kept the delay "
            "small: more cycles, a quieter time or a higher effect cap would narrow it")


class PlanSettings(Protocol):
    """What the plan reads (an experiment's `parameters` has it): thesis §3.2's knobs."""

    k: int
    n_bins: int
    chunks: int
    scale_d: float
    cycles: int | None  # None: as many as the precision needs (`_cycles_for_precision`)
    period_s: float | None
    magnitude_ms: float | None
    half_width: Precision
    max_delay_ms: float
    max_duration_s: float


class PlanBeyondCap(ValueError):
    """The plan's wave is longer than max_duration_s: the injector would refuse it."""


@dataclass(frozen=True)
class WavePlan:
    period_s: float
    cycles: int
    magnitude_s: float  # the first delay (adaptive), or the fixed one
    n_bins: int
    notes: tuple[str, ...] = field(default=())
    noise_s: dict[str, float] = field(default_factory=dict)  # per transaction: 95% half-width
    effect_cap_s: dict[str, float] = field(default_factory=dict)  # the largest effect on its
    # response time: its training sd (MIN_EFFECT_CAP_S at least)

    @property
    def duration_s(self) -> float:
        return self.period_s * self.cycles


def training_needed_s(by_transaction: dict[str, tuple[np.ndarray, np.ndarray]],
                      k: int) -> float | None:
    """Training the spectrum needs at the request rate seen (every transaction pooled):
    TRAIN_CHUNKS chunks of TRAIN_BINS bins of ~k requests (None: too few to tell yet)."""
    t, _ = pooled(by_transaction)
    try:
        return TRAIN_CHUNKS * TRAIN_BINS * sampling_interval_s(t, k)
    except ValueError:
        return None


def pooled(by_transaction: dict[str, tuple[np.ndarray, np.ndarray]]
           ) -> tuple[np.ndarray, np.ndarray]:
    """Every transaction's requests in one series sorted by start, each response centred on
    its transaction's median: the system's noise with all the data (six page types at 2/s
    each fill the spectrum's bins six times faster than the busiest alone)."""
    parts = [(t, y - np.median(y)) for t, y in by_transaction.values() if len(y)]
    if not parts:
        return np.zeros(0), np.zeros(0)
    t = np.concatenate([a for a, _ in parts])
    y = np.concatenate([b for _, b in parts])
    order = np.argsort(t, kind="stable")
    return t[order], y[order]


def plan_wave(by_transaction: dict[str, tuple[np.ndarray, np.ndarray]], end_s: float,
              params: PlanSettings) -> WavePlan:
    """`by_transaction`: training (start times, response times) per transaction."""
    notes: list[str] = []
    t, y = pooled(by_transaction)
    if len(t) < 4 * params.k:
        raise ValueError(f"training saw {len(t)} requests of the transactions: too few to plan")
    bin_s = sampling_interval_s(t, params.k)
    span = end_s - float(t.min())
    n_bins = params.n_bins
    while n_bins > 8 and 2 * n_bins * bin_s > span:
        n_bins //= 2  # training must hold two chunks of N bins
    period, source = params.period_s, "given"
    if period is None:
        shortest = shortest_period_s(by_transaction)
        highest = min(16, n_bins // 2 - 1, int(n_bins * bin_s // shortest))
        try:
            if highest < 2:
                raise ValueError(f"N={n_bins} bins of {bin_s:.2f} s hold no two periods of "
                                 f"{shortest:.1f} s")
            choice = choose_injection(baseline_spectrum(t, y, end_s, bin_s, n_bins, params.chunks),
                                      params.scale_d, (2, highest))
            period, source = choice.period_s, "training's quietest frequency"
            notes.append(f"period {period:.1f} s: the quietest frequency of training (k_d="
                         f"{choice.k_d} of N={n_bins} bins of {bin_s:.2f} s, every "
                         f"transaction pooled; {shortest:.1f} s at least)")
        except ValueError as e:
            period = max(4 * bin_s, 10.0, shortest)
            source = f"four bins of {params.k} requests at the request rate"
            notes.append(f"training too short for the spectrum ({e}); period {period:.1f} s")
    cycles = params.cycles or MIN_CYCLES
    noise, caps = _noise_and_caps(by_transaction, end_s, period, cycles)
    if params.cycles is None and params.magnitude_ms is None:
        cycles = _cycles_for_precision(noise, caps, period, params, notes)
        noise = {n: v * math.sqrt(MIN_CYCLES / cycles) for n, v in noise.items()}
    if params.magnitude_ms is not None:
        first = min(params.magnitude_ms, params.max_delay_ms) / 1e3
        notes.append(f"delay fixed at {first * 1e3:g} ms, {cycles} cycles")
    else:
        first = min(FIRST_DELAY_S, params.max_delay_ms / 1e3)
        notes.append(_precision_note(noise, caps, cycles, params))
    _check_cap(period, source, cycles, params)
    return WavePlan(period, cycles, first, n_bins, tuple(notes), noise, caps)


def _check_cap(period_s: float, source: str, cycles: int, params: PlanSettings) -> None:
    """Found at planning, not when the injector refuses the first link's wave."""
    duration = period_s * cycles
    if duration <= params.max_duration_s:
        return
    raise PlanBeyondCap(
        f"{cycles} cycles of {period_s:.1f} s ({source}) take {duration:.0f} s a link, beyond "
        f"max_duration_s={params.max_duration_s:g} (the injector's cap): a max_duration_s of "
        f"{math.ceil(duration / 100) * 100} or more, fewer cycles (6 at least is the "
        "thesis's default), or more requests a second")


def _cycles_for_precision(noise: dict[str, float], caps: dict[str, float], period_s: float,
                          params: PlanSettings, notes: list[str]) -> int:
    """Cycles that give the wanted precision with each transaction's effect at its cap (the
    median over transactions): the noise falls as 1/sqrt(cycles). MIN_CYCLES at least, what
    max_duration_s holds at most."""
    # a few periods to spare under the injector's duration cap (concurrent waves share the
    # plan's window: coordinator/live/measure.py `band_cycles`)
    most = max(MIN_CYCLES, int(params.max_duration_s // period_s) - 3)
    needed = [MIN_CYCLES * (noise[n] / params.half_width.at(1.0) / caps[n]) ** 2
              for n in noise if caps.get(n, 0) > 0]
    if not needed:
        return MIN_CYCLES
    want = math.ceil(float(np.median(needed)))
    cycles = min(max(MIN_CYCLES, want), most)
    why = (f"{cycles} cycles ({cycles * period_s:.0f} s a link): what ±{params.half_width} "
           "needs with the effect under the response time's spread")
    if want > most:
        why += f"; {want} would, beyond max_duration_s={params.max_duration_s:g}"
    notes.append(why)
    return cycles


def shortest_period_s(by_transaction: dict[str, tuple[np.ndarray, np.ndarray]]) -> float:
    """MIN_PERIOD_S, or PERIOD_PER_RESPONSE times the slowest transaction's 90th-percentile
    response: a half-period must be long against the requests it holds, since a request that
    starts within its response time of an edge is left out (the edge guard)."""
    slow = [float(np.quantile(y, 0.9)) for _, y in by_transaction.values() if len(y)]
    return max(MIN_PERIOD_S, PERIOD_PER_RESPONSE * max(slow, default=0.0))


def _noise_and_caps(by_transaction: dict[str, tuple[np.ndarray, np.ndarray]], end_s: float,
                    period_s: float, cycles: int) -> tuple[dict[str, float], dict[str, float]]:
    """Each transaction's 95% noise on the effect, and its effect cap: its own response-time
    spread in training (thesis §4.4's bound, per transaction: a 3 ms page must not get 60 ms
    because another page spreads over 60), at least MIN_EFFECT_CAP_S."""
    noise, caps = {}, {}
    for name, (t, y) in by_transaction.items():
        if len(y) >= 2:
            caps[name] = max(float(np.std(y, ddof=1)), MIN_EFFECT_CAP_S)
        try:
            probe = probe_noise(t, y, end_s, period_s, cycles)
        except ValueError:
            continue
        noise[name] = probe.t_quantile() * probe.se_s
    return noise, caps


def _precision_note(noise: dict[str, float], caps: dict[str, float], cycles: int,
                    params: PlanSettings) -> str:
    if not noise:
        return ("no sham fitted in training: each link's delay keeps its effect below the "
                "response time's spread")
    name = min(noise, key=noise.__getitem__)
    wanted = noise[name] / params.half_width.at(1.0)
    text = (f"±{params.half_width} needs an effect of {wanted * 1e3:.1f} ms on {name}'s response "
            f"time (±{noise[name] * 1e3:.2f} ms of noise in {cycles} cycles)")
    if name in caps and caps[name] < wanted:
        more = math.ceil(cycles * (wanted / caps[name]) ** 2)
        text += (f"; the response time's spread caps the effect at {caps[name] * 1e3:.1f} ms, "
                 f"so the interval will be wider (cycles: {more} would reach it)")
    return text + f"; first delay {min(FIRST_DELAY_S, params.max_delay_ms / 1e3) * 1e3:g} ms"


@dataclass(frozen=True)
class RoughGradient:
    """One transaction's gradient from the adaptive cycles so far (inverse-variance mean)."""

    gradient: float
    half_width: float  # 95%

    def combined(self, other: RoughGradient) -> RoughGradient:
        w1, w2 = self.half_width ** -2, other.half_width ** -2
        return RoughGradient((w1 * self.gradient + w2 * other.gradient) / (w1 + w2),
                             (w1 + w2) ** -0.5)

    @property
    def resolved(self) -> bool:
        """Known well enough to size the delay by: within a factor ~2."""
        return self.half_width <= max(abs(self.gradient), 1.0) / 2


@dataclass(frozen=True)
class DelayChoice:
    delay_s: float
    final: bool  # False: grow and run another adaptive cycle
    reason: str


def next_delay(rough: dict[str, RoughGradient], current_s: float, plan: WavePlan,
               precision: Precision, max_delay_s: float) -> DelayChoice:
    """After an adaptive cycle at `current_s`: grow (a rough gradient still unresolved, and the
    next delay under what a gradient of 1 would need and under the effect cap of the
    transactions already resolved), or the delay to measure at: the precision's (median over
    transactions) held under every transaction's effect cap."""
    if not rough:
        return DelayChoice(current_s, True, "no transaction had requests to size the delay by")
    unresolved = [n for n, r in rough.items() if not r.resolved]
    # an unresolved gradient counts as its estimate (or 1): growth stops where that caps it.
    # Not its lower end: a 1 ms cycle read 25 ± 22 on a page of gradient 45 and a 20 ms cap
    # (CI), and grew to 4 ms, an effect of 180 ms
    as_one = {n: r if r.resolved else RoughGradient(max(1.0, abs(r.gradient)), 0.0)
              for n, r in rough.items()}
    ceiling = min(_wanted_delay(plan, precision, {n: RoughGradient(1.0, 0.0) for n in unresolved}),
                  _capped_delay(plan, as_one), max_delay_s)
    if unresolved and current_s * GROWTH <= ceiling * 1.001:
        worst = max(unresolved, key=lambda n: rough[n].half_width)
        return DelayChoice(current_s * GROWTH, False, f"{worst}'s rough gradient "
                           f"{_show(rough[worst])} is not yet known within a factor 2")
    shown = ", ".join(f"{n} {_show(r)}" for n, r in sorted(rough.items()))
    return DelayChoice(measuring_delay(rough, plan, precision, max_delay_s), True,
                       f"rough gradients {shown}")


def measuring_delay(rough: dict[str, RoughGradient], plan: WavePlan, precision: Precision,
                    max_delay_s: float) -> float:
    """The delay a link is measured at once its rough gradients are known: the precision's
    (median over transactions) held under every transaction's effect cap."""
    delay = min(_wanted_delay(plan, precision, rough), _capped_delay(plan, rough), max_delay_s)
    return max(delay, min(MIN_DELAY_S, max_delay_s))


def _wanted_delay(plan: WavePlan, precision: Precision,
                  rough: dict[str, RoughGradient]) -> float:
    """The delay the precision needs (median over transactions; inf if nothing is known)."""
    wanted = [plan.noise_s[n] / precision.at(r.gradient) for n, r in rough.items()
              if n in plan.noise_s]
    return float(np.median(wanted)) if wanted else math.inf


def _capped_delay(plan: WavePlan, rough: dict[str, RoughGradient]) -> float:
    """The largest delay whose effect stays under every transaction's cap (at the upper end
    of its rough gradient); FIRST_DELAY_S if no cap is known."""
    caps = [plan.effect_cap_s[n] / max(abs(r.gradient) + r.half_width, 1e-9)
            for n, r in rough.items() if n in plan.effect_cap_s]
    return min(caps) if caps else FIRST_DELAY_S


def _show(r: RoughGradient) -> str:
    return f"{r.gradient:.2g} ± {r.half_width:.2g}"

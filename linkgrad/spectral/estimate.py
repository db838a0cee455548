"""Link gradient of every transaction of a web log under one square-wave injection.

The glue between the pure pieces: the training phase on the requests before the injection
(thesis §3.2: bin size, baseline spectrum, periodic noise), the thesis's eq. 2.6 as the
reference, and our phase-locked estimate with its interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from linkgrad.protocol.record import InjectionRecord
from linkgrad.spectral.binning import (
    MAX_BINS,
    bin_series,
    bins_for_window,
    fill_empty,
    sampling_interval_s,
)
from linkgrad.spectral.by_level import LevelSplit, split_by_level
from linkgrad.spectral.lockin import LockinEstimate, LockinSettings, lockin_gradient
from linkgrad.spectral.periodic import periodic_noise_hz
from linkgrad.spectral.thesis import thesis_gradient
from linkgrad.spectral.training import BaselineSpectrum, baseline_spectrum
from linkgrad.square_wave import SquareWave
from linkgrad.transactions import group_by_transaction, patterns_from
from linkgrad.weblog.model import MAX_RESPONSE_S, RequestLog

__all__ = [
    "MAX_CHUNKS",
    "MAX_EFFECT_S",
    "PERIODIC_MAX_BINS",
    "GradientSettings",
    "ThesisResult",
    "TransactionGradient",
    "gradients",
    "log_gradients",
    "settings_for_log",
    "shared_periodic_noise_hz",
    "thesis_bins",
    "transaction_gradient",
]

MAX_CHUNKS = 1000  # training chunks (M): beyond, a log years long would be cut into a loop
PERIODIC_MAX_BINS = 4096  # bins per chunk in the periodic-noise search: a longer training
# log is searched in wider bins (a lower Nyquist frequency), not in more of them
# The largest effect (and standard error, and interval end times the delay) an estimate may
# have: the lockin effect is a regression coefficient of responses a web log holds (30 days at
# most), which drift and periodic-noise terms lift above their range only as far as the fit is
# ill-conditioned (a few times; 63x in a contrived design). Past a thousandfold the fit is
# near singular, not a measurement; the bound also makes what a run writes a number that
# reading its directory back accepts (`config.bounds`).
MAX_EFFECT_S = 1e3 * MAX_RESPONSE_S


@dataclass(frozen=True)
class GradientSettings:
    k: int = 8  # requests per bin for the thesis's sampling interval (§3.2 step 1)
    chunks: int = 9  # M training chunks (§3.2 step 2)
    n_bins: int | None = None  # N; by default from the record, else from k
    periodic_terms: int = 4  # most periodic-noise frequencies to model (0: none)
    min_requests: int = 20
    lockin: LockinSettings = field(default_factory=LockinSettings)


def settings_for_log(time_resolution_s: float, k: int = 8, chunks: int = 9,
                     n_bins: int | None = None) -> GradientSettings:
    """The settings a log calls for: its stamps' resolution widens the edge guard. One function
    for `linkgrad run` and `linkgrad gradient`, so a link recomputed offline gets the answer
    the run got."""
    base = GradientSettings(k=k, chunks=chunks, n_bins=n_bins)
    return replace(base, lockin=replace(base.lockin, time_resolution_s=time_resolution_s))


@dataclass(frozen=True)
class ThesisResult:
    gradient: float
    n_bins: int
    bin_s: float
    chunks: int  # training chunks used for FFT⁰; 0 means FFT⁰ was taken as 0


@dataclass(frozen=True)
class TransactionGradient:
    name: str
    requests: int  # in the measurement window
    baseline_requests: int
    lockin: LockinEstimate | None
    thesis: ThesisResult | None
    periodic_hz: tuple[float, ...] = ()
    notes: tuple[str, ...] = ()
    by_level: LevelSplit | None = None  # quiet against busy cycles, where their levels differ


def thesis_bins(
    t_base: np.ndarray, t_window: np.ndarray, wave: SquareWave, settings: GradientSettings,
    record_n_bins: int | None,
) -> tuple[int, float]:
    """N and ΔTs: the record's (or the user's) N, else the most bins that hold ~k requests."""
    window_s = wave.cycles * wave.period_s
    n_bins = settings.n_bins or record_n_bins
    if n_bins is None:
        source = t_base if len(t_base) > settings.k + 1 else t_window
        n_bins = bins_for_window(window_s, wave.cycles, sampling_interval_s(source, settings.k))
    if n_bins > MAX_BINS:
        raise ValueError(f"N={n_bins} bins is over {MAX_BINS}")
    return n_bins, window_s / n_bins


def _training_spectrum(
    t: np.ndarray, y: np.ndarray, end_s: float, n_bins: int, bin_s: float, chunks: int
) -> BaselineSpectrum | None:
    base = t < end_s
    try:
        return baseline_spectrum(t[base], y[base], end_s, bin_s, n_bins, chunks)
    except ValueError:
        return None


def shared_periodic_noise_hz(
    t: np.ndarray, y: np.ndarray, groups: dict[str, np.ndarray], before_s: float,
    settings: GradientSettings,
) -> tuple[float, ...]:
    """Periodic noise common to every transaction (GC pauses, cron), in the training data.

    Such noise comes from shared servers, so it is sought in all requests pooled, each centred
    on its transaction's median: several times the data of one transaction.
    """
    if settings.periodic_terms == 0:
        return ()
    centred = np.full(len(y), np.nan)
    for rows in groups.values():
        train = rows[t[rows] < before_s]
        if len(train):
            centred[rows] = y[rows] - np.median(y[train])
    base = (t < before_s) & ~np.isnan(centred)
    if base.sum() < 16 * settings.k:
        return ()
    span_s = before_s - float(t[base].min())
    bin_s = max(sampling_interval_s(t[base], settings.k),
                span_s / (settings.chunks * PERIODIC_MAX_BINS))
    if not bin_s > 0:
        return ()  # every training request at one time: no spectrum to search
    n_bins = int(span_s / (settings.chunks * bin_s))
    if n_bins < 16:
        return ()
    try:
        spectrum = baseline_spectrum(t[base], centred[base], before_s, bin_s, n_bins,
                                     settings.chunks)
        return periodic_noise_hz(spectrum, t[base], centred[base], before_s,
                                 settings.periodic_terms)
    except ValueError:  # a training chunk without requests (the log has a gap or ends early)
        return ()


def transaction_gradient(
    name: str, t: np.ndarray, y: np.ndarray, wave: SquareWave, settings: GradientSettings,
    record_n_bins: int | None = None, periodic: tuple[float, ...] = (),
    baseline_end_s: float | None = None, others: tuple[SquareWave, ...] = (),
) -> TransactionGradient:
    """Both estimates for one transaction's requests (start times `t`, responses `y`, seconds).

    `periodic` are periodic-noise frequencies (Hz) to model, from `shared_periodic_noise_hz`.
    The training data end at `baseline_end_s` (default: the first rising edge); a run that
    measures links one after another passes the end of its passive phase, so earlier
    injections never count as unperturbed.
    """
    baseline_end = wave.start_s if baseline_end_s is None else baseline_end_s
    base = t < baseline_end
    window = (t >= wave.start_s) & (t < wave.end_s)
    n_window, n_base = int(window.sum()), int(base.sum())
    lacking = _lacking(t, wave, settings)
    if lacking is not None:
        return TransactionGradient(name, n_window, n_base, None, None, (), (lacking,))
    notes: list[str] = []
    thesis = _thesis(t, y, base, window, wave, settings, record_n_bins, baseline_end, notes)
    notes += [
        f"periodic noise at {f:.4g} Hz is within the window's resolution of the injection "
        f"frequency {wave.frequency_hz:.4g} Hz: they cannot be told apart; inject at another period"
        for f in periodic if abs(f - wave.frequency_hz) < 1 / (wave.cycles * wave.period_s)
    ]
    try:
        estimate: LockinEstimate | None = lockin_gradient(t, y, wave, periodic, settings.lockin,
                                                          others)
    except ValueError as e:  # numpy's LinAlgError is one too
        estimate = None
        notes.append(f"lockin: {e}")
    if estimate is not None and not np.all(np.isfinite([estimate.gradient, *estimate.ci])):
        estimate = None
        notes.append("lockin: the fit gave no finite gradient (responses too alike or too few)")
    if estimate is not None and not _within_effect_limit(estimate, wave.magnitude_s):
        estimate = None
        notes.append(f"lockin: the fit's effect or its interval is past {MAX_EFFECT_S:g} s, "
                     "a thousand times the longest response: its nuisance terms are all but "
                     "collinear with the wave (more cycles or another period part them)")
    if estimate is not None and estimate.widened_by_cycles:
        notes.append("the cycles disagreed beyond the noise within them (a burst of other work "
                     "or a change of load): the interval is from the spread between cycles, "
                     "wider; more cycles narrow it")
    split = split_by_level(t, y, wave, periodic, settings.lockin, others) \
        if estimate is not None else None
    if estimate is not None and split is not None and split.differ:
        estimate, note = _spanning_both(estimate, split)
        notes.append(note)
    return TransactionGradient(name, n_window, n_base, estimate, thesis, periodic, tuple(notes),
                               split)


def _spanning_both(e: LockinEstimate, split: LevelSplit) -> tuple[LockinEstimate, str]:
    """The estimate with an interval covering the quiet and the busy cycles' intervals (the
    gradient a later hour sees lies between them, in its own mix), and the note saying why."""
    lo, hi = split.span
    q, b = split.quiet, split.busy
    note = (f"depends on the load: {q.gradient:.3g} [{q.ci[0]:.3g}, {q.ci[1]:.3g}] in the "
            f"{split.quiet_cycles} cycles at the usual response level, {b.gradient:.3g} "
            f"[{b.ci[0]:.3g}, {b.ci[1]:.3g}] in the {split.busy_cycles} cycles "
            f"{split.level_ratio:.1f}x slower (other work on the machine?); the gradient "
            "averages this run's mix and its interval spans both: measure at a quiet time "
            "for the quiet one")
    return replace(e, ci=(min(lo, e.ci[0]), max(hi, e.ci[1])), widened_by_level=True), note


def _within_effect_limit(e: LockinEstimate, magnitude_s: float) -> bool:
    """Whether the effect, its standard error and its interval's ends (as effects: the ends
    times the delay) are within MAX_EFFECT_S."""
    ends = [abs(end) * magnitude_s for end in e.ci]
    return max(abs(e.effect_s), e.se_s, *ends) <= MAX_EFFECT_S


def _lacking(t: np.ndarray, wave: SquareWave, settings: GradientSettings) -> str | None:
    """Why the requests cannot show the wave's effect, or None: too few during the injection,
    or none while the delay was on, or none while it was off (the off half before the first
    edge counts: the estimate uses it)."""
    window = (t >= wave.start_s) & (t < wave.end_s)
    if (n := int(window.sum())) < settings.min_requests:
        return f"{n} requests during the injection; need {settings.min_requests}"
    on = wave.is_on(t)
    if not on.any():
        return "no request started while the delay was on"
    if not np.any((t >= wave.start_s - wave.half_s) & (t < wave.end_s) & ~on):
        return "no request started while the delay was off"
    return None


def _thesis(
    t: np.ndarray, y: np.ndarray, base: np.ndarray, window: np.ndarray, wave: SquareWave,
    settings: GradientSettings, record_n_bins: int | None, baseline_end: float,
    notes: list[str],
) -> ThesisResult | None:
    """The thesis's eq. 2.6 estimate, or None with the reason in `notes`: the reference method
    must never cost the run its answer."""
    try:
        n_bins, bin_s = thesis_bins(t[base], t[window], wave, settings, record_n_bins)
    except ValueError as e:
        notes.append(f"thesis estimate: {e}")
        return None
    spectrum = _training_spectrum(t, y, baseline_end, n_bins, bin_s, settings.chunks)
    if spectrum is None:
        notes.append("under 2 training chunks before the injection: thesis FFT⁰ taken as 0")
    means, counts = bin_series(t, y, wave.start_s, bin_s, n_bins)
    if (empty := int(np.sum(counts == 0))) > 0:
        notes.append(f"{empty} of {n_bins} thesis bins empty (filled with the mean)")
    fft0 = spectrum.mean[wave.cycles] if spectrum is not None and wave.cycles < n_bins else 0j
    try:
        g0 = thesis_gradient(fill_empty(means), wave.cycles, wave.magnitude_s, fft0)
    except ValueError as e:
        notes.append(f"thesis estimate: {e}")
        return None
    return ThesisResult(g0, n_bins, bin_s, spectrum.chunks if spectrum else 0)


def log_gradients(
    t: np.ndarray, y: np.ndarray, groups: dict[str, np.ndarray], wave: SquareWave,
    settings: GradientSettings, record_n_bins: int | None = None,
    baseline_end_s: float | None = None, others: tuple[SquareWave, ...] = (),
) -> dict[str, TransactionGradient]:
    """Every transaction's gradients; `groups` maps a transaction to its rows of `t` and `y`;
    `others`: waves injected on other links at the same time, fitted jointly."""
    baseline_end = wave.start_s if baseline_end_s is None else baseline_end_s
    periodic = shared_periodic_noise_hz(t, y, groups, baseline_end, settings)
    return {
        name: transaction_gradient(name, t[rows], y[rows], wave, settings, record_n_bins,
                                   periodic, baseline_end, others)
        for name, rows in groups.items()
    }


def gradients(log: RequestLog, record: InjectionRecord,
              transactions: dict[str, str] | None = None, *, k: int = 8, chunks: int = 9,
              baseline_end_s: float | None = None,
              partners: tuple[InjectionRecord, ...] = ()) -> dict[str, TransactionGradient]:
    """Each transaction's gradient from a web log and the record of the injection it saw, as
    `linkgrad gradient` computes it. `transactions` maps a name to a regex on the URL (default:
    one transaction per URL path); `partners` are records of injections on other links at the
    same time, fitted jointly."""
    groups = group_by_transaction(log.url, patterns_from(transactions or {}))
    settings = settings_for_log(log.time_resolution_s, k, chunks)
    return log_gradients(log.start_s, log.response_s, groups, record.square_wave(), settings,
                         record.n_bins, baseline_end_s=baseline_end_s,
                         others=tuple(p.square_wave() for p in partners))

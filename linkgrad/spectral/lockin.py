"""Our link-gradient estimate: a phase-locked regression on every request ("lockin").

What it uses that eq. 2.6 throws away:

* the phase: the injector's schedule is known, so the effect is the signed coefficient of the
  square wave itself (all its harmonics, not only the fundamental) and the quadrature noise
  that the modulus in eq. 2.6 folds in (a positive bias at gradient 0) never enters;
* every request, each with the same weight, in batches aligned to the wave's edges, so no bin
  straddles an edge (the smoothing of thesis §4.2) and requests that may cross the link after
  an edge (they start within `guard_s` before it) are left out;
* drift (Legendre polynomial in time) and known periodic noise (sinusoids at frequencies found
  in the training data) as nuisance terms;
* a fence against rare multi-second outliers: responses well beyond what 1% of requests reach
  are clipped (see `outlier_fence`), and the effect is divided by the fraction of requests
  inside the fences, which is exactly the derivative of the clipped mean under a shift, so the
  result still estimates the gradient of the **mean** (a link crossed by 30% of requests
  gives 0.3, not 0 or 1).

The 95% interval comes from the data: the spread of the batch residuals around the fit gives
the standard error, and a t quantile with the residual degrees of freedom the interval. Batches
are merged while their residuals are autocorrelated (a batch-means method), so correlated noise
widens the interval instead of hiding in it.

The window is the injection plus the off half-period before the first rising edge, so the on
and off halves have the same mean time and a linear drift cannot leak into the effect.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from linkgrad.square_wave import SquareWave

# scipy is imported in the functions that use it: a command's --help need not load it

__all__ = [
    "MIN_JACKKNIFE_CYCLES",
    "LockinEstimate",
    "LockinSettings",
    "between_cycles_se",
    "lockin_gradient",
    "outlier_fence",
]

MIN_JACKKNIFE_CYCLES = 4  # fewer cycles: the jackknife's own spread is too wide to judge by


@dataclass(frozen=True)
class LockinSettings:
    """Knobs of the estimator; the defaults are what the benchmarks measured."""

    drift_degree: int = 2
    min_batch_requests: int = 8
    max_batches_per_half: int = 8
    outlier_quantile: float = 0.99
    outlier_margin: float | None = 0.5  # None: no fence
    edge_guard_quantile: float = 0.9
    confidence: float = 0.95
    min_dof: int = 4
    time_resolution_s: float = 0.0
    cycle_test_level: float = 0.05  # the between-cycles spread is tested at this level


@dataclass(frozen=True)
class LockinEstimate:
    """The signed effect of the wave and what it took to get it."""

    gradient: float
    ci: tuple[float, float]
    effect_s: float  # mean response-time change while on, after the fence correction
    se_s: float
    dof: int
    requests: int
    batches: int
    batches_per_half: int
    drift_degree: int
    periodic_hz: tuple[float, ...]
    inside_fraction: float
    guard_s: float
    lag1_autocorrelation: float
    widened_by_cycles: bool = False  # the cycles disagreed beyond the model's noise
    widened_by_level: bool = False  # spans the quiet and busy cycles' gradients (`by_level`)


@dataclass(frozen=True)
class _Batches:
    half: np.ndarray  # the half-cycle each batch lies in (0: the off half before the wave)
    count: np.ndarray
    mean: np.ndarray
    center_s: np.ndarray  # mean start time of the batch's requests, relative to window start
    on: np.ndarray
    others_on: np.ndarray  # (batches, other waves): fraction of requests started while on


def _window_requests(
    t: np.ndarray, y: np.ndarray, wave: SquareWave, guard_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Requests in the window, minus those starting within `guard_s` before an edge.

    Returns (time since window start, response, half-cycle index, offset in the half, and the
    kept rows' indices into `t`).
    """
    half = wave.half_s
    rel = t - (wave.start_s - half)
    n_halves = 2 * wave.cycles + 1
    rows = np.flatnonzero((rel >= 0) & (rel < n_halves * half))
    rel, y = rel[rows], y[rows]
    h = np.minimum(np.floor(rel / half).astype(np.int64), n_halves - 1)
    offset = rel - h * half
    straddles = (offset > half - guard_s) & (h < n_halves - 1)
    keep = ~straddles
    return rel[keep], y[keep], h[keep], offset[keep], rows[keep]


def outlier_fence(
    y: np.ndarray, quantile: float, margin: float | None
) -> tuple[np.ndarray, float]:
    """Clip the rarest tails; returns (clipped, fraction inside the fences).

    The upper fence is q + margin·(q - median) with q the `quantile` (0.99: beyond what 1% of
    requests reach), the lower one mirrors it. Anchoring on a high quantile, not
    on the IQR, keeps a slow minority mode (cache misses, the requests that cross the link)
    inside: an IQR fence would clip them all and the gradient would vanish.
    """
    if margin is None or len(y) == 0:
        return y, 1.0
    q_lo, median, q_hi = np.quantile(y, [1 - quantile, 0.5, quantile])
    hi = q_hi + margin * (q_hi - median)
    lo = q_lo - margin * (median - q_lo)
    if hi <= lo:
        return y, 1.0
    inside = float(np.mean((y >= lo) & (y <= hi)))
    return np.clip(y, lo, hi), inside


def _batch(
    rel: np.ndarray, y: np.ndarray, h: np.ndarray, offset: np.ndarray, half: float, per_half: int,
    others_on: np.ndarray,
) -> _Batches:
    sub = np.minimum(np.floor(offset / (half / per_half)).astype(np.int64), per_half - 1)
    index = h * per_half + sub
    n_total = int(index.max()) + 1 if len(index) else 0
    count = np.bincount(index, minlength=n_total)
    y_sum = np.bincount(index, weights=y, minlength=n_total)
    t_sum = np.bincount(index, weights=rel, minlength=n_total)
    o_sum = np.column_stack([np.bincount(index, weights=col, minlength=n_total)
                             for col in others_on.T]) if others_on.shape[1] else \
        np.zeros((n_total, 0))
    used = count > 0
    on = (np.arange(n_total) // per_half) % 2 == 1
    c = count[used]
    half = np.arange(n_total) // per_half
    return _Batches(half[used], c, y_sum[used] / c, t_sum[used] / c, on[used],
                    o_sum[used] / c[:, None])


def _design(
    b: _Batches, window_s: float, drift_degree: int, periodic_hz: tuple[float, ...]
) -> np.ndarray:
    """Columns: intercept, square wave (0/1), Legendre P1..Pd of time, the other concurrent
    waves' on-fractions, cos/sin per periodic term."""
    x = 2.0 * b.center_s / window_s - 1.0
    drift = np.polynomial.legendre.legvander(x, drift_degree)[:, 1:]
    cols = [np.ones_like(x), b.on.astype(float), drift, b.others_on]
    for f in periodic_hz:
        phase = 2 * np.pi * f * b.center_s
        cols += [np.cos(phase)[:, None], np.sin(phase)[:, None]]
    return np.column_stack(cols)


@dataclass(frozen=True)
class _Fit:
    beta: float
    se: float
    dof: int
    lag1: float


def _weighted_fit(b: _Batches, design: np.ndarray) -> _Fit | None:
    """WLS of batch means on the design with weights = request counts; None if rank-deficient."""
    sw = np.sqrt(b.count.astype(float))
    a = design * sw[:, None]
    rhs = b.mean * sw
    coef, _, rank, _ = np.linalg.lstsq(a, rhs, rcond=None)
    dof = len(rhs) - a.shape[1]
    if rank < a.shape[1] or dof < 1:
        return None
    resid = rhs - a @ coef
    s2 = float(resid @ resid) / dof
    cov = s2 * np.linalg.inv(a.T @ a)
    denom = float(resid @ resid)
    lag1 = float(resid[1:] @ resid[:-1]) / denom if denom > 0 else 0.0
    return _Fit(float(coef[1]), float(np.sqrt(cov[1, 1])), dof, lag1)


def between_cycles_se(b: _Batches, design: np.ndarray) -> tuple[float, int]:
    """Leave-one-cycle-out jackknife of the wave's coefficient: its standard error and the
    number of cycles it used (0: too few to say).

    The model's standard error assumes the residual noise is alike in every cycle. A burst of
    someone else's work on the machine, or a change of load the drift terms cannot follow,
    lands in one or two cycles; dropping each cycle in turn shows how much the estimate
    depends on it, which the residual spread does not (jackknife of dependent data in blocks:
    Künsch 1989).
    """
    cycle = np.maximum(b.half - 1, 0) // 2  # the leading off half goes with the first cycle
    cycles = np.unique(cycle)
    if len(cycles) < MIN_JACKKNIFE_CYCLES:
        return 0.0, 0
    estimates = []
    for c in cycles:
        keep = cycle != c
        part = _Batches(b.half[keep], b.count[keep], b.mean[keep], b.center_s[keep], b.on[keep],
                        b.others_on[keep])
        fit = _weighted_fit(part, design[keep])
        if fit is None:
            return 0.0, 0
        estimates.append(fit.beta)
    n = len(estimates)
    spread = np.asarray(estimates) - np.mean(estimates)
    return float(np.sqrt((n - 1) / n * np.sum(spread**2))), n


def _model_ladder(degree: int, periodic: tuple[float, ...]) -> list[tuple[int, tuple[float, ...]]]:
    """Nuisance models from richest to plainest, tried until enough degrees of freedom remain."""
    ladder = [(d, periodic) for d in range(degree, 0, -1)]
    ladder += [(d, ()) for d in range(degree, -1, -1)] if periodic else [(0, ())]
    return ladder


def _fit_batches(
    b: _Batches, window_s: float, settings: LockinSettings, periodic: tuple[float, ...]
) -> tuple[_Fit, int, tuple[float, ...]] | None:
    fallback = None
    for degree, terms in _model_ladder(settings.drift_degree, periodic):
        fit = _weighted_fit(b, _design(b, window_s, degree, terms))
        if fit is None:
            continue
        if fit.dof >= settings.min_dof:
            return fit, degree, terms
        fallback = (fit, degree, terms)  # the plainest that fits has the most dof
    return fallback


def _initial_batches_per_half(n_requests: int, n_halves: int, settings: LockinSettings) -> int:
    per_half = 1
    while (
        per_half * 2 <= settings.max_batches_per_half
        and n_requests / (n_halves * per_half * 2) >= settings.min_batch_requests
    ):
        per_half *= 2
    return per_half


def lockin_gradient(
    t_s: np.ndarray,
    response_s: np.ndarray,
    wave: SquareWave,
    periodic_hz: tuple[float, ...] = (),
    settings: LockinSettings | None = None,
    others: tuple[SquareWave, ...] = (),
) -> LockinEstimate:
    """Signed link gradient of the mean response time, with a data-derived confidence interval.

    `t_s` are request start times (unix s), `response_s` response times (s), `wave` the
    injection with the mean delay actually injected. `others` are square waves injected on
    other links at the same time: fitted jointly, so their effects are neither in this
    link's estimate nor in its noise. Raises ValueError when the window holds too few
    requests to fit even the plainest model.
    """
    settings = settings or LockinSettings()
    t = np.asarray(t_s, dtype=float)
    y = np.asarray(response_s, dtype=float)
    in_window = (t >= wave.start_s - wave.half_s) & (t < wave.end_s)
    guard = _edge_guard_s(y[in_window], wave, settings)
    rel, y_w, h, offset, rows = _window_requests(t, y, wave, guard)
    for phase, parity in (("on", 1), ("off", 0)):
        if not np.any(h % 2 == parity):
            raise ValueError(f"no request clear of the edges while the delay was {phase}")
    others_on = np.column_stack([o.is_on(t[rows]).astype(float) for o in others]) \
        if others else np.zeros((len(rows), 0))
    fence = (settings.outlier_quantile, settings.outlier_margin)
    # pass 1: fence the raw responses, choose batches and nuisance model, first effect
    clipped, inside = outlier_fence(y_w, *fence)
    fit, per_half, degree, terms, n_batches = _choose_and_fit(
        rel, clipped, h, offset, wave, settings, periodic_hz, others_on)
    first = fit.beta / inside
    # pass 2: fence with that effect taken out, so on and off halves are clipped alike and a
    # large effect is not pushed over the fence; only the small remainder needs the correction
    on = (h % 2 == 1).astype(float)
    clipped, inside = outlier_fence(y_w - first * on, *fence)  # others stay: they are fitted
    b = _batch(rel, clipped, h, offset, wave.half_s, per_half, others_on)
    window_s = (2 * wave.cycles + 1) * wave.half_s
    design = _design(b, window_s, degree, terms)
    rest = _weighted_fit(b, design)
    if rest is not None:
        fit = _Fit(first * inside + rest.beta, rest.se, rest.dof, rest.lag1)
    fit, widened = _honest(fit, *between_cycles_se(b, design), settings)
    return replace(_estimate(fit, wave, settings, inside, len(y_w), n_batches, per_half,
                             degree, terms, guard), widened_by_cycles=widened)


def _honest(fit: _Fit, cycle_se: float, cycles: int, settings: LockinSettings
            ) -> tuple[_Fit, bool]:
    """The between-cycles standard error (with cycles - 1 degrees of freedom) where it is
    significantly larger than the model's (an F test at `settings.cycle_test_level`): the
    data then say the noise was not alike in every cycle, and the model's interval would be
    too narrow. Otherwise the model's, which uses every batch."""
    from scipy import stats
    if cycles == 0 or fit.se <= 0:
        return fit, False
    ratio = (cycle_se / fit.se) ** 2
    if ratio <= stats.f.ppf(1 - settings.cycle_test_level, cycles - 1, fit.dof):
        return fit, False
    return _Fit(fit.beta, cycle_se, cycles - 1, fit.lag1), True


def _choose_and_fit(
    rel: np.ndarray, y: np.ndarray, h: np.ndarray, offset: np.ndarray, wave: SquareWave,
    settings: LockinSettings, periodic_hz: tuple[float, ...], others_on: np.ndarray,
) -> tuple[_Fit, int, int, tuple[float, ...], int]:
    """Batches per half-cycle and nuisance model; returns (fit, per_half, degree, terms, G)."""
    window_s = (2 * wave.cycles + 1) * wave.half_s
    per_half = _initial_batches_per_half(len(y), 2 * wave.cycles + 1, settings)
    while True:
        b = _batch(rel, y, h, offset, wave.half_s, per_half, others_on)
        chosen = _fit_batches(b, window_s, settings, periodic_hz)
        if chosen is None:
            if per_half > 1:
                per_half //= 2
                continue
            raise ValueError(f"{len(y)} requests in the window are too few to fit the wave")
        fit, degree, terms = chosen
        if per_half > 1 and fit.lag1 > 2.0 / np.sqrt(len(b.count)):
            per_half //= 2  # correlated batches: merge them so the interval stays honest
            continue
        return fit, per_half, degree, terms, len(b.count)


def _edge_guard_s(y: np.ndarray, wave: SquareWave, settings: LockinSettings) -> float:
    """How long before an edge a request may start and still cross the link after it."""
    typical = float(np.quantile(y, settings.edge_guard_quantile)) if len(y) else 0.0
    return min(typical + settings.time_resolution_s, wave.half_s / 4)


def _estimate(
    fit: _Fit, wave: SquareWave, settings: LockinSettings, inside: float, requests: int,
    batches: int, per_half: int, degree: int, terms: tuple[float, ...], guard: float,
) -> LockinEstimate:
    from scipy import stats
    scale = wave.magnitude_s * inside
    t_q = float(stats.t.ppf(0.5 + settings.confidence / 2, fit.dof))
    ci = ((fit.beta - t_q * fit.se) / scale, (fit.beta + t_q * fit.se) / scale)
    return LockinEstimate(
        gradient=fit.beta / scale,
        ci=ci,
        effect_s=fit.beta / inside,
        se_s=fit.se / inside,
        dof=fit.dof,
        requests=requests,
        batches=batches,
        batches_per_half=per_half,
        drift_degree=degree,
        periodic_hz=terms,
        inside_fraction=inside,
        guard_s=guard,
        lag1_autocorrelation=fit.lag1,
    )

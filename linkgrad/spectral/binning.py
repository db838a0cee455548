"""Turning irregular requests into a uniformly sampled response-time series (thesis §3.2 step 1)."""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_BINS", "bin_series", "bins_for_window", "fill_empty", "sampling_interval_s"]

# The most bins a series may have: 8 MB a column. More would be the memory of a wrong input
# (a stray time stamp years away, a bin of nanoseconds), not of a finer answer.
MAX_BINS = 1 << 20


def sampling_interval_s(start_s: np.ndarray, k: int) -> float:
    """ΔTs = mean + 3·std of the time spanned by `k` consecutive requests (§3.2 step 1).

    The span of k requests is `t[i+k] - t[i]` (k inter-arrival gaps), over every i, so a bin of
    ΔTs holds at least k requests with high probability.
    """
    if k < 1:
        raise ValueError(f"{k=} must be at least 1")
    t = np.sort(np.asarray(start_s, dtype=float))
    if len(t) <= k + 1:
        raise ValueError(f"need more than {k + 1} requests to size bins, got {len(t)}")
    spans = t[k:] - t[:-k]
    return float(spans.mean() + 3.0 * spans.std())


def bin_series(
    t_s: np.ndarray, y: np.ndarray, first_s: float, bin_s: float, n_bins: int
) -> tuple[np.ndarray, np.ndarray]:
    """Mean of `y` in each of `n_bins` bins of `bin_s` from `first_s`; returns (means, counts).

    Empty bins get NaN; `fill_empty` decides what the FFT sees there.
    """
    position = np.floor((np.asarray(t_s) - first_s) / bin_s)
    keep = (position >= 0) & (position < n_bins)  # before the cast: 1e20 bins away is no int64
    index = position[keep].astype(np.int64)
    counts = np.bincount(index, minlength=n_bins)
    sums = np.bincount(index, weights=np.asarray(y)[keep], minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    return means, counts


def fill_empty(means: np.ndarray) -> np.ndarray:
    """Replace empty bins (NaN) by the mean of the others: adds nothing at any frequency > 0."""
    filled = means.copy()
    empty = np.isnan(filled)
    if empty.all():
        raise ValueError("every bin is empty")
    filled[empty] = np.nanmean(means)
    return filled


def bins_for_window(window_s: float, cycles: int, min_bin_s: float) -> int:
    """The most bins at least `min_bin_s` wide, a multiple of 2·cycles (edges on bin borders),
    and at least two per half-period: one per half would put the wave at Nyquist.

    At most MAX_BINS; ValueError when `min_bin_s` is not positive (every request at one time)
    or the cycles alone need more.
    """
    if not min_bin_s > 0:
        raise ValueError(f"bins of {min_bin_s:g} s: the requests' start times do not spread")
    if 4 * cycles > MAX_BINS:
        raise ValueError(f"{cycles} cycles need {4 * cycles} bins, over {MAX_BINS}")
    per_half = min(window_s / (2 * cycles * min_bin_s), MAX_BINS // (2 * cycles))
    return 2 * cycles * max(int(per_half), 2)

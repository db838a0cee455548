"""The shared calipers against numpy over the same events, merged and whole."""

from __future__ import annotations

import math

import numpy as np
import pytest

from injector.calipers import delay_summary
from linkgrad.calipers import BLOCK, Calipers


def _whole(values: np.ndarray) -> Calipers:
    c = Calipers()
    for v in values:
        c.add(float(v))
    return c


@pytest.mark.parametrize("offset", [0.0, 1e9])  # a large mean: the one-pass update stays exact
def test_the_value_series_is_numpy_s_count_sum_min_max_mean_and_sd(offset):
    values = np.random.default_rng(1).exponential(3.0, 5000) + offset
    s = _whole(values).summary().value
    assert s is not None
    assert s.count == 5000
    assert s.sum == pytest.approx(values.sum(), rel=1e-12, abs=1e-9)  # 9 decimals reported
    assert (s.min, s.max) == (pytest.approx(values.min()), pytest.approx(values.max()))
    assert s.mean == pytest.approx(values.mean(), rel=1e-12, abs=1e-9)
    assert s.sd == pytest.approx(values.std(ddof=1), rel=1e-6)


def test_merged_calipers_are_the_calipers_of_all_their_events():
    values = np.random.default_rng(2).normal(10.0, 2.0, 3001)
    parts = [_whole(values[:1]), _whole(values[1:1000]), _whole(values[1000:]), Calipers()]
    merged = Calipers()
    for p in parts:
        merged.merge(p)
    m, w = merged.summary().value, _whole(values).summary().value
    assert m is not None
    assert w is not None
    assert m.count == w.count
    assert m.mean == pytest.approx(w.mean, rel=1e-12, abs=1e-9)
    assert m.sd == pytest.approx(w.sd, rel=1e-9)
    assert (m.min, m.max) == (w.min, w.max)


def test_timed_events_give_rate_gap_wall_time_and_busy_time():
    c = Calipers()
    c.time(1000.0, 10.0, 10.5)  # 2000 /s
    c.time(3000.0, 11.0, 12.0)  # 3000 /s after a 0.5 s gap
    c.time(500.0, 12.0, 12.0)  # no duration: a value, no rate; no gap
    s = c.summary()
    assert s.count == 3
    assert s.value is not None
    assert s.value.sum == 4500.0
    assert s.rate is not None
    assert s.rate.count == 2
    assert s.rate.mean == 2500.0
    assert s.gap is not None
    assert (s.gap.count, s.gap.sum) == (2, 0.5)
    assert (s.duration_s, s.busy_s) == (2.0, 1.5)


def test_overlapping_events_have_no_negative_gap():
    c = Calipers()
    c.time(1.0, 0.0, 2.0)
    c.time(1.0, 1.0, 3.0)  # another thread's call, begun before the first ended
    assert c.summary().gap.min == 0.0  # type: ignore[union-attr]


def test_empty_calipers_say_nothing_rather_than_zero():
    s = Calipers().summary()
    assert (s.count, s.value, s.rate, s.gap, s.duration_s, s.busy_s) == (0, None, None, None,
                                                                        None, None)
    one = _whole(np.array([4.0])).summary().value
    assert one is not None
    assert one.sd == 0.0
    assert not math.isnan(one.sd)


def test_the_injector_reports_its_delays_in_ms_as_before():
    c = _whole(np.array([0.020, 0.021, 0.019]))
    s = delay_summary(c)
    assert (s.count, s.min_ms, s.max_ms, s.mean_ms, s.std_ms) == (3, 19.0, 21.0, 20.0, 1.0)
    assert delay_summary(Calipers()).count == 0
    assert delay_summary(Calipers()).mean_ms is None


def test_timed_events_across_blocks_are_summarised_as_one_series():
    """Gaps are from the latest end before each event, across the blocks' edges too."""
    rng = np.random.default_rng(5)
    n = 3 * BLOCK + 17
    start = np.cumsum(rng.exponential(1.0, n))
    end = start + rng.exponential(1.5, n)  # often past the next start: overlaps, no gap
    value = rng.exponential(100.0, n)
    c = Calipers()
    for v, s0, e in zip(value, start, end, strict=True):
        c.time(float(v), float(s0), float(e))
    latest = np.maximum.accumulate(end)[:-1]
    gaps = np.maximum(start[1:] - latest, 0.0)
    summary = c.summary()
    assert summary.count == n
    assert summary.gap is not None
    assert summary.rate is not None
    assert summary.gap.count == n - 1
    assert summary.gap.mean == pytest.approx(gaps.mean(), abs=1e-9)  # 9 decimals reported
    assert summary.gap.sd == pytest.approx(gaps.std(ddof=1), rel=1e-6)
    assert summary.rate.mean == pytest.approx((value / (end - start)).mean(), rel=1e-9)
    assert summary.busy_s == pytest.approx((end - start).sum(), rel=1e-9)
    assert summary.duration_s == pytest.approx(end.max() - start[0], rel=1e-9)

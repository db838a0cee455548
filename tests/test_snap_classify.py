"""SNAP Table 2 on Linux counters (linkgrad.snap.classify) and its input columns."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from numpy.testing import assert_allclose

from linkgrad.snap import COLUMNS, IntervalStats, SnapThresholds, classify, delayed_ack_count

# A healthy interval on a modern kernel with an RTT tracer: 10 segments out and in, 5 RTT
# samples all at the 1 ms propagation delay, buffers far from full.
HEALTHY = dict(
    start_s=100.0, end_s=100.5, sndbuf_limited_us=0, rwnd_limited_us=0, busy_us=2000,
    retrans=0, dsack_dups=0, rto=0, data_segs_out=10, data_segs_in=10, bytes_acked=14480,
    bytes_received=14480, rtt_sum_us=5000, rtt_samples=5, rtt_us=1000, min_rtt_us=1000,
    notsent_bytes=0, wmem_queued=4096, sndbuf=87040, ca_state=0, retransmits_now=0, backoff=0,
    snd_mss=1448, snd_wnd=65535, rcv_space=14480, writes=2, write_bytes=14480, small_writes=0,
    unacked=0, last_ack_recv_ms=10, last_data_sent_ms=10,
)


def rows(*overrides: dict[str, float]) -> IntervalStats:
    """One row per dict: HEALTHY with those columns changed (NaN: the kernel lacks it)."""
    table = [{**HEALTHY, **o} for o in overrides]
    return IntervalStats.from_columns({name: [r[name] for r in table] for name in HEALTHY})


def held(**override: float) -> tuple[str, ...]:
    return classify(rows(override)).names(0)


def test_a_healthy_interval_is_app_limited_only() -> None:
    c = classify(rows({}))
    assert c.names(0) == ("app_limited",)
    assert not c.idle[0]
    assert not c.small_writes[0]
    assert c.delayed_acks[0] == 0.0


@pytest.mark.parametrize(("override", "expected"), [
    ({"sndbuf_limited_us": 1200}, "send_buffer"),
    ({"retrans": 3, "rto": 0}, "fast_retransmit"),
    ({"retrans": 1, "rto": 1}, "timeout"),
    ({"retrans": 2, "rto": 2}, "timeout"),  # each RTO retransmitted: no fast retransmit
    ({"retrans": 2, "rto": 1}, "timeout"),  # and the loss probe sent before it
    # waiting for the next backed-off RTO: no RTO in the interval, still the timeout's time
    ({"ca_state": 4, "retransmits_now": 1, "rto": 0}, "timeout"),
    ({"rwnd_limited_us": 500}, "receiver_window"),
    # two 40 ms delayed ACKs in five samples lift the mean RTT 16 ms above propagation
    ({"rtt_sum_us": 5 * 1000 + 2 * 40_000}, "delayed_ack"),
])
def test_each_class_alone(override: dict[str, float], expected: str) -> None:
    assert held(**override) == (expected,)


@pytest.mark.parametrize("override", [
    {"wmem_queued": 87040, "sndbuf_limited_us": 0},  # the kernel's detector beats the snapshot
    {"rtt_sum_us": 5 * 1000 + 40_000},  # one in five: 8 ms on the mean, within 10 ms
    {"ca_state": 3},  # Recovery without a retransmission in the interval: nothing counted
    {"rtt_sum_us": 5 * (1000 + 10_000)},  # exactly propagation + MaxQueuingDelay: not more
    {"rtt_us": 50_000, "rtt_sum_us": 5000},  # traced sums beat a high smoothed RTT
    {"busy_us": 500_000},  # cwnd-limited is no class of Table 2
])
def test_near_misses_stay_app_limited(override: dict[str, float]) -> None:
    assert held(**override) == ("app_limited",)


def test_retransmissions_the_peer_reports_as_duplicates_are_no_loss() -> None:
    """A tail-loss probe sent while a delayed ACK was on its way: the peer DSACKs it."""
    assert held(retrans=1, rto=0, dsack_dups=1) == ("app_limited",)
    assert held(retrans=3, rto=0, dsack_dups=1) == ("fast_retransmit",)
    assert held(retrans=2, rto=1, dsack_dups=1) == ("timeout",)  # the RTO's own, no more


def test_several_classes_at_once() -> None:
    got = held(sndbuf_limited_us=10, retrans=5, rto=1, rwnd_limited_us=100)
    assert got == ("send_buffer", "fast_retransmit", "timeout", "receiver_window")
    got = held(sndbuf_limited_us=10, retrans=5, rwnd_limited_us=100,
               rtt_sum_us=5 * 1000 + 200_000)
    assert got == ("send_buffer", "fast_retransmit", "delayed_ack", "receiver_window")


def test_a_connection_waiting_on_an_rto_is_in_timeout_and_its_probe_no_fast_retransmit(
        ) -> None:
    """A cut before its first RTO: data in flight, no ACK for 200 ms (Linux's least RTO),
    a tail-loss probe sent."""
    assert held(unacked=3, last_ack_recv_ms=250, last_data_sent_ms=220, retrans=1,
                rto=0) == ("timeout",)
    assert held(unacked=3, last_ack_recv_ms=250, last_data_sent_ms=250) == ("timeout",)
    # a request just sent on a connection idle for seconds: its last ACK is old, its wait not
    assert held(unacked=1, last_ack_recv_ms=3000, last_data_sent_ms=5) == ("app_limited",)
    assert held(unacked=1, last_ack_recv_ms=3000, last_data_sent_ms=math.nan) == ("timeout",)
    # a tail-loss probe just sent, no ACK for 250 ms: the probe moved last_data_sent
    assert held(unacked=1, last_ack_recv_ms=250, last_data_sent_ms=20, retrans=1,
                rto=0) == ("timeout",)
    assert held(unacked=0, last_ack_recv_ms=5000) == ("app_limited",)  # idle, all acked
    assert held(unacked=3, last_ack_recv_ms=40) == ("app_limited",)  # a delayed ACK's wait
    # a SYN in flight: no ACK ever came (no RTT sample), last_ack_recv counts from boot
    assert held(unacked=1, last_ack_recv_ms=6e7, rtt_us=0, rtt_sum_us=math.nan,
                rtt_samples=math.nan, data_segs_out=0) == ("app_limited",)
    # fast recovery: duplicate ACKs keep coming
    assert held(unacked=30, last_ack_recv_ms=1, retrans=4, rto=0) == ("fast_retransmit",)


def test_an_rto_s_rtt_sample_tells_no_delayed_ack() -> None:
    """The first sample after an RTO spans the backoff: seconds, not a delayed ACK."""
    assert held(retrans=1, rto=1, rtt_sum_us=5 * 1000 + 2_000_000) == ("timeout",)


@pytest.mark.parametrize(("override", "expected"), [
    # before 4.10: the send buffer full at the poll, both sizes needed
    ({"sndbuf_limited_us": math.nan, "wmem_queued": 87040}, ("send_buffer",)),
    ({"sndbuf_limited_us": math.nan, "wmem_queued": 90000}, ("send_buffer",)),
    ({"sndbuf_limited_us": math.nan, "wmem_queued": 87039}, ("app_limited",)),
    ({"sndbuf_limited_us": math.nan, "wmem_queued": math.nan}, ("app_limited",)),
    # before 6.7: the timeout state at the poll; other retransmissions are fast ones
    ({"rto": math.nan, "retransmits_now": 2, "retrans": 2}, ("timeout",)),
    ({"rto": math.nan, "ca_state": 4, "retrans": 1}, ("timeout",)),
    ({"rto": math.nan, "ca_state": 4, "retrans": 0}, ("timeout",)),
    ({"rto": math.nan, "retrans": 3}, ("fast_retransmit",)),
    ({"rto": math.nan, "retrans": 0}, ("app_limited",)),
    # no RTT tracer: the smoothed RTT against min_rtt + MaxQueuingDelay, if data was sent
    ({"rtt_sum_us": math.nan, "rtt_samples": math.nan, "rtt_us": 11_001}, ("delayed_ack",)),
    ({"rtt_sum_us": math.nan, "rtt_samples": math.nan, "rtt_us": 11_000}, ("app_limited",)),
    ({"rtt_sum_us": math.nan, "rtt_samples": math.nan, "rtt_us": 90_000,
      "data_segs_out": 0}, ("app_limited",)),
    ({"rtt_sum_us": 0, "rtt_samples": 0, "rtt_us": 50_000}, ("delayed_ack",)),  # no sample
    ({"rtt_sum_us": math.nan, "rtt_samples": math.nan, "rtt_us": 90_000,
      "min_rtt_us": math.nan}, ("app_limited",)),  # no propagation delay: cannot tell
])
def test_fallbacks_for_older_kernels(override: dict[str, float],
                                     expected: tuple[str, ...]) -> None:
    assert held(**override) == expected


def test_a_base_kernel_with_no_newer_field_classifies_without_warnings() -> None:
    base = {"start_s": [0.0, 1.0, 2.0], "end_s": [1.0, 2.0, 3.0], "retrans": [0, 4, 1],
            "ca_state": [0, 3, 4], "retransmits_now": [0, 0, 1], "rtt_us": [900, 900, 900]}
    c = classify(IntervalStats.from_columns(base))
    assert c.as_rows() == [("app_limited",), ("fast_retransmit",), ("timeout",)]
    assert np.isnan(c.delayed_acks).all()
    assert not c.idle.any()  # unknown traffic is not idle


def test_delayed_ack_count_matches_section_4_2_by_hand() -> None:
    # The paper's constants and data-centre RTT (no propagation delay): ten samples, three
    # held 200 ms by a delayed ACK, seven at the 10 ms queuing delay.
    paper = SnapThresholds(max_queuing_delay_s=0.010, delayed_ack_timeout_s=0.180,
                           queuing_delay_s=0.010)
    sum_us = 3 * 200_000 + 7 * 10_000
    stats = rows({"rtt_sum_us": sum_us, "rtt_samples": 10, "min_rtt_us": 0},
                 {"rtt_sum_us": sum_us + 10 * 20_000, "rtt_samples": 10, "min_rtt_us": 20_000},
                 {"rtt_sum_us": 10 * 5_000, "rtt_samples": 10, "min_rtt_us": 0})
    # (0.67 s − 10·0.010 s) / 0.180 s; the 20 ms propagation delay comes off first; a sum
    # below the expected queuing floors at 0
    assert_allclose(delayed_ack_count(stats, paper), [0.57 / 0.18, 0.57 / 0.18, 0.0],
                    rtol=1e-12)
    assert classify(stats, paper).delayed_ack.tolist() == [True, True, False]


def test_delayed_ack_count_without_a_tracer_uses_srtt_per_segment() -> None:
    stats = rows({"rtt_sum_us": math.nan, "rtt_samples": math.nan, "rtt_us": 50_000,
                  "data_segs_out": 4, "min_rtt_us": 1000},
                 {"rtt_sum_us": math.nan, "rtt_samples": math.nan, "rtt_us": 10_500,
                  "data_segs_out": 4, "min_rtt_us": 1000})
    # samples ≈ 4 segments, sum ≈ 4·50 ms; (0.200 − 4·0.001) / 0.042 (Linux's timer, no
    # queuing charged); 10.5 ms is within the minimum plus 10 ms: the rule counts nothing
    assert_allclose(delayed_ack_count(stats), [(0.2 - 0.004) / 0.042, 0.0], rtol=1e-12)


def test_write_write_read_counts_one_delayed_ack_a_request() -> None:
    """Nagle's second write waits for the first's delayed ACK (~42 ms); the reply ACKs it at
    once: two RTT samples a request, one of them delayed (benchmarks/snap_delayed_ack.py)."""
    requests = 20
    stats = rows({"rtt_sum_us": requests * (42_000 + 100 + 100), "rtt_samples": 2 * requests,
                  "min_rtt_us": 100})
    assert_allclose(delayed_ack_count(stats), [requests], rtol=1e-12)


@pytest.mark.parametrize("field", ["max_queuing_delay_s", "delayed_ack_timeout_s",
                                   "small_write_fraction"])  # queuing_delay_s may be 0
@pytest.mark.parametrize("value", [0.0, -0.01, math.nan, math.inf])
def test_thresholds_must_be_positive_and_finite(field: str, value: float) -> None:
    message = re.escape(f"{field}={value!r} must be positive and finite")
    with pytest.raises(ValueError, match=f"^{message}$"):
        SnapThresholds(**{field: value})


def test_small_writes_use_the_mean_write_against_the_mss() -> None:
    stats = rows({"writes": 5, "write_bytes": 500},  # 100 B per write
                 {"writes": 5, "write_bytes": 5 * 1448},  # exactly one MSS: not small
                 {"writes": 0, "write_bytes": 0},  # no write: nothing to judge
                 {"writes": math.nan, "write_bytes": math.nan},  # no tracer
                 {"writes": 2, "write_bytes": 800, "rto": 1, "retrans": 1})  # with a timeout
    assert classify(stats).small_writes.tolist() == [True, False, False, False, True]
    quarter = SnapThresholds(small_write_fraction=0.25)  # 362 B
    assert classify(stats, quarter).small_writes.tolist() == [True, False, False, False,
                                                               False]


def test_idle_intervals_classify_as_app_limited() -> None:
    stats = rows({"data_segs_out": 0, "data_segs_in": 0, "rtt_sum_us": 0, "rtt_samples": 0},
                 {"data_segs_out": 0, "data_segs_in": 3},
                 {"data_segs_out": math.nan, "data_segs_in": math.nan, "bytes_acked": 0,
                  "bytes_received": 0})  # before 4.6: byte counts
    c = classify(stats)
    assert c.idle.tolist() == [True, False, True]
    assert c.app_limited.all()
    assert c.as_rows() == [("app_limited",)] * 3


def test_one_vectorised_pass_equals_row_by_row() -> None:
    rng = np.random.default_rng(7)
    n = 2000
    columns = {name: np.full(n, float(v)) for name, v in HEALTHY.items()}
    for name, high in [("sndbuf_limited_us", 3), ("rwnd_limited_us", 3), ("retrans", 4),
                       ("rto", 2), ("ca_state", 5), ("retransmits_now", 2)]:
        columns[name] = rng.integers(0, high, n).astype(float)
    columns["rtt_sum_us"] = rng.uniform(4000, 90_000, n)
    for name in ("rto", "sndbuf_limited_us", "rtt_sum_us"):
        columns[name][rng.random(n) < 0.3] = np.nan
    stats = IntervalStats.from_columns(columns)
    together = classify(stats).as_rows()
    for i in rng.choice(n, 50, replace=False):
        assert classify(stats.select([i])).names(0) == together[i]


def test_missing_columns_are_nan_and_columns_are_read_only() -> None:
    stats = IntervalStats.from_columns({"retrans": [1, 2]})
    assert len(stats) == 2
    assert np.isnan(stats.rto).all()
    assert stats.retrans.dtype == np.float64
    with pytest.raises(ValueError, match="read-only"):
        stats.retrans[0] = 5
    assert len(IntervalStats.from_columns({}, n_rows=3)) == 3
    assert set(stats.to_columns()) == set(COLUMNS)


@pytest.mark.parametrize(("columns", "message"), [
    ({"start_s": [0, 1], "end_s": [1, 2], "rto": [0]},
     "columns differ in length: start_s has 2 rows but rto has 1"),
    ({"retrnas": [1]}, "unknown columns ['retrnas']"),
    ({"retrans": [[1, 2]]}, "column 'retrans' must be 1-D, got shape (1, 2)"),
    ({"start_s": [0, 5], "end_s": [1, 4]}, "end_s < start_s at rows [1]"),
    ({}, "no column given: pass n_rows"),
])
def test_bad_columns_are_precise_errors(columns: dict[str, list], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        IntervalStats.from_columns(columns)


def test_select_by_mask_and_positions() -> None:
    stats = rows({"retrans": 1}, {"retrans": 2}, {"retrans": 3})
    assert stats.select([True, False, True]).retrans.tolist() == [1.0, 3.0]
    assert stats.select([2, 0]).retrans.tolist() == [3.0, 1.0]
    assert len(stats.select(np.zeros(3, dtype=bool))) == 0
    with pytest.raises(ValueError, match=re.escape("mask has shape (2,), expected (3,)")):
        stats.select([True, False])
    with pytest.raises(TypeError, match="boolean or integer"):
        stats.select([0.5])

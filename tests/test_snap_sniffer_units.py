"""SNAP in the sniffer without a kernel: samples from sock_diag replies built field by field
(`tests.fakes.diag_messages`), intervals by socket cookie, the CPU budget's control steps, the
profile's records and totals, and the poller in virtual time (a fake clock, CPU and sock_diag).
"""

from __future__ import annotations

import io
import json
import math
import re
import socket

import numpy as np
import pytest
from numpy.testing import assert_allclose

from linkgrad.protocol.jsonlines import LineWriter
from linkgrad.protocol.snap import Profile
from linkgrad.snap.classify import CLASS_NAMES, SnapThresholds
from sniffer import snap_poller, tcp_info
from sniffer.links import Process
from sniffer.poll_budget import BudgetSettings, PollBudget
from sniffer.profiling import Profiler
from sniffer.snap_profile import CALLS, SUMS, Endpoint, ProblemRecord, SnapProfile, Totals
from sniffer.snap_sample import COUNTERS, NAMES, Intervals, Samples, intervals, merged, samples
from sniffer.sockdiag import SocketTable, empty_table, parse_datagram, sockid
from tests.fakes.diag_messages import diag_message

T0 = 1_700_000_000.0  # unix seconds: reports must carry plausible times
SKMEM = (0, 87380, 0, 46080, 0, 2304, 0, 0, 0)  # sndbuf 46080, wmem_queued 2304
HEALTHY = {"rtt": 200, "min_rtt": 100, "snd_mss": 1448, "snd_cwnd": 10}  # µs: no delayed ACK
SUM_COLUMN = {name: j for j, name in enumerate((*SUMS, *CALLS))}
SECONDS_COLUMN = {name: j for j, name in enumerate(CLASS_NAMES)}


def _message(cookie: int, info: dict[str, int] | None, *,
             info_len: int = tcp_info.FULL_SIZE, skmem: tuple[int, ...] | None = SKMEM) -> bytes:
    return diag_message("10.0.0.1", 40000 + cookie % 1000, "10.0.0.2", 80, cookie=cookie,
                        inode=1000 + cookie % 1000, info=info, info_len=info_len, skmem=skmem)


def _table(*messages: bytes) -> SocketTable:
    return parse_datagram(b"".join(messages)) if messages else empty_table()


def _poll(time_s: float, sockets: dict[int, dict[str, int]]) -> Samples:
    """A poll of `sockets` (cookie -> tcp_info fields, healthy snapshots unless given)."""
    return samples(_table(*(_message(c, {**HEALTHY, **i}) for c, i in sockets.items())),
                   time_s)


def _value(s: Samples | Intervals, cookie: int, name: str) -> float:
    row = int(np.flatnonzero(s.cookie == cookie)[0])
    return float(s.values[row, NAMES.index(name)])


# ------------------------------------------------------------------------------ snap_sample


def test_samples_hold_counters_snapshots_and_memory_of_sockets_with_tcp_info():
    table = _table(
        _message(2**63 + 5, {"total_retrans": 7, "total_rto": 2, "sndbuf_limited": 1500,
                             "rwnd_limited": 4000, "busy_time": 90000, "data_segs_out": 30,
                             "bytes_acked": 2**33, "rtt": 1234, "min_rtt": 900,
                             "notsent_bytes": 17, "ca_state": 3, "snd_wnd": 65535}),
        _message(9, None, skmem=None),  # TIME_WAIT: no tcp_info, no sample
        _message(3, {"total_retrans": 1}, skmem=None))
    got = samples(table, T0)
    assert got.cookie.dtype == np.uint64
    assert got.cookie.tolist() == [2**63 + 5, 3]  # a u64 cookie survives exactly
    assert got.time_s.tolist() == [T0, T0]
    assert got.column("retrans").tolist() == [7, 1]
    assert got.column("rto").tolist() == [2, 0]
    assert got.column("sndbuf_limited_us").tolist() == [1500, 0]
    assert got.column("rwnd_limited_us").tolist() == [4000, 0]
    assert got.column("busy_us").tolist() == [90000, 0]
    assert got.column("bytes_acked")[0] == 2**33
    assert got.column("rtt_us")[0] == 1234
    assert got.column("ca_state")[0] == 3
    assert got.column("snd_wnd")[0] == 65535
    assert got.column("sndbuf")[0] == 46080
    assert got.column("wmem_queued")[0] == 2304
    assert np.isnan(got.column("sndbuf")[1])  # no SK_MEMINFO: unknown, not zero
    assert np.isnan(got.column("wmem_queued")[1])


def test_an_older_kernels_tcp_info_gives_nan_for_the_fields_it_lacks():
    """4.6's 160 bytes end at data_segs_out: no busy/rwnd/sndbuf_limited (4.10), no
    bytes_sent and dsack_dups (4.19), no snd_wnd (5.4), no total_rto (6.7)."""
    got = samples(_table(_message(1, {"total_retrans": 4, "data_segs_out": 12, "rtt": 300,
                                      "min_rtt": 250}, info_len=160)), T0)
    absent = ("sndbuf_limited_us", "rwnd_limited_us", "busy_us", "rto", "bytes_sent",
              "bytes_retrans", "dsack_dups", "snd_wnd")
    for name in absent:
        assert np.isnan(got.column(name)[0]), name
    assert got.column("retrans")[0] == 4
    assert got.column("data_segs_out")[0] == 12
    assert got.column("min_rtt_us")[0] == 250
    present = set(NAMES) - set(absent)
    assert not np.isnan([got.column(n)[0] for n in present]).any()


def test_intervals_difference_counters_by_cookie_whatever_the_order():
    earlier = _poll(T0, {3: {"total_retrans": 5, "data_segs_out": 100},
                         1: {"total_retrans": 0, "data_segs_out": 10},
                         2: {"total_retrans": 2, "data_segs_out": 50}})
    later = _poll(T0 + 1, {2: {"total_retrans": 3, "data_segs_out": 80, "rtt": 777},
                           5: {"total_retrans": 1, "data_segs_out": 4},  # born in between
                           1: {"total_retrans": 0, "data_segs_out": 11}})
    iv = intervals(earlier, later, since_s=T0 - 0.5)
    assert iv.cookie.tolist() == [2, 5, 1]  # later's rows, in later's order
    assert _value(iv, 2, "retrans") == 1
    assert _value(iv, 2, "data_segs_out") == 30
    assert _value(iv, 2, "rtt_us") == 777  # a snapshot: the later value, not a difference
    assert _value(iv, 1, "data_segs_out") == 1
    # the new socket counts from zero, from the poll before it existed
    assert _value(iv, 5, "retrans") == 1
    assert _value(iv, 5, "data_segs_out") == 4
    assert iv.new.tolist() == [False, True, False]
    assert iv.start_s.tolist() == [T0, T0 - 0.5, T0]
    assert iv.end_s.tolist() == [T0 + 1] * 3


def test_intervals_with_no_earlier_sample_are_all_new():
    iv = intervals(samples(empty_table(), T0), _poll(T0 + 1, {4: {"total_retrans": 2}}),
                   since_s=T0)
    assert iv.new.tolist() == [True]
    assert _value(iv, 4, "retrans") == 2


@pytest.mark.parametrize(("field", "column", "before", "after", "difference"), [
    ("total_rto", "rto", 65535, 2, 3),  # u16: 65535 -> 0 -> 1 -> 2
    ("total_retrans", "retrans", 2**32 - 1, 1, 2),  # u32
    ("data_segs_out", "data_segs_out", 2**32 - 10, 5, 15),
    ("bytes_acked", "bytes_acked", 2**40, 2**40 + 1000, 1000),  # u64, no wrap
])
def test_a_counter_that_wraps_is_differenced_modulo_its_width(field, column, before, after,
                                                             difference):
    iv = intervals(_poll(T0, {1: {field: before}}), _poll(T0 + 1, {1: {field: after}}),
                   since_s=T0)
    assert _value(iv, 1, column) == difference


def test_a_counter_that_goes_down_early_in_its_range_was_reset_and_counts_from_zero():
    """tcp_disconnect() zeroes a socket's statistics and keeps its cookie: a wrap would make
    the next difference ~4 billion retransmissions."""
    iv = intervals(_poll(T0, {1: {"total_retrans": 40, "data_segs_out": 900}}),
                   _poll(T0 + 1, {1: {"total_retrans": 1, "data_segs_out": 7}}), since_s=T0)
    assert _value(iv, 1, "retrans") == 1
    assert _value(iv, 1, "data_segs_out") == 7


def test_every_narrow_counter_wraps_at_its_fields_width():
    """u16 and u32 counters (u64 ones do not wrap in a socket's life, and a float holds them
    to 2**53 only)."""
    widths = {name: kind for name, kind, _, _ in tcp_info.LAYOUT}
    for column, field in COUNTERS.items():
        bits = 8 * int(widths[field][1])
        if bits == 64:
            continue
        iv = intervals(_poll(T0, {1: {field: 2**bits - 1}}), _poll(T0 + 1, {1: {field: 0}}),
                       since_s=T0)
        assert _value(iv, 1, column) == 1, column


def test_merged_keeps_the_latest_sample_and_intervals_start_there():
    table_read = _poll(T0, {1: {"data_segs_out": 10}, 2: {"data_segs_out": 20}})
    lookup = _poll(T0 + 0.4, {2: {"data_segs_out": 25}})
    latest = merged(table_read, lookup)
    assert sorted(zip(latest.cookie.tolist(), latest.time_s.tolist(), strict=True)) == [
        (1, T0), (2, T0 + 0.4)]
    iv = intervals(latest, _poll(T0 + 1, {1: {"data_segs_out": 12},
                                          2: {"data_segs_out": 26}}), since_s=T0)
    assert iv.start_s.tolist() == [T0, T0 + 0.4]  # per row: where each socket was last seen
    assert _value(iv, 1, "data_segs_out") == 2
    assert _value(iv, 2, "data_segs_out") == 1


# ------------------------------------------------------------------------------ poll_budget

SETTINGS = BudgetSettings(cpu_lower_pct=2.0, cpu_upper_pct=5.0, table_interval_s=0.5,
                          table_interval_max_s=4.0, fast_interval_min_s=0.05, step=2.0,
                          share=0.1)
HIGH, LOW, INSIDE = 9.0, 1.0, 3.0  # CPU percent: above, below and between the bounds


def test_above_the_upper_bound_the_table_slows_first_to_its_maximum_then_holds():
    budget = PollBudget(SETTINGS)
    done = [budget.adjust(HIGH, {1: 0, 2: 0}) for _ in range(5)]
    assert done == ["slower table"] * 3 + ["hold"] * 2  # 0.5 1 2 4, and 4 is the maximum
    assert budget.table_interval_s == 4.0
    assert budget.fast == {}


def test_above_the_upper_bound_the_table_slows_before_the_fast_connections():
    budget = PollBudget(SETTINGS)
    budget.fast = {1: 0.05}
    assert budget.adjust(HIGH, {1: 3}) == "slower table"
    assert budget.fast == {1: 0.05}  # a problem connection keeps its rate while it can
    assert budget.table_interval_s == 1.0


def test_at_the_slowest_table_the_fast_connections_with_fewest_problems_slow_first():
    budget = PollBudget(SETTINGS)
    budget.table_interval_s = 4.0
    budget.fast = {1: 0.5, 2: 0.5, 3: 0.2}
    problems = {1: 9, 2: 1, 3: 5}
    assert budget.adjust(HIGH, problems) == "slower connections"
    assert budget.fast == {1: 0.5, 2: 1.0, 3: 0.2}  # one a step: ceil(0.1 * 3)
    budget.adjust(HIGH, problems)
    assert budget.fast == {1: 0.5, 2: 2.0, 3: 0.2}
    budget.adjust(HIGH, problems)
    assert budget.fast == {1: 0.5, 3: 0.2}  # 2 reached the table's rate: no longer fast
    budget.adjust(HIGH, problems)
    assert budget.fast == {1: 0.5, 3: 0.4}  # now the fewest problems of those left


def test_below_the_lower_bound_the_connections_with_the_most_problems_speed_up():
    budget = PollBudget(SETTINGS)
    problems = {c: c for c in range(25)}  # connection c had c problem intervals; 0 had none
    assert budget.adjust(LOW, problems) == "faster connections"
    assert budget.fast == {22: 0.25, 23: 0.25, 24: 0.25}  # ceil(0.1 * 24 candidates)
    budget.adjust(LOW, problems)  # still candidates (0.25 > 0.05), still the first
    assert budget.fast == {22: 0.125, 23: 0.125, 24: 0.125}
    for _ in range(2):
        budget.adjust(LOW, problems)
    assert budget.fast == {22: 0.05, 23: 0.05, 24: 0.05}  # 0.0625, then the minimum
    assert budget.adjust(LOW, problems) == "faster connections"
    assert sorted(budget.fast) == [19, 20, 21, 22, 23, 24]  # the next most, now


def test_the_share_moves_at_least_one_connection():
    budget = PollBudget(SETTINGS)
    assert budget.adjust(LOW, {7: 1, 8: 0, 9: 2}) == "faster connections"
    assert budget.fast == {9: 0.25}  # ceil(0.1 * 2) = 1, the one with most problems


def test_below_the_lower_bound_a_slowed_table_and_the_problem_connections_speed_up():
    budget = PollBudget(SETTINGS)
    budget.table_interval_s = 4.0
    assert budget.adjust(LOW, {1: 2}) == "faster table and faster connections"
    assert (budget.table_interval_s, budget.fast) == (2.0, {1: 1.0})  # half the new table's
    assert budget.adjust(LOW, {1: 2}) == "faster table and faster connections"
    assert (budget.table_interval_s, budget.fast) == (1.0, {1: 0.5})  # never as slow as it
    assert budget.adjust(LOW, {1: 2}) == "faster table and faster connections"
    assert (budget.table_interval_s, budget.fast) == (0.5, {1: 0.25})
    while budget.adjust(LOW, {1: 2}) == "faster connections":
        pass
    assert budget.fast == {1: 0.05}
    assert budget.table_interval_s == 0.5
    assert budget.adjust(LOW, {1: 2}) == "hold"  # everything as fast as it may be


def test_no_problem_no_speed_up_and_inside_the_bounds_hold():
    budget = PollBudget(SETTINGS)
    assert budget.adjust(LOW, {1: 0, 2: 0}) == "hold"
    assert budget.adjust(INSIDE, {1: 5}) == "hold"
    assert budget.fast == {}
    assert budget.table_interval_s == 0.5


def test_fast_connections_that_closed_or_have_no_recent_problem_go_back_to_the_table():
    budget = PollBudget(SETTINGS)
    budget.fast = {1: 0.1, 2: 0.1, 3: 0.1}
    assert budget.adjust(INSIDE, {2: 1, 3: 0}) == "hold"  # 1 closed, 3's problems are old
    assert budget.fast == {2: 0.1}
    assert budget.interval_of(1) == budget.interval_of(3) == 0.5  # the table's


def test_intervals_never_leave_their_bounds():
    rng = np.random.default_rng(7)
    budget = PollBudget(SETTINGS)
    for _ in range(3000):
        live = rng.choice(40, size=30, replace=False).tolist()
        budget.adjust(float(rng.uniform(0, 10)), {c: int(rng.poisson(0.7)) for c in live})
        assert SETTINGS.table_interval_s <= budget.table_interval_s \
            <= SETTINGS.table_interval_max_s
        assert all(SETTINGS.fast_interval_min_s <= i < budget.table_interval_s
                   for i in budget.fast.values())
        assert set(budget.fast) <= set(live)


@pytest.mark.parametrize(("fields", "message"), [
    ({"cpu_lower_pct": 5.0, "cpu_upper_pct": 5.0},
     "cpu_lower_pct=5.0 must be below cpu_upper_pct=5.0"),
    ({"history_s": 0.0}, "history_s=0.0 must be positive and finite"),
    ({"cpu_upper_pct": math.inf}, "cpu_upper_pct=inf must be positive and finite"),
    ({"step": math.nan}, "step=nan must be positive and finite"),
    ({"fast_interval_min_s": 1.0}, "table_interval_s=0.5 must be between "
     "fast_interval_min_s=1.0 and table_interval_max_s=30.0"),
    ({"table_interval_max_s": 0.2}, "table_interval_s=0.5 must be between "
     "fast_interval_min_s=0.05 and table_interval_max_s=0.2"),
    ({"step": 1.0}, "step=1.0 must exceed 1"),
    ({"share": 1.5}, "share=1.5 must be at most 1"),
])
def test_settings_that_contradict_each_other_are_named(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        BudgetSettings(**fields)
    assert str(caught.value) == message  # the whole message: one field, its value, the rule


# ----------------------------------------------------------------------------- snap_profile


def _profile(**kw: object) -> SnapProfile:
    return SnapProfile(SnapThresholds(), history_s=kw.pop("history_s", 60.0), **kw)


def _endpoint(cookie: int) -> Endpoint:
    return Endpoint(socket.AF_INET, "10.0.0.1", 40000 + cookie, "10.0.0.2", 80, 1000 + cookie)


BASE = {1: {"total_retrans": 2, "data_segs_out": 100, "bytes_acked": 10_000},  # will lose
        2: {"data_segs_out": 50, "bytes_acked": 5_000},  # busy and healthy
        3: {"data_segs_out": 7}}  # idle


def _drain(profile: SnapProfile) -> tuple[Totals, list[ProblemRecord], int]:
    records, dropped = profile.drain_records()
    totals, _ = profile.drain_totals()
    return totals, records, dropped


def test_the_first_table_read_is_a_baseline_only():
    profile = _profile()
    profile.observe_table(_poll(T0, {1: {"total_retrans": 9, "total_rto": 3,
                                         "data_segs_out": 100}}), T0)
    totals, records, dropped = _drain(profile)
    assert len(totals) == 0
    assert records == []
    assert dropped == 0
    assert profile.recent_problems(T0) == {1: 0}


def test_a_retransmission_gets_a_full_record_a_healthy_busy_one_only_totals_an_idle_none():
    profile = _profile()
    profile.observe_table(_poll(T0, BASE), T0)
    later = {1: {"total_retrans": 3, "data_segs_out": 110, "bytes_acked": 12_000,
                 "snd_cwnd": 7, "bytes_sent": 99},
             2: {"data_segs_out": 60, "bytes_acked": 6_000}, 3: {"data_segs_out": 7}}
    profile.observe_table(_poll(T0 + 1, later), T0 + 1)
    totals, records, _ = _drain(profile)
    assert len(records) == 1
    record = records[0]
    assert record.cookie == 1
    assert (record.from_s, record.to_s) == (T0, T0 + 1)
    assert record.classes == ("fast_retransmit",)
    assert record.delayed_acks == 0.0
    assert record.calls is None  # untraced
    tcp = record.tcp  # Table 1: counters' differences, snapshots' values
    assert tcp["retrans"] == 1
    assert tcp["rto"] == 0
    assert tcp["data_segs_out"] == 10
    assert tcp["bytes_acked"] == 2000
    assert tcp["snd_cwnd"] == 7
    assert tcp["rtt_us"] == 200
    assert tcp["sndbuf"] == 46080
    assert all(isinstance(v, float) and math.isfinite(v) for v in tcp.values())
    assert set(tcp) == set(NAMES)
    # totals: the lossy one and the busy one, not the idle one
    assert sorted(totals.slot) == [1, 2]
    one, two = totals.slot[1], totals.slot[2]
    assert totals.seconds[one, SECONDS_COLUMN["fast_retransmit"]] == pytest.approx(1.0)
    assert totals.seconds[one, SECONDS_COLUMN["app_limited"]] == 0
    assert totals.seconds[two, SECONDS_COLUMN["app_limited"]] == pytest.approx(1.0)
    assert totals.seconds[two].sum() == pytest.approx(1.0)
    assert totals.sums[one, SUM_COLUMN["retrans"]] == 1
    assert totals.sums[two, SUM_COLUMN["bytes_acked"]] == 1000
    assert totals.sums[two, SUM_COLUMN["data_segs_out"]] == 10
    assert totals.problem_intervals[[one, two]].tolist() == [1, 0]
    assert totals.polls[[one, two]].tolist() == [1, 1]
    assert totals.first_s[[one, two]].tolist() == [T0, T0]
    assert totals.last_s[[one, two]].tolist() == [T0 + 1, T0 + 1]


def test_a_socket_born_between_reads_is_judged_from_the_read_before():
    profile = _profile()
    profile.observe_table(samples(empty_table(), T0), T0)
    profile.observe_table(_poll(T0 + 1, {8: {"total_rto": 1, "total_retrans": 1,
                                             "data_segs_out": 3}}), T0 + 1)
    _, records, _ = _drain(profile)
    assert [(r.cookie, r.from_s, list(r.classes)) for r in records] == [
        (8, T0, ["timeout"])]


def test_lookups_of_known_sockets_are_intervals_too_and_move_their_start():
    profile = _profile()
    profile.observe_table(_poll(T0, BASE), T0)
    profile.observe_lookup(_poll(T0 + 0.3, {
        1: {**BASE[1], "rwnd_limited": 2000, "data_segs_out": 101},
        77: {"total_retrans": 5, "data_segs_out": 1}}))  # unknown: ignored
    profile.observe_table(_poll(T0 + 1, {**BASE, 1: {**BASE[1], "rwnd_limited": 2000,
                                                     "data_segs_out": 105}}), T0 + 1)
    totals, records, _ = _drain(profile)
    assert [(r.cookie, r.from_s, r.to_s, list(r.classes)) for r in records] == [
        (1, T0, T0 + 0.3, ["receiver_window"])]
    assert records[0].tcp["rwnd_limited_us"] == 2000
    assert 77 not in totals.slot
    row = totals.slot[1]
    assert totals.polls[row] == 2  # the lookup's interval, then the table's from T0 + 0.3
    assert totals.sums[row, SUM_COLUMN["data_segs_out"]] == 5
    assert totals.seconds[row, SECONDS_COLUMN["receiver_window"]] == pytest.approx(0.3)
    assert totals.seconds[row, SECONDS_COLUMN["app_limited"]] == pytest.approx(0.7)


def test_lookups_before_any_table_read_are_ignored():
    profile = _profile()
    profile.observe_lookup(_poll(T0, {1: {"total_retrans": 1}}))
    assert len(profile.latest) == 0


def test_recent_problems_count_problem_intervals_within_the_history_only():
    profile = _profile(history_s=10.0)
    profile.observe_table(_poll(T0, BASE), T0)
    for k in range(1, 4):  # connection 1 retransmits in three reads, at T0+1..3
        profile.observe_table(_poll(T0 + k, {**BASE, 1: {**BASE[1],
                                                         "total_retrans": 2 + k}}), T0 + k)
    assert profile.recent_problems(T0 + 3) == {1: 3, 2: 0, 3: 0}
    assert profile.recent_problems(T0 + 12) == {1: 2, 2: 0, 3: 0}  # T0+1 is beyond 10 s
    assert profile.recent_problems(T0 + 13.5) == {1: 0, 2: 0, 3: 0}
    profile.observe_table(_poll(T0 + 14, {2: BASE[2]}), T0 + 14)
    assert profile.recent_problems(T0 + 14) == {2: 0}  # only live connections


def test_socket_calls_land_in_the_next_interval_of_their_socket():
    profile = _profile()
    profile.observe_table(_poll(T0, BASE), T0)
    profile.add_calls(1, writes=2, write_bytes=300, small_writes=2)
    profile.add_calls(1, writes=1, write_bytes=100, small_writes=1)
    profile.add_calls(2, writes=5, write_bytes=50_000, small_writes=0)
    later = {1: {**BASE[1], "total_retrans": 3, "data_segs_out": 104},
             2: {**BASE[2], "data_segs_out": 60}, 3: BASE[3]}
    profile.observe_table(_poll(T0 + 1, later), T0 + 1)
    totals, records, _ = _drain(profile)
    assert records[0].calls == {"writes": 3.0, "write_bytes": 400.0, "small_writes": 3.0}
    assert totals.sums[totals.slot[2], SUM_COLUMN["write_bytes"]] == 50_000
    assert totals.sums[totals.slot[1], SUM_COLUMN["writes"]] == 3
    # spent: the next interval has none
    later[1] = {**later[1], "total_retrans": 4, "data_segs_out": 105}
    profile.observe_table(_poll(T0 + 2, later), T0 + 2)
    totals, records, _ = _drain(profile)
    assert records[0].calls is None
    assert totals.sums[totals.slot[1], SUM_COLUMN["writes"]] == 0


def test_closed_sockets_keep_their_endpoints_until_the_totals_are_drained():
    profile = _profile()
    profile.endpoints.update({c: _endpoint(c) for c in BASE})
    profile.observe_table(_poll(T0, BASE), T0)
    profile.add_calls(2, writes=1, write_bytes=10, small_writes=1)
    profile.observe_table(_poll(T0 + 1, {1: BASE[1], 3: BASE[3]}), T0 + 1)  # 2 closed
    assert sorted(profile.endpoints) == [1, 2, 3]  # the next report still names it
    profile.drain_records()
    assert sorted(profile.endpoints) == [1, 2, 3]  # records may go out more often than sums
    profile.drain_totals()
    assert sorted(profile.endpoints) == [1, 3]
    assert 2 not in profile.calls
    profile.drain_totals()
    assert sorted(profile.endpoints) == [1, 3]


def test_a_socket_missing_from_a_read_is_kept_for_one_more_then_forgotten():
    profile = _profile()
    profile.observe_table(_poll(T0, BASE), T0)
    profile.observe_table(_poll(T0 + 1, {1: BASE[1], 3: BASE[3]}), T0 + 1)
    assert sorted(profile.latest.cookie.tolist()) == [1, 2, 3]  # 2's notice may yet come
    assert profile.recent_problems(T0 + 1) == {1: 0, 3: 0}  # but it is no live connection
    profile.observe_table(_poll(T0 + 2, {1: BASE[1], 3: BASE[3]}), T0 + 2)
    assert sorted(profile.latest.cookie.tolist()) == [1, 3]


def test_a_socket_a_dump_missed_is_judged_from_its_last_sample_when_seen_again():
    """Not as a new socket: its whole life's retransmissions are not this interval's."""
    profile = _profile()
    lifelong = {"total_retrans": 500, "data_segs_out": 10_000}
    profile.observe_table(_poll(T0, {1: lifelong, 2: BASE[2]}), T0)
    profile.observe_table(_poll(T0 + 1, {2: BASE[2]}), T0 + 1)  # a dump that missed 1
    profile.observe_table(_poll(T0 + 2, {1: {**lifelong, "data_segs_out": 10_005},
                                         2: BASE[2]}), T0 + 2)
    totals, records, _ = _drain(profile)
    assert records == []
    row = totals.slot[1]
    assert totals.sums[row, SUM_COLUMN["retrans"]] == 0
    assert totals.sums[row, SUM_COLUMN["data_segs_out"]] == 5
    assert totals.first_s[row] == T0


def test_a_closing_notice_ends_a_polled_sockets_last_interval():
    profile = _profile()
    profile.observe_table(_poll(T0, BASE), T0)
    final = _poll(T0 + 0.4, {1: {**BASE[1], "total_retrans": 4, "data_segs_out": 120}})
    profile.observe_closed(final, [1])
    assert sorted(profile.latest.cookie.tolist()) == [2, 3]
    assert 1 in profile.gone
    totals, records, _ = _drain(profile)
    assert [(r.cookie, r.from_s, r.to_s, list(r.classes)) for r in records] == [
        (1, T0, T0 + 0.4, ["fast_retransmit"])]
    assert records[0].tcp["retrans"] == 2
    assert totals.sums[totals.slot[1], SUM_COLUMN["data_segs_out"]] == 20


def test_short_sockets_never_polled_count_from_zero_under_their_logical_key():
    profile = _profile()
    profile.observe_table(_poll(T0, BASE), T0)
    link = 2**64 + 7  # the poller's key of a logical link
    short = _poll(T0 + 0.3, {10: {"data_segs_out": 3, "total_retrans": 0},
                             11: {"data_segs_out": 4, "total_retrans": 1}})
    profile.observe_closed(short, [link, link])
    records, _ = profile.drain_records()
    assert [(r.cookie, r.from_s) for r in records] == [(11, T0)]  # the record: the socket
    totals, sockets = profile.drain_totals()
    assert list(totals.slot) == [link]  # the sums: the link
    assert sockets == {link: 2}
    assert totals.sums[0, SUM_COLUMN["data_segs_out"]] == 7
    assert totals.sums[0, SUM_COLUMN["retrans"]] == 1
    assert totals.problem_intervals[0] == 1
    assert totals.polls[0] == 2


def test_a_notice_timed_before_the_sockets_last_poll_is_a_zero_length_interval():
    """The notice's time is the listening thread's, the poll's is taken after its reply: a
    socket freed in between seems to close before it was last seen."""
    profile = _profile()
    profile.observe_table(_poll(T0, BASE), T0)
    profile.observe_lookup(_poll(T0 + 0.5, {1: {**BASE[1], "data_segs_out": 101}}))
    profile.observe_closed(_poll(T0 + 0.499, {1: {**BASE[1], "data_segs_out": 101}}), [1])
    totals, records, _ = _drain(profile)
    row = totals.slot[1]
    assert totals.last_s[row] == T0 + 0.5
    assert totals.polls[row] == 1  # the lookup's interval; the notice's moved nothing
    assert records == []


def test_closing_notices_before_the_baseline_are_ignored():
    profile = _profile()
    profile.observe_closed(_poll(T0, {1: {"total_retrans": 3, "data_segs_out": 9}}), [1])
    totals, records, _ = _drain(profile)
    assert (len(totals), records) == (0, [])


def test_a_closing_notice_heard_after_the_read_that_missed_the_socket():
    """The kernel's notice comes from a work queue once the socket is freed: a read may
    already miss a socket whose notice has not come yet. Its last interval is still a
    difference from its last sample, not its whole life counted as a new socket's."""
    profile = _profile()
    lifelong = {"total_retrans": 500, "total_rto": 40, "data_segs_out": 10_000}
    profile.observe_table(_poll(T0, {1: lifelong, 2: BASE[2]}), T0)
    profile.observe_table(_poll(T0 + 1, {2: BASE[2]}), T0 + 1)  # 1 has left the table
    assert 1 in profile.latest.cookie.tolist()  # so the poller keys it by its cookie
    profile.observe_closed(_poll(T0 + 1.01, {1: {**lifelong, "data_segs_out": 10_002}}), [1])
    totals, records, _ = _drain(profile)
    assert records == []
    assert totals.sums[totals.slot[1], SUM_COLUMN["retrans"]] == 0
    assert totals.sums[totals.slot[1], SUM_COLUMN["data_segs_out"]] == 2
    assert 1 not in profile.latest.cookie.tolist()


def test_records_beyond_the_maximum_are_dropped_and_counted():
    profile = _profile(max_records=2)
    lossy = {c: {"total_retrans": 0, "data_segs_out": 0} for c in range(1, 6)}
    profile.observe_table(_poll(T0, lossy), T0)
    profile.observe_table(_poll(T0 + 1, {c: {"total_retrans": 1, "data_segs_out": 1}
                                         for c in lossy}), T0 + 1)
    totals, records, dropped = _drain(profile)
    assert len(records) == 2
    assert dropped == 3
    assert len(totals) == 5  # the sums keep every connection
    assert totals.problem_intervals.tolist() == [1] * 5
    _, records, dropped = _drain(profile)
    assert (records, dropped) == ([], 0)


# ----------------------------------------------------------------------------- snap_poller


class _Now:
    """A settable clock (or CPU-seconds counter)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self) -> float:
        return self.value


class _FakeDiag:
    """sock_diag in memory: `sockets` (cookie -> tcp_info fields) answer dumps and lookups;
    `tick` runs before each answer (the connections' traffic)."""

    def __init__(self, sockets: dict[int, dict[str, int]]) -> None:
        self.sockets = sockets
        self.tick = lambda: None
        self.dumps: list[float] = []
        self.looked_up: list[int] = []
        self.clock: _Now | None = None

    def _all(self) -> SocketTable:
        return _table(*(_message(c, {**HEALTHY, **i}) for c, i in self.sockets.items()))

    def dump(self, family: int, **_: object) -> SocketTable:
        if family != socket.AF_INET:
            raise OSError(97, "Address family not supported by protocol")  # no IPv6
        self.tick()
        self.dumps.append(self.clock() if self.clock else 0.0)
        return self._all()

    def lookup(self, family: int, ids: list[bytes], **_: object) -> SocketTable:
        assert family == socket.AF_INET
        self.tick()
        table = self._all()
        rows = np.array([sockid(d) in ids for d in table.diag], dtype=bool)
        self.looked_up += table.diag["cookie"][rows].tolist()
        return table[rows]

    def close(self) -> None:
        pass


class _Notices:
    """The kernel's closing notices as `ClosedSockets.drain_tables` gives them."""

    def __init__(self) -> None:
        self.heard: list[tuple[float, SocketTable]] = []

    def add(self, when_s: float, cookie: int, info: dict[str, int]) -> None:
        self.heard.append((when_s, _table(_message(cookie, {**HEALTHY, **info}))))

    def __call__(self) -> list[tuple[float, SocketTable]]:
        out, self.heard = self.heard, []
        return out


def _poller(monkeypatch: pytest.MonkeyPatch, diag: _FakeDiag, clock: _Now, cpu: _Now,
            closed: _Notices | None = None, **settings: float) -> snap_poller.SnapPoller:
    monkeypatch.setattr(snap_poller, "SockDiag", lambda: diag)
    diag.clock = clock
    owners = {1000 + c: Process(4000 + c, f"app{c}") for c in diag.sockets}
    return snap_poller.SnapPoller(BudgetSettings(**settings), SnapThresholds(), clock=clock,
                                  cpu_s=cpu, owners=lambda: dict(owners),
                                  closed=closed or _Notices(), seed=3)


def _run(poller: snap_poller.SnapPoller, clock: _Now, cpu: _Now, until_s: float,
         cpu_share: float) -> None:
    """Step the poller at each time it asks for, and last at `until_s`, the CPU advancing
    `cpu_share` of the time."""
    while True:
        next_s = poller.step()
        assert next_s >= clock.value
        if clock.value >= until_s:
            return
        step = min(next_s, until_s) - clock.value
        clock.value += step
        cpu.value += cpu_share * step


def test_a_cpu_share_above_the_upper_bound_slows_the_table_reads(monkeypatch):
    diag = _FakeDiag({1: dict(BASE[1]), 2: dict(BASE[2])})
    clock, cpu = _Now(T0), _Now(0.0)
    poller = _poller(monkeypatch, diag, clock, cpu, table_interval_s=0.5,
                     table_interval_max_s=8.0)
    _run(poller, clock, cpu, T0 + 0.99, cpu_share=0.10)  # 10 % of a core: above 5 %
    assert poller.budget.table_interval_s == 0.5  # no control step within the first second
    _run(poller, clock, cpu, T0 + 1.5, cpu_share=0.10)
    assert poller.budget.table_interval_s == 1.0
    _run(poller, clock, cpu, T0 + 60, cpu_share=0.10)
    assert poller.budget.table_interval_s == 8.0  # doubled at each step, up to the maximum
    early = sum(1 for t in diag.dumps if t < T0 + 1)
    late = sum(1 for t in diag.dumps if t >= T0 + 30) / 30
    assert early >= 1
    assert late < 0.5  # reads per second: about 1/8, not the base's 2
    assert poller.budget.fast == {}
    event = poller.report()
    assert event.table_interval_s == 8.0
    assert event.cpu_pct == pytest.approx(10.0)
    assert event.sockets == 2


def test_a_cpu_share_below_the_lower_bound_polls_the_problem_connection_faster(monkeypatch):
    diag = _FakeDiag({1: dict(BASE[1]), 2: dict(BASE[2])})

    def traffic() -> None:  # 1 retransmits on every poll; both send
        diag.sockets[1]["total_retrans"] += 1
        for s in diag.sockets.values():
            s["data_segs_out"] += 1

    diag.tick = traffic
    clock, cpu = _Now(T0), _Now(0.0)
    poller = _poller(monkeypatch, diag, clock, cpu)
    seen = set()
    while clock.value < T0 + 10:
        _run(poller, clock, cpu, clock.value + 0.1, cpu_share=0.0)
        assert set(poller.budget.fast) <= {1}
        seen |= set(poller.budget.fast.values())
    assert seen == {0.25, 0.125, 0.0625, 0.05}  # the defaults' 0.5 s halved, to the minimum
    assert poller.budget.table_interval_s == 0.5
    assert set(diag.looked_up) == {1}
    assert len(diag.looked_up) > 2 * len(diag.dumps)  # a lookup every ~50 ms, table ~500
    event = poller.report()
    assert event.fast_connections == 1
    by_port = {c.local.port: c for c in event.connections}
    lossy, healthy = by_port[40001], by_port[40002]
    assert lossy.pid == 4001
    assert lossy.process == "app1"
    assert lossy.problem_intervals == lossy.polls
    assert lossy.polls > healthy.polls
    assert healthy.problem_intervals == 0
    assert healthy.seconds["app_limited"] == pytest.approx(healthy.last_s - healthy.first_s)
    assert lossy.seconds["fast_retransmit"] == pytest.approx(lossy.last_s - lossy.first_s)
    assert lossy.sums["retrans"] == len(diag.dumps) + len(diag.looked_up) - 1  # all but the
    # baseline's
    assert {r.local.port for r in event.records} == {40001}
    assert all(r.classes == ("fast_retransmit",) for r in event.records)
    assert len(event.records) == lossy.polls
    assert_allclose(event.cpu_pct, 0.0, atol=1e-9)


def test_a_connection_whose_notice_comes_after_the_read_that_missed_it(monkeypatch):
    """The poller keys a closing notice by the connection's cookie when it was polled: so a
    notice late for the read that no longer saw the socket is the connection's last interval,
    not a short socket's whole life (which would count its 500 retransmissions again)."""
    lifelong = {"total_retrans": 500, "data_segs_out": 10_000}
    diag = _FakeDiag({1: dict(lifelong), 2: dict(BASE[2])})
    clock, cpu, notices = _Now(T0), _Now(0.0), _Notices()
    poller = _poller(monkeypatch, diag, clock, cpu, notices)
    poller.step()
    clock.value += 1
    del diag.sockets[1]  # closed: gone from the table ...
    poller.read_table()
    notices.add(clock.value + 0.01, 1, {**lifelong, "total_retrans": 501,
                                        "data_segs_out": 10_003})  # ... its notice after
    clock.value += 0.02
    event = poller.report()
    mine = [c for c in event.connections if c.local.port == 40001]
    assert len(mine) == 1
    assert mine[0].sockets == 1  # the connection itself, not a logical link of short ones
    assert mine[0].sums["retrans"] == 1
    assert mine[0].sums["data_segs_out"] == 3
    assert [r.tcp["retrans"] for r in event.records] == [1]


def test_a_socket_freed_while_the_table_is_read_does_not_stop_the_poller(monkeypatch):
    """The IPv4 dump holds socket 1; it is freed, and its notice heard, while the IPv6 dump
    runs; the samples are timed after both dumps, so after the notice."""
    diag = _FakeDiag({1: dict(BASE[1]), 2: dict(BASE[2])})
    clock, cpu, notices = _Now(T0), _Now(0.0), _Notices()
    poller = _poller(monkeypatch, diag, clock, cpu, notices)
    poller.step()
    ipv4_dump = diag.dump

    def dump(family: int, **kw: object) -> SocketTable:
        if family == socket.AF_INET:
            return ipv4_dump(family, **kw)
        if 1 in diag.sockets:  # the IPv6 dump takes a while; 1 closes meanwhile
            clock.value += 0.002
            notices.add(clock.value - 0.001, 1, BASE[1])
            del diag.sockets[1]
        raise OSError(97, "Address family not supported by protocol")

    monkeypatch.setattr(diag, "dump", dump)
    clock.value += 1
    poller.read_table()
    clock.value += 1
    poller.read_table()  # the notice is matched against the sample timed after it
    event = poller.report()
    assert {c.local.port for c in event.connections} <= {40001, 40002}


def test_a_connection_opened_soon_after_another_still_gets_its_owner(monkeypatch):
    diag = _FakeDiag({1: dict(BASE[1])})
    clock, cpu = _Now(T0), _Now(0.0)
    poller = _poller(monkeypatch, diag, clock, cpu)
    owners = {1001: Process(4001, "app1")}
    poller.owners = lambda: dict(owners)
    poller.step()
    diag.sockets[2] = dict(BASE[2])  # opened later, by another process
    owners[1002] = Process(4002, "app2")
    _run(poller, clock, cpu, T0 + 30, cpu_share=0.03)
    assert poller.profile.endpoints[2].pid == 4002


def test_a_wall_clock_stepping_back_does_not_stop_the_poller(monkeypatch):
    diag = _FakeDiag({1: dict(BASE[1])})
    clock, cpu = _Now(T0), _Now(0.0)
    poller = _poller(monkeypatch, diag, clock, cpu)
    _run(poller, clock, cpu, T0 + 3, cpu_share=0.0)

    def step_back() -> None:  # NTP steps the clock back by a second, once, during a dump
        clock.value -= 1.0
        diag.tick = lambda: None

    diag.tick = step_back
    _run(poller, clock, cpu, T0 + 6, cpu_share=0.0)


def test_a_rejected_profile_request_leaves_the_running_profiling_alone(monkeypatch):
    monkeypatch.setattr(snap_poller, "SockDiag", lambda: _FakeDiag({}))
    out = io.StringIO()
    profiler = Profiler(LineWriter(out), tracing=False)
    profiler.start(Profile(report_interval_s=3600.0))
    try:
        with pytest.raises(ValueError, match="cpu_lower_pct"):
            profiler.start(Profile(cpu_lower_pct=5.0, cpu_upper_pct=5.0))
        assert profiler.poller is not None
        assert out.getvalue() == ""  # no last report: it was not stopped
    finally:
        profiler.stop()


class _LossyTracer:
    def losses(self) -> str:
        return "12 calls"


def test_the_snap_line_keeps_its_fields_order_and_names_lost_calls_only_when_some_were(
        monkeypatch):
    diag = _FakeDiag({1: dict(BASE[1]), 2: dict(BASE[2])})

    def traffic() -> None:
        diag.sockets[1]["total_retrans"] += 1
        diag.sockets[2]["data_segs_out"] += 1

    diag.tick = traffic
    clock, cpu, out = _Now(T0), _Now(0.0), io.StringIO()
    profiler = Profiler(LineWriter(out), tracing=False)
    profiler.poller = poller = _poller(monkeypatch, diag, clock, cpu)
    _run(poller, clock, cpu, T0 + 2, cpu_share=0.0)
    profiler._report(last=True)
    profiler.tracer = _LossyTracer()  # type: ignore[assignment]
    _run(poller, clock, cpu, T0 + 4, cpu_share=0.0)
    profiler._report(last=True)
    profiler.tracer = None
    quiet, lossy = (json.loads(line) for line in out.getvalue().splitlines())
    fields = ["event", "from", "to", "cpu_pct", "table_interval_s", "fast_connections",
              "sockets", "connections", "records", "dropped_records"]
    assert list(quiet) == fields
    assert list(lossy) == [*fields, "socket_calls_lost"]
    assert lossy["socket_calls_lost"] == "12 calls"
    assert list(quiet["connections"][0]) == [
        "local", "remote", "pid", "process", "first_s", "last_s", "polls", "seconds", "sums",
        "delayed_acks", "problem_intervals", "sockets"]
    assert quiet["connections"][0]["local"] == {"addr": "10.0.0.1", "port": 40001}
    assert list(quiet["records"][0]) == ["local", "remote", "from", "to", "classes",
                                         "delayed_acks", "tcp", "calls"]
    assert quiet["records"][0]["calls"] is None  # untraced: null, not left out


def test_a_connection_reset_while_its_fd_stays_open_is_not_counted_twice():
    """Reset: out of every dump for reads on end, its fd still open; its closing notice comes
    when the process closes it, and counts only what it did since its last sample."""
    profile = _profile()
    profile.observe_table(_poll(T0, {1: {"bytes_acked": 1_000_000, "data_segs_out": 700}}), T0)
    for k in (1, 2, 3):
        profile.observe_table(_poll(T0 + k, {}), T0 + k)
    closed = _poll(T0 + 4, {1: {"bytes_acked": 1_100_000, "data_segs_out": 770}})
    profile.observe_closed(closed, [1])
    totals, sockets = profile.drain_totals()
    assert sockets == {}
    row = totals.slot[1]
    assert totals.sums[row][SUMS.index("bytes_acked")] == 100_000


class _LossyNotices:
    """ClosedSockets as the profiler reads it: how many times notices were lost so far."""

    def __init__(self) -> None:
        self.total = 0

    def losses(self) -> int:
        return self.total


def test_a_snap_line_says_the_closing_notices_lost_since_the_line_before(monkeypatch):
    diag = _FakeDiag({1: dict(BASE[1]), 2: dict(BASE[2])})
    clock, cpu, out = _Now(T0), _Now(0.0), io.StringIO()
    notices = _LossyNotices()
    profiler = Profiler(LineWriter(out), tracing=False)
    profiler.closing = notices  # type: ignore[assignment]
    profiler.poller = poller = _poller(monkeypatch, diag, clock, cpu)
    notices.total = 3  # before this profiling reported anything: lost before too
    profiler.losses_told = 1  # what start() read when it began
    for until, total in ((T0 + 2, 3), (T0 + 4, 3), (T0 + 6, 7)):
        notices.total = total
        _run(poller, clock, cpu, until, cpu_share=0.0)
        profiler._report(last=True)
    told = [json.loads(line).get("notice_losses") for line in out.getvalue().splitlines()]
    assert told == [2, None, 4]

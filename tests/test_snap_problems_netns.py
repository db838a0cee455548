"""SNAP's §4.1 validation on the testbed (root): every Table 2 class made at once, each on a
connection of its own (testbed.snap_workload), the profiler on both ends (the run:
testbed.snap_validation, shared with benchmarks/snap_classes.py); each class is found on its
connection, at the time it was made, and not on the healthy one.

The workload's programs run under SCHED_FIFO and the injector with --realtime: a late read or a
late ACK on the shared machine is a real receiver problem the classifier rightly reports, but
not one this workload made. What kernel 6.18 showed, and the second classes it legitimately
adds (each allowance below is checked against its own evidence, never granted blindly):
- timeout: Linux's tail-loss probe (RFC 8985) goes out before the first RTO of each cut, so each
  end retransmits once more than it times out per cut (15 retransmissions, 12 RTOs, 3 cuts;
  TcpExtTCPLossProbes 3 per namespace): fast_retransmit in the classifier's terms. And the RTT
  sample that ends a cut's recovery may span the peer's backoff (srtt 36-180 ms after the
  first cut, 0.1 ms before), so the §4.2 delayed-ACK estimate, which takes srtt for the
  interval's mean RTT, counts delayed ACKs there: a classifier artefact, allowed only there.
- fast_retransmit: 2% random loss also drops a retransmission now and then
  (TcpExtTCPLostRetransmit 12-19 in a run); RACK recovers most, an RTO ends 0-2 of ~330.
- send_buffer, receiver_window: nothing is lost, yet on a loaded machine a late ACK (injector
  jitter at slow start, a slow read) now and then lets a probe go out: one retransmission in a
  few runs, each reported back as a duplicate (tcpi_dsack_dups 1 of total_retrans 1), which
  the classifier, with no fast-retransmit counter on Linux, calls fast_retransmit.
- receiver_window: Linux holds the ACK of data that would shrink the window until the reader
  next reads, so the sender's srtt is about the reader's pace (Little's law: window / rate). A
  reader of 1 KiB every 10 ms made srtt 19 ms and delayed_ack in most intervals; reading 1 KiB
  every 2 ms keeps srtt near 4 ms and the window at one MSS (one packet out, so a probe waits
  200 ms more), and the class alone.
- delayed_ack: only the connection's first request is quick (quickack at the start, 0.1-1.6
  ms); every later one waits ~44 ms (the 40 ms delayed-ACK minimum and the timer's tick).
"""

from __future__ import annotations

import pytest

from linkgrad.protocol.snap import Profile
from linkgrad.snap.classify import DEFAULTS
from linkgrad.snap.classify import PROBLEMS as CLASSES
from testbed.snap_validation import CLOSING_S, ENDS, Observed, Run, run_workload
from testbed.snap_workload import PROBLEMS, WorkloadSettings, port
from tests.marks import IPTABLES, needs_tool

pytestmark = [*IPTABLES, needs_tool("chrt")]

SETTINGS = WorkloadSettings()
PROFILED_S = SETTINGS.seconds - CLOSING_S
PROFILE = Profile(report_interval_s=5.0, table_interval_s=0.2,
                  max_queuing_delay_s=DEFAULTS.max_queuing_delay_s,
                  delayed_ack_timeout_s=DEFAULTS.delayed_ack_timeout_s,
                  socket_calls=False, seed=11)
RECOVERY_S = 1.5  # after a cut of 2 s the backoff retransmits at ~3.2 s: the last RTO is late
SRTT_SETTLE_S = 1.0  # how long after a recovery srtt may still hold its long RTT sample
LINUX_DELACK_MIN_S = 0.040


@pytest.fixture(scope="module")
def run() -> Run:
    return run_workload(SETTINGS, {"test": PROFILE})


@pytest.fixture(scope="module")
def observed(run: Run) -> Observed:
    return run.observed["test"]


def test_each_class_is_found_on_its_connection(observed: Observed) -> None:
    for problem in PROBLEMS:
        for end in problem.seen_at:
            seen = observed.seen[(problem.kind, end)]
            assert seen.seconds[problem.expected] > 0, (problem.kind, end, str(seen))
            if problem.expected in CLASSES:  # a record is kept for a problem interval only
                assert seen.records_of(problem.expected), (problem.kind, end, str(seen))
    assert observed.strangers == []


def test_the_healthy_connection_has_no_problem(observed: Observed) -> None:
    for end in ENDS:
        seen = observed.seen[("healthy", end)]
        assert seen.sums["data_segs_out"] > 1000, str(seen)  # it was profiled while it ran
        assert seen.problems() == set(), str(seen)
        assert seen.records == []
        assert seen.seconds["app_limited"] > PROFILED_S / 2, str(seen)


# Beyond its own class, what a connection may show: each allowance is checked by a test below.
ALLOWED = {"timeout": {"fast_retransmit", "delayed_ack"},
           "fast_retransmit": {"timeout", "receiver_window"},
           "send_buffer": {"fast_retransmit"}, "receiver_window": {"fast_retransmit"}}


def test_no_other_problem_on_any_connection(observed: Observed) -> None:
    for problem in PROBLEMS:
        for end in ENDS:
            seen = observed.seen[(problem.kind, end)]
            extra = seen.problems() - {problem.expected}
            assert extra <= ALLOWED.get(problem.kind, set()), (problem.kind, end, str(seen))


def test_the_lossy_connection_times_out_only_when_a_retransmission_is_lost(
        observed: Observed) -> None:
    """RACK and SACK recover ~2% random loss on a steady flow; a lost retransmission may end in
    an RTO, so an RTO is allowed only as a small share of the retransmissions."""
    seen = observed.seen[("fast_retransmit", "server")]
    assert seen.sums["retrans"] >= 50, str(seen)
    assert seen.sums["rto"] <= 0.05 * seen.sums["retrans"], str(seen)


def test_the_lossy_connection_is_receiver_window_limited_only_for_moments(
        observed: Observed) -> None:
    """While a hole is repaired the receiver holds the data after it in its out-of-order queue,
    which takes from its window; a reader slowed by a busy machine adds to it. Seen as
    rwnd_limited now and then (0.23 s of 13 s once in CI): allowed as a small share only."""
    seen = observed.seen[("fast_retransmit", "server")]
    assert seen.seconds.get("receiver_window", 0.0) <= 0.1 * PROFILED_S, str(seen)


@pytest.mark.parametrize("kind", ["send_buffer", "receiver_window"])
def test_retransmissions_without_loss_are_spurious(run: Run, observed: Observed,
                                                   kind: str) -> None:
    """Nothing is dropped on these connections; a retransmission is a probe sent while an ACK
    was late (a slow read, the injector's delay on a busy machine), and the receiver reports it
    as a duplicate (D-SACK). The classifier, without a fast-retransmit counter on Linux, calls
    it fast_retransmit; allowed only when every retransmission came back as a D-SACK."""
    server = run.servers_tcp_info[port(kind, SETTINGS)]
    seen = observed.seen[(kind, "server")]
    assert server["total_rto"] == 0, server
    if "fast_retransmit" in seen.problems():
        assert server["dsack_dups"] >= server["total_retrans"] > 0, (server, str(seen))


def test_retransmissions_beyond_the_rtos_of_a_cut_are_its_loss_probes(
        run: Run, observed: Observed) -> None:
    """At most one tail-loss probe per end per cut: fast_retransmit on the timeout connection
    is that probe, not a misread RTO."""
    cuts = len(run.cuts())
    for end in ENDS:
        seen = observed.seen[("timeout", end)]
        assert seen.sums["rto"] >= cuts, str(seen)  # every cut outlasted several RTOs
        assert 0 <= seen.sums["retrans"] - seen.sums["rto"] <= cuts, str(seen)


def test_timeouts_fall_in_the_cuts(run: Run, observed: Observed) -> None:
    """The right time (§4): every timeout interval meets a cut (or its backoff); every cut made a
    stalled request the client saw, and no request stalled outside the cuts."""
    cuts = run.cuts()

    def meets_a_cut(start: float, end: float, late_s: float) -> bool:
        return any(start <= to_s + late_s and end >= from_s for from_s, to_s in cuts)

    for end in ENDS:
        for r in observed.seen[("timeout", end)].records_of("timeout"):
            assert meets_a_cut(r.from_s, r.to_s, RECOVERY_S), (end, r.from_s - run.start_s)
    slow = run.stalls()
    assert all(meets_a_cut(start_s, end_s, 0.0) for start_s, end_s in slow), slow
    assert len(slow) >= len(cuts), slow


def test_delayed_acks_on_the_timeout_connection_follow_a_recovery(
        run: Run, observed: Observed) -> None:
    """The classifier artefact of the module docstring, allowed only where it comes from: an
    interval holding the end of a stall (the client's slow request got its reply) or starting
    within SRTT_SETTLE_S after it."""
    recoveries = [end_s for _, end_s in run.stalls()]
    for end in ENDS:
        for r in observed.seen[("timeout", end)].records_of("delayed_ack"):
            assert any(r.from_s <= t + SRTT_SETTLE_S and r.to_s >= t for t in recoveries), (
                end, r.from_s - run.start_s, r.to_s - run.start_s,
                [t - run.start_s for t in recoveries])


def test_the_delayed_ack_count_against_the_requests(run: Run, observed: Observed) -> None:
    """§4.2 with the requests as the packet trace: every request but the first waited for one
    delayed ACK (the client's latencies), two segments each.

    Without an RTT tracer the profiler counts, in an interval Table 2's rule flags,
    data_segs_out·(srtt − min_rtt − queuing_delay_s) / DelayedACKTimeout (queuing_delay_s 0
    and DelayedACKTimeout 42 ms by default since e0d5c4a; the paper charged MaxQueuingDelay to
    each sample, which took ~40% off here). A request's two RTT samples are the delayed ACK x1
    (~all its latency) and the reply x2 (~0.1 ms); the smoothed RTT a poll sees, after x2
    almost always, settles at (7·x1 + 8·x2)/15. So SNAP reports ~0.97 per request at a 44 ms
    latency: an error (d_t − d_s)/d_t ≈ 0.03 against the paper's 0.006."""
    done = run.label("client", "delayed_ack", "done")[0]
    assert done.first_ms is not None
    assert done.median_ms is not None
    assert sum(x < LINUX_DELACK_MIN_S * 1e3 for x in done.first_ms) <= 1, done  # quickack
    latency_s = done.median_ms / 1e3
    assert latency_s >= LINUX_DELACK_MIN_S, done
    seen = observed.seen[("delayed_ack", "client")]
    segments = seen.sums["data_segs_out"]
    min_rtt_s = min(r.tcp["min_rtt_us"] for r in seen.records) / 1e6
    srtt_s = 7 / 15 * latency_s
    expected = segments * (srtt_s - min_rtt_s - DEFAULTS.queuing_delay_s) \
        / DEFAULTS.delayed_ack_timeout_s
    # the model: 0.985-1.065 of it in 4 runs
    assert seen.delayed_acks == pytest.approx(expected, rel=0.1), str(seen)
    # against the truth, one a request (§4.2's d_t): no longer a bound from below since
    # e0d5c4a fitted the count to Linux (0.963-1.010 of the requests in 4 runs)
    assert seen.delayed_acks == pytest.approx(segments / 2, rel=0.1), str(seen)

"""SNAP's per-socket classifier (§2.2, Table 2), vectorised over (socket, interval) rows.

Each row may hold several of the five problems at once; a row holding none is "sender
application limited". The Linux counter behind each rule, and its fallback on older kernels,
follows notes/linux-tcp-stats-and-perfsonar.md Part A ("Suggested SNAP classifier for Linux").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import ArrayLike

from linkgrad.snap.intervals import IntervalStats

__all__ = [
    "CLASS_NAMES",
    "DEFAULTS",
    "PROBLEMS",
    "TCP_CA_LOSS",
    "TCP_RTO_MIN_MS",
    "Classes",
    "SnapThresholds",
    "classify",
    "delayed_ack_count",
]

# The five problems of Table 2, in the order of §2.3 footnote 4 (p1..p5).
PROBLEMS: tuple[str, ...] = ("send_buffer", "fast_retransmit", "timeout", "delayed_ack",
                             "receiver_window")
CLASS_NAMES: tuple[str, ...] = (*PROBLEMS, "app_limited")
TCP_CA_LOSS = 4  # tcpi_ca_state while recovering from an RTO
TCP_RTO_MIN_MS = 200  # Linux's least RTO: data unacknowledged this long waits for one


@dataclass(frozen=True)
class SnapThresholds:
    """The operator-set constants of Table 2 and §4.2, with Linux defaults.

    max_queuing_delay_s: the most queuing a healthy network adds to an RTT (SNAP's
        MaxQueuingDelay, 10 ms in §4.2): Table 2's rule, a mean RTT beyond the path's minimum
        plus this is a delayed ACK.
    delayed_ack_timeout_s: the RTT a delayed ACK adds (SNAP's DelayedACKTimeout), to count
        them (§4.2). Linux fires it at 40 ms (TCP_DELACK_MIN) plus up to a jiffy: measured
        here 41.9-47.9 ms, mean 44.1 at HZ=250 (benchmarks/snap_delayed_ack.py); 42 ms is
        the middle of HZ=1000's 40-41 and HZ=250's 44. (The paper's 180 ms of Windows' 200
        took a margin the other way; with Linux's short timer that margin is the error.)
    queuing_delay_s: the queuing charged to every RTT sample when counting (§4.2 charges
        MaxQueuingDelay). With Linux's 40 ms timer, charging 10 ms to each of the two samples
        a write-write-read request has undercounts by 40% (measured); the count is made only
        in intervals the rule flags, where the RTT beyond the minimum is the delayed ACKs'.
    small_write_fraction: a write smaller than this fraction of the MSS is small (Nagle-prone,
        §2.2 stage 1); 1.0 means a write that does not fill one segment.
    """

    max_queuing_delay_s: float = 0.010
    delayed_ack_timeout_s: float = 0.042
    small_write_fraction: float = 1.0
    queuing_delay_s: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (math.isfinite(value) and (value > 0 or f.name == "queuing_delay_s")):
                raise ValueError(f"{f.name}={value!r} must be positive and finite")
            if value < 0:
                raise ValueError(f"{f.name}={value!r} must not be negative")


DEFAULTS = SnapThresholds()


@dataclass(frozen=True, eq=False)
class Classes:
    """Table 2 classes per row (boolean arrays), plus notes that are no class.

    small_writes: the mean write of the interval was small (Nagle-prone). Kept apart from
        app_limited because the paper reads it next to other classes too (timeouts with small
        writes, §6.1 and footnote 8; delayed ACK with small writes, §6.2); the Nagle case of
        §6.3 is `app_limited & small_writes`.
    idle: no data sent or received in the interval (it is also app_limited).
    delayed_acks: the estimated number of delayed ACKs in the interval (§4.2); NaN where
        neither the RTT sums nor the smoothed RTT and the minimum RTT are known.
    """

    send_buffer: np.ndarray
    fast_retransmit: np.ndarray
    timeout: np.ndarray
    delayed_ack: np.ndarray
    receiver_window: np.ndarray
    app_limited: np.ndarray
    small_writes: np.ndarray
    idle: np.ndarray
    delayed_acks: np.ndarray

    def __len__(self) -> int:
        return len(self.app_limited)

    def problem_matrix(self) -> np.ndarray:
        """(rows, 5) booleans, one column per problem in PROBLEMS order."""
        return np.column_stack([getattr(self, name) for name in PROBLEMS])

    def names(self, row: int) -> tuple[str, ...]:
        """The classes `row` holds, in CLASS_NAMES order."""
        return tuple(name for name in CLASS_NAMES if getattr(self, name)[row])

    def as_rows(self) -> list[tuple[str, ...]]:
        """The classes of every row, in CLASS_NAMES order (for tables and logs)."""
        held = np.column_stack([getattr(self, name) for name in CLASS_NAMES])
        return [tuple(CLASS_NAMES[j] for j in np.flatnonzero(r)) for r in held]

    def select(self, mask: ArrayLike) -> Classes:
        """The rows at a boolean mask or integer positions."""
        index = np.asarray(mask)
        return Classes(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


def classify(stats: IntervalStats, thresholds: SnapThresholds = DEFAULTS) -> Classes:
    """Table 2 for every row of `stats`; several classes may hold at once (§2.2)."""
    timeout = _timeout(stats)
    delayed_acks = delayed_ack_count(stats, thresholds)
    problems = {
        "send_buffer": _send_buffer(stats),
        "fast_retransmit": _fast_retransmit(stats, timeout),
        "timeout": timeout,
        # NaN (unknown) compares False; an RTO's first RTT sample spans the backoff: no
        # delayed ACK is told from it
        "delayed_ack": (delayed_acks > 0) & ~timeout,
        "receiver_window": stats.rwnd_limited_us > 0,
    }
    app_limited = ~np.logical_or.reduce(list(problems.values()))
    return Classes(**problems, app_limited=app_limited,
                   small_writes=_small_writes(stats, thresholds), idle=_idle(stats),
                   delayed_acks=delayed_acks)


def _known(column: np.ndarray) -> np.ndarray:
    return ~np.isnan(column)


def _send_buffer(s: IntervalStats) -> np.ndarray:
    """diff(sndbuf_limited) > 0, the kernel's own detector of a writer blocked on a full send
    buffer (4.10). Before 4.10: the snapshot wmem_queued ≥ sndbuf, SNAP's CurAppWQueue ≈
    MaxAppWQueue, which sees the buffer full only if a poll lands while it is (Poisson
    sampling estimates the fraction of time, §2.2)."""
    full_at_poll = s.wmem_queued >= s.sndbuf  # False where either is NaN
    return np.where(_known(s.sndbuf_limited_us), s.sndbuf_limited_us > 0, full_at_poll)


def _timeout_fallback(s: IntervalStats) -> np.ndarray:
    # Before 6.7 only state at the poll: an RTO recovered before the poll is missed.
    return (s.retransmits_now > 0) | (s.ca_state == TCP_CA_LOSS) | _stalled(s)


def _stalled(s: IntervalStats) -> np.ndarray:
    """At the poll, data in flight and no ACK for as long as Linux's least RTO: the
    connection waits on an RTO (the time before the first one fires, a tail-loss probe's
    included); neither fast recovery (its duplicate ACKs keep coming) nor a delayed ACK
    (40 ms) looks like this."""
    # last_ack_recv alone is no wait: a request sent on a connection idle for a second has
    # its last ACK a second old the moment it leaves. The last (re)transmission is unacked
    # (ACKs are cumulative), so it has waited last_data_sent at least: 200 ms of that, or a
    # retransmission in the interval (a probe, sent only once data waited a PTO, which moves
    # last_data_sent) with no ACK since. Unknown (a record from before the column) is not held
    # against it.
    # An RTT sample means an ACK came once: a SYN in flight (no ACK ever: last_ack_recv then
    # counts from boot) is a handshake under way, its timeouts counted by total_rto.
    lost = s.retrans - np.nan_to_num(s.dsack_dups)
    waited = ~(s.last_data_sent_ms < TCP_RTO_MIN_MS) | (lost > 0)
    return ((s.unacked > 0) & (s.last_ack_recv_ms >= TCP_RTO_MIN_MS) & waited
            & (s.rtt_us > 0))


def _timeout(s: IntervalStats) -> np.ndarray:
    """diff(total_rto) > 0 (6.7; counts every RTO), or still in an RTO's recovery at the poll
    (tcpi_retransmits > 0 or ca_state == Loss): the waits between backed-off RTOs fire no
    RTO of their own, and are the timeout's time all the same. Before 6.7 the state at the
    poll alone: it misses RTOs recovered between polls."""
    return np.where(_known(s.rto), s.rto > 0, False) | _timeout_fallback(s)


def _fast_retransmit(s: IntervalStats, timeout: np.ndarray) -> np.ndarray:
    """Linux has no fast-retransmit counter. Every RTO retransmits at least one segment, so
    retransmissions beyond the RTOs are fast retransmits (or recovery). A tail-loss probe
    (sent ~2 RTTs into a silence, before the RTO) lands there too: where the interval also
    has an RTO, one retransmission more is taken as that probe, part of the timeout (measured:
    every cut of the validation workload sends one), as are the retransmissions of an
    interval that ends stalled (`_stalled`). Retransmissions the peer reports (DSACK,
    4.19) to have been duplicates lost nothing (a probe sent while a delayed ACK was on its
    way): they are left out. Without total_rto: retransmissions in an interval not in timeout
    at the poll."""
    lost = s.retrans - np.nan_to_num(s.dsack_dups)
    with_rto = (lost > s.rto + (s.rto > 0)) & ~_stalled(s)
    without_rto = (lost > 0) & ~_timeout_fallback(s)
    return np.where(_known(s.rto), with_rto, without_rto)


def delayed_ack_count(s: IntervalStats, thresholds: SnapThresholds = DEFAULTS) -> np.ndarray:
    """Delayed ACKs per interval (§4.2), counted where Table 2's rule flags them, else 0.

    rule:  diff(SumRTT) > diff(SampleRTT)·(min_rtt + MaxQueuingDelay)
    count: (diff(SumRTT) − diff(SampleRTT)·(min_rtt + queuing)) / DelayedACKTimeout

    The paper has no min_rtt: in its data centre an RTT is all queuing; on a WAN or an
    emulated delay the propagation delay must come off first. Its count charges
    MaxQueuingDelay to every sample; here `queuing_delay_s` (default 0, see SnapThresholds).
    Without an RTT tracer, SampleRTT ≈ data_segs_out and SumRTT ≈ srtt·data_segs_out: the
    smoothed RTT stands in for the interval's mean (measured ~7% under it for write-write-read,
    where each delayed sample is followed at once by a short one); an interval sending nothing
    counts 0. NaN where min_rtt (4.6) or both sources are unknown.
    """
    traced = _known(s.rtt_sum_us) & _known(s.rtt_samples) & (s.rtt_samples > 0)
    samples = np.where(traced, s.rtt_samples, s.data_segs_out)
    sum_us = np.where(traced, s.rtt_sum_us, s.rtt_us * s.data_segs_out)
    # in µs, where the kernel's integers are exact: a sum right at the limit is no delay
    flagged = sum_us > samples * (s.min_rtt_us + thresholds.max_queuing_delay_s * 1e6)
    excess_us = sum_us - samples * (s.min_rtt_us + thresholds.queuing_delay_s * 1e6)
    count = np.where(flagged, excess_us / (thresholds.delayed_ack_timeout_s * 1e6), 0.0)
    return np.where(np.isnan(sum_us - samples * s.min_rtt_us), np.nan, count)


def _small_writes(s: IntervalStats, thresholds: SnapThresholds) -> np.ndarray:
    """The interval's mean write was under small_write_fraction·MSS (needs socket tracing).

    The mean rather than the sniffer's `small_writes` count, whose cut is fixed at one MSS:
    a few small tails of large responses are no Nagle pattern, a stream of small ones is."""
    wrote = s.writes > 0
    mean_write = np.divide(s.write_bytes, s.writes, out=np.full(len(s), np.nan), where=wrote)
    return wrote & (mean_write < thresholds.small_write_fraction * s.snd_mss)


def _idle(s: IntervalStats) -> np.ndarray:
    """No data either way; segment counts (4.6), else byte counts (4.1). Unknown: not idle."""
    sent = np.where(_known(s.data_segs_out), s.data_segs_out, s.bytes_acked)
    received = np.where(_known(s.data_segs_in), s.data_segs_in, s.bytes_received)
    return (sent == 0) & (received == 0)

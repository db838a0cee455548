"""Which messages into a node could have caused each message out of it (WAP5 §5.1, steps 1–2
before the weighting): the pairs (child, parent) with the parent received at the child's
sender at most x seconds before the child left, both times on that node's own clock.

Where the sending node was not traced (nil send time), §5.1 uses the other end's clock and
"only allow[s] causality back to the same node": a message B→A with B untraced may only be
caused by an A→B message, A's send time before B→A's receive time. Both cases are one
vectorised pass: every message gets an *outgoing key* (its sender, and the peer when the
sender is nil) and every message an *incoming key* (its receiver, and the sender when the
receiver is nil); a child's candidates are the messages with its key in the window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linkgrad.paths.messages import Trace

__all__ = [
    "MAX_TRACE_S",
    "NS",
    "Candidates",
    "TraceTooLong",
    "candidates",
    "departure_and_arrival",
    "latest_parent_delay",
]

NS = 1_000_000_000
# the trace-relative time goes in the low bits of an int64 sort key, the node key above it
_TIME_BITS = 44  # 2**44 ns ≈ 4.9 hours of trace
MAX_TRACE_S = (1 << _TIME_BITS) / NS


@dataclass(frozen=True, eq=False)
class Candidates:
    """Candidate links, grouped by child (children in trace order, parents latest first).

    child, parent: message indices; delay_s: the child's departure minus the parent's
    arrival, on one clock. start: per message, where its candidates begin in these arrays
    (length n + 1, CSR-style): message i's are [start[i], start[i+1]).
    out_time_s: per message, its departure on the clock its candidates were timed with.
    """

    child: np.ndarray
    parent: np.ndarray
    delay_s: np.ndarray
    start: np.ndarray
    out_time_s: np.ndarray

    def __len__(self) -> int:
        return len(self.child)

    def count(self) -> np.ndarray:
        return np.diff(self.start)


class TraceTooLong(ValueError):
    """A trace longer than linking can index (its times in a 2**44 ns range)."""


def departure_and_arrival(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                 np.ndarray]:
    """Per message: when it left and arrived on the clock used for linking, and the keys.

    out_key: (sender node, 0) when the sender was traced, else (sender, 1 + receiver node).
    in_key: (receiver node, 0) when the receiver was traced, else (receiver, 1 + sender).
    Untraced ends fall back to the other end's timestamp.
    """
    m = trace.messages
    n_nodes = len(trace.nodes)
    nil_send, nil_recv = np.isnan(m.send_s), np.isnan(m.recv_s)
    out_t = np.where(nil_send, m.recv_s, m.send_s)
    in_t = np.where(nil_recv, m.send_s, m.recv_s)
    out_key = m.src.astype(np.int64) * (n_nodes + 1) + np.where(nil_send, m.dst + 1, 0)
    in_key = m.dst.astype(np.int64) * (n_nodes + 1) + np.where(nil_recv, m.src + 1, 0)
    return out_t, in_t, out_key, in_key


@dataclass(frozen=True, eq=False)
class _Index:
    """Every message's arrival, sorted by (receiving key, time), as int64 codes."""

    sorted_code: np.ndarray
    order: np.ndarray
    out_key: np.ndarray
    out_ns: np.ndarray
    out_t: np.ndarray
    in_t: np.ndarray


def _index(trace: Trace, window_s: float) -> _Index:
    out_t, in_t, out_key, in_key = departure_and_arrival(trace)
    t0 = float(np.nanmin(np.concatenate([out_t, in_t])))
    span = float(np.nanmax(np.concatenate([out_t, in_t]))) - t0 + window_s
    if span >= MAX_TRACE_S:  # a day of tcpdump, or one host's clock hours off
        raise TraceTooLong(f"the trace spans {span:,.0f} s, more than one linking takes "
                           f"({MAX_TRACE_S:,.0f} s, {MAX_TRACE_S / 3600:.1f} h): split it "
                           "(editcap -A/-B for a capture), or check each host's clock")
    # one int64 per event: node key in the high bits, nanoseconds since t0 in the low bits
    in_code = (in_key << _TIME_BITS) + np.round((in_t - t0) * NS).astype(np.int64)
    order = np.argsort(in_code, kind="stable")
    out_ns = np.round((out_t - t0) * NS).astype(np.int64)
    return _Index(in_code[order], order, out_key, out_ns, out_t, in_t)


def _bounds(ix: _Index, window_s: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per child, the [lo, hi) positions of its candidates in the sorted arrivals."""
    hi_code = (ix.out_key << _TIME_BITS) + ix.out_ns
    window_ns = np.round(np.asarray(window_s) * NS).astype(np.int64)
    lo_code = (ix.out_key << _TIME_BITS) + np.maximum(ix.out_ns - window_ns, 0)
    return (np.searchsorted(ix.sorted_code, lo_code, side="left"),
            np.searchsorted(ix.sorted_code, hi_code, side="right"))


def latest_parent_delay(trace: Trace, window_s: float) -> np.ndarray:
    """Per message, the delay since the latest message into its sender within `window_s`
    (not itself), NaN where there is none: WAP5 §5.1 step 1's sample."""
    n = len(trace.messages)
    if n == 0:
        return np.empty(0)
    ix = _index(trace, window_s)
    lo, hi = _bounds(ix, window_s)
    out = np.full(n, np.nan)
    has = hi > lo
    latest = ix.order[np.maximum(hi - 1, 0)]
    own = has & (latest == np.arange(n))  # never its own cause: the one before, if any
    latest = np.where(own, ix.order[np.maximum(hi - 2, 0)], latest)
    has &= ~own | (hi - 1 > lo)
    out[has] = ix.out_t[has] - ix.in_t[latest[has]]
    return out


def candidates(trace: Trace, window_s: float | np.ndarray) -> Candidates:
    """Every (child, parent) with the parent into the child's sender within `window_s` (WAP5's
    x: "longer than the longest real delay in the trace"; or one window per message) before
    the child left."""
    if not np.all(np.asarray(window_s) >= 0):
        raise ValueError("the windows must not be negative")
    n = len(trace.messages)
    if n == 0:
        out_t = departure_and_arrival(trace)[0]
        empty = np.empty(0, dtype=np.int64)
        return Candidates(empty, empty, np.empty(0), np.zeros(1, dtype=np.int64), out_t)
    ix = _index(trace, float(np.max(window_s)))
    lo, hi = _bounds(ix, window_s)
    counts = hi - lo
    start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=start[1:])
    child = np.repeat(np.arange(n, dtype=np.int64), counts)
    # positions hi-1, hi-2, ..., lo of each child's run: latest parent first
    offset = np.arange(start[-1], dtype=np.int64) - np.repeat(start[:-1], counts)
    parent = ix.order[np.repeat(hi - 1, counts) - offset]
    keep = parent != child  # a message is never its own cause
    if not keep.all():
        child, parent = child[keep], parent[keep]
        start = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(child, minlength=n), out=start[1:])
    return Candidates(child, parent, ix.out_t[child] - ix.in_t[parent], start, ix.out_t)

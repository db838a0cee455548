"""From sock_diag tables to SNAP's per-interval statistics (SNAP §2.1, Table 1): pure.

A poll gives each TCP connection's counters and snapshots (`Samples`); two polls of the same
socket, matched by its kernel cookie (unique for the kernel's life, unlike an inode or a
4-tuple), give an interval: counters as differences, snapshots as the later value. A socket
first seen after the previous poll is new: its counters started at zero at its creation, so
its first interval runs from that poll, and a short connection's losses are not lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sniffer import tcp_info
from sniffer.sockdiag import SocketTable

# IntervalStats column -> tcp_info field: cumulative counters, differenced per interval
COUNTERS = {"sndbuf_limited_us": "sndbuf_limited", "rwnd_limited_us": "rwnd_limited",
            "busy_us": "busy_time", "retrans": "total_retrans", "rto": "total_rto",
            "data_segs_out": "data_segs_out", "data_segs_in": "data_segs_in",
            "bytes_acked": "bytes_acked", "bytes_received": "bytes_received",
            "bytes_sent": "bytes_sent", "bytes_retrans": "bytes_retrans",
            "dsack_dups": "dsack_dups"}
# ... and instantaneous values, taken at the poll
SNAPSHOTS = {"rtt_us": "rtt", "min_rtt_us": "min_rtt", "notsent_bytes": "notsent_bytes",
             "ca_state": "ca_state", "retransmits_now": "retransmits", "backoff": "backoff",
             "snd_mss": "snd_mss", "snd_wnd": "snd_wnd", "rcv_space": "rcv_space",
             "snd_cwnd": "snd_cwnd", "unacked": "unacked", "state": "state",
             "last_ack_recv_ms": "last_ack_recv", "last_data_sent_ms": "last_data_sent"}
SKMEM = {"sndbuf": 3, "wmem_queued": 5}  # SK_MEMINFO word indices
NAMES = (*COUNTERS, *SNAPSHOTS, *SKMEM)
_COUNTER_COLUMNS = np.arange(len(COUNTERS))


@dataclass(frozen=True, eq=False)
class Samples:
    """Polls of some TCP sockets: `values[i, j]` is socket i's NAMES[j] (NaN: this kernel
    does not give it), taken at `time_s[i]`; `cookie` names each socket."""

    time_s: np.ndarray
    cookie: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.cookie)

    def column(self, name: str) -> np.ndarray:
        return self.values[:, NAMES.index(name)]


def samples(table: SocketTable, time_s: float) -> Samples:
    """The statistics of `table`'s sockets that carry tcp_info."""
    rows = table[table.has_info]
    values = np.full((len(rows), len(NAMES)), np.nan)
    for j, field in enumerate((*COUNTERS.values(), *SNAPSHOTS.values())):
        if tcp_info.has(rows.info, field):
            values[:, j] = rows.info[field]
    for j, word in enumerate(SKMEM.values(), start=len(COUNTERS) + len(SNAPSHOTS)):
        known = rows.skmem[:, word] >= 0
        values[known, j] = rows.skmem[known, word]
    return Samples(np.full(len(rows), time_s), rows.diag["cookie"].astype(np.uint64), values)


def merged(kept: Samples, newer: Samples) -> Samples:
    """`kept` with the sockets of `newer` replaced or added: the latest sample of each."""
    stale = np.isin(kept.cookie, newer.cookie)
    return Samples(np.concatenate([kept.time_s[~stale], newer.time_s]),
                   np.concatenate([kept.cookie[~stale], newer.cookie]),
                   np.concatenate([kept.values[~stale], newer.values]))


def empty_samples() -> Samples:
    return Samples(np.empty(0), np.empty(0, dtype=np.uint64), np.empty((0, len(NAMES))))


_SIZES = {name: int(kind[1]) for name, kind, _, _ in tcp_info.LAYOUT}
# 2**bits of each counter's field: a difference is taken modulo it (u16 total_rto wraps)
WRAP = np.array([2.0 ** (8 * _SIZES[field]) for field in COUNTERS.values()])


@dataclass(frozen=True, eq=False)
class Intervals:
    """A row per socket of a poll: its interval since its previous sample, the counters'
    differences and the new snapshots in NAMES order (`values`)."""

    cookie: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    values: np.ndarray
    new: np.ndarray  # no earlier sample: counted from zero since the previous poll

    def __len__(self) -> int:
        return len(self.cookie)

    def columns(self) -> dict[str, np.ndarray]:
        out = {name: self.values[:, j] for j, name in enumerate(NAMES)}
        return {**out, "start_s": self.start_s, "end_s": self.end_s}


def intervals(earlier: Samples, later: Samples, since_s: float) -> Intervals:
    """Each socket of `later` since its sample in `earlier`; a socket not in `earlier` is new
    and counts from zero from `since_s` (the poll before, when it did not exist yet)."""
    order = np.argsort(earlier.cookie)
    known = earlier.cookie[order]
    at = np.minimum(np.searchsorted(known, later.cookie), max(len(known) - 1, 0))
    matched = (known[at] == later.cookie) if len(known) else np.zeros(len(later), bool)
    before = np.zeros_like(later.values[:, _COUNTER_COLUMNS])
    before[matched] = earlier.values[order[at[matched]]][:, _COUNTER_COLUMNS]
    values = later.values.copy()
    values[:, _COUNTER_COLUMNS] = _differences(later.values[:, _COUNTER_COLUMNS], before)
    start = np.full(len(later), since_s)
    start[matched] = earlier.time_s[order[at[matched]]]
    # a sample timed after a dump may postdate a closing notice heard during it
    return Intervals(later.cookie, np.minimum(start, later.time_s), later.time_s, values,
                     ~matched)


def _differences(after: np.ndarray, before: np.ndarray) -> np.ndarray:
    """after - before per counter. A counter that went down wrapped if it was past half its
    range (a u16 total_rto after 65,535 RTOs), else was reset (tcp_disconnect() zeroes a
    socket's statistics and keeps its cookie): then it counts from zero."""
    diff = after - before
    down = diff < 0
    return np.where(down, np.where(before > WRAP / 2, diff + WRAP, after), diff)

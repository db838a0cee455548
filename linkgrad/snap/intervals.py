"""The classifier's input: one row per (socket, polling interval), stored by column (SNAP §2.1).

SNAP polls the Table 1 statistics and works on the difference between two polls for the
counters and on the value at the poll for the snapshots. `IntervalStats` holds those rows as
equal-length float64 columns, so ten thousand sockets classify in one vectorised pass. NaN
means "this kernel (or this host) does not give it"; the classifier falls back accordingly.
Which `tcp_info` field stands for which SNAP statistic: notes/linux-tcp-stats-and-perfsonar.md
Part A, table A1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["COLUMNS", "IntervalStats"]


@dataclass(frozen=True, eq=False)  # eq on arrays would be ambiguous
class IntervalStats:
    """Per (socket, interval) statistics; every column a read-only 1-D float64 array."""

    # the interval, unix seconds
    start_s: np.ndarray
    end_s: np.ndarray
    # deltas over the interval (counters at the end minus counters at the start)
    sndbuf_limited_us: np.ndarray  # tcpi_sndbuf_limited (4.10)
    rwnd_limited_us: np.ndarray  # tcpi_rwnd_limited (4.10)
    busy_us: np.ndarray  # tcpi_busy_time (4.10)
    retrans: np.ndarray  # tcpi_total_retrans
    dsack_dups: np.ndarray  # tcpi_dsack_dups (4.19): retransmissions the peer had already
    rto: np.ndarray  # tcpi_total_rto (6.7)
    data_segs_out: np.ndarray  # 4.6
    data_segs_in: np.ndarray  # 4.6
    bytes_acked: np.ndarray  # 4.1
    bytes_received: np.ndarray  # 4.1
    rtt_sum_us: np.ndarray  # SNAP's SumRTT, from an RTT tracer (BPF_SOCK_OPS_RTT_CB)
    rtt_samples: np.ndarray  # SNAP's SampleRTT, from the same tracer
    # snapshots at the end of the interval
    rtt_us: np.ndarray  # tcpi_rtt, the smoothed RTT
    min_rtt_us: np.ndarray  # tcpi_min_rtt (4.6)
    notsent_bytes: np.ndarray  # tcpi_notsent_bytes (4.6), RFC 4898 CurAppWQueue
    wmem_queued: np.ndarray  # SK_MEMINFO_WMEM_QUEUED
    sndbuf: np.ndarray  # SK_MEMINFO_SNDBUF
    ca_state: np.ndarray  # tcpi_ca_state: 0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss
    retransmits_now: np.ndarray  # tcpi_retransmits: consecutive unrecovered RTOs
    backoff: np.ndarray  # tcpi_backoff
    snd_mss: np.ndarray
    snd_wnd: np.ndarray  # tcpi_snd_wnd (5.4), the peer's window
    unacked: np.ndarray  # tcpi_unacked: segments in flight
    last_ack_recv_ms: np.ndarray  # tcpi_last_ack_recv: since the last ACK came
    last_data_sent_ms: np.ndarray  # tcpi_last_data_sent: since the last (re)transmission
    rcv_space: np.ndarray
    # socket calls in the interval (SNAP's socket-call log), from tracing
    writes: np.ndarray
    write_bytes: np.ndarray
    small_writes: np.ndarray  # writes smaller than the MSS

    def __post_init__(self) -> None:
        lengths = {}
        for name in COLUMNS:
            column = np.array(getattr(self, name), dtype=np.float64)  # a copy: ours to freeze
            if column.ndim != 1:
                raise ValueError(f"column {name!r} must be 1-D, got shape {column.shape}")
            column.setflags(write=False)
            object.__setattr__(self, name, column)
            lengths[name] = len(column)
        _check_equal_lengths(lengths)
        backwards = np.flatnonzero(self.end_s < self.start_s)  # NaN compares False: unknown
        if len(backwards):
            raise ValueError(f"end_s < start_s at rows {backwards[:5].tolist()}"
                             f"{' …' if len(backwards) > 5 else ''}")

    @classmethod
    def from_columns(cls, columns: Mapping[str, ArrayLike],
                     n_rows: int | None = None) -> IntervalStats:
        """Build from column name -> values; a column not given is all NaN (not available).

        `n_rows` is needed only when no column is given. A name that is no column is an error:
        a misspelled column must not turn silently into "unknown".
        """
        unknown = sorted(set(columns) - set(COLUMNS))
        if unknown:
            raise ValueError(f"unknown columns {unknown}; the columns are {list(COLUMNS)}")
        if n_rows is None:
            if not columns:
                raise ValueError("no column given: pass n_rows")
            n_rows = len(np.atleast_1d(next(iter(columns.values()))))
        missing = np.full(n_rows, np.nan)
        return cls(**{name: columns.get(name, missing) for name in COLUMNS})

    def __len__(self) -> int:
        return len(self.start_s)

    def to_columns(self) -> dict[str, np.ndarray]:
        """Column name -> array (read-only views, no copy)."""
        return {name: getattr(self, name) for name in COLUMNS}

    def select(self, mask: ArrayLike) -> IntervalStats:
        """The rows where a boolean `mask` (one per row) holds, or at integer positions."""
        index = np.asarray(mask)
        if index.dtype == bool and index.shape != (len(self),):
            raise ValueError(f"mask has shape {index.shape}, expected ({len(self)},)")
        if index.dtype != bool and not np.issubdtype(index.dtype, np.integer) and index.size:
            raise TypeError(f"mask must be boolean or integer, got dtype {index.dtype}")
        return IntervalStats(**{name: column[index] for name, column in self.to_columns().items()})


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(IntervalStats))


def _check_equal_lengths(lengths: Mapping[str, int]) -> None:
    first, n = next(iter(lengths.items()))
    wrong = [f"{name} has {length}" for name, length in lengths.items() if length != n]
    if wrong:
        raise ValueError(f"columns differ in length: {first} has {n} rows but "
                         + ", ".join(wrong))

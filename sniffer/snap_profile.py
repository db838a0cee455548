"""SNAP on one host, without I/O: polls in, classified intervals and a report out (§2.1-2.2).

Each poll (a table read of every socket, or a lookup of some) becomes intervals against each
socket's previous sample, classified by Table 2 (`linkgrad.snap.classify`, the same pure code
the coordinator uses offline). Log volume as SNAP's: a full record (the classes, the Table 1
statistics, the socket calls) only for an interval with a problem; otherwise per-connection
sums, reported only for connections that moved data or had a problem since the last report.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from linkgrad.snap.classify import CLASS_NAMES, Classes, SnapThresholds, classify
from linkgrad.snap.intervals import COLUMNS, IntervalStats
from sniffer.snap_sample import NAMES, Intervals, Samples, empty_samples, intervals, merged

MAX_DROPPED = 100_000  # last samples kept of sockets gone from the dumps, awaiting a notice
SUMS = ("bytes_acked", "bytes_received", "data_segs_out", "data_segs_in", "retrans", "rto")
CALLS = ("writes", "write_bytes", "small_writes")  # socket-call sums, from tracing


@dataclass(frozen=True)
class Endpoint:
    """One end of a TCP connection as this host sees it, with its owner where known."""

    family: int
    local_addr: str
    local_port: int
    remote_addr: str
    remote_port: int
    inode: int
    pid: int | None = None
    process: str | None = None

    @property
    def four_tuple(self) -> tuple[str, int, str, int]:
        return (self.local_addr, self.local_port, self.remote_addr, self.remote_port)


class Totals:
    """Connections' sums since the last report, a row (slot) per connection: column stores,
    so ten thousand connections add up in a few numpy calls a poll."""

    def __init__(self) -> None:
        self.slot: dict[int, int] = {}
        self.first_s = np.empty(0)
        self.last_s = np.empty(0)
        self.polls = np.empty(0)
        self.seconds = np.empty((0, len(CLASS_NAMES)))
        self.sums = np.empty((0, len(SUMS) + len(CALLS)))
        self.delayed_acks = np.empty(0)
        self.problem_intervals = np.empty(0)

    def __len__(self) -> int:
        return len(self.slot)

    def slots(self, keys: list[int], start_s: np.ndarray) -> np.ndarray:
        """The rows of `keys`, new connections given one (first seen at `start_s`)."""
        for c in keys:
            self.slot.setdefault(c, len(self.slot))
        grow = len(self.slot) - len(self.first_s)
        if grow:
            self.first_s = np.concatenate([self.first_s, np.full(grow, np.inf)])
            self.last_s = np.concatenate([self.last_s, np.zeros(grow)])
            for name in ("polls", "delayed_acks", "problem_intervals"):
                setattr(self, name, np.concatenate([getattr(self, name), np.zeros(grow)]))
            self.seconds = np.vstack([self.seconds, np.zeros((grow, self.seconds.shape[1]))])
            self.sums = np.vstack([self.sums, np.zeros((grow, self.sums.shape[1]))])
        rows = np.fromiter((self.slot[c] for c in keys), dtype=np.intp, count=len(keys))
        np.minimum.at(self.first_s, rows, start_s)
        return rows


@dataclass(frozen=True)
class ProblemRecord:
    """An interval with a problem, kept by its socket's cookie until a report names its ends."""

    cookie: int
    from_s: float
    to_s: float
    classes: tuple[str, ...]
    delayed_acks: float | None
    tcp: dict[str, float]  # the Table 1 statistics: counters' differences, snapshots' values
    calls: dict[str, float] | None  # writes, write_bytes, small_writes; None: untraced


class SnapProfile:
    """Samples, totals and problem records of the connections of one host."""

    def __init__(self, thresholds: SnapThresholds, history_s: float,
                 max_records: int = 10_000) -> None:
        self.thresholds, self.history_s, self.max_records = thresholds, history_s, max_records
        self.latest = empty_samples()
        self.last_table_s: float | None = None
        self.endpoints: dict[int, Endpoint] = {}
        self.totals = Totals()
        self.records: list[ProblemRecord] = []
        self.dropped_records = 0
        self.calls: dict[int, np.ndarray] = {}  # socket calls since the connection's last poll
        # (time, cookies with a problem, each one's seconds with it): the budget's memory
        self.recent: deque[tuple[float, np.ndarray, np.ndarray]] = deque()
        self.gone: set[int] = set()  # closed since the last drain
        self.vanished = np.empty(0, dtype=np.uint64)  # in `latest`, missing from the last read
        self.dropped = empty_samples()  # last samples of sockets gone from the dumps
        self.sockets: dict[int, int] = {}  # totals key of closed short sockets -> how many

    def observe_table(self, polled: Samples, now_s: float) -> None:
        """A read of every socket: the first only sets the baseline (what a socket did before
        the profiler started is not its to judge); sockets missing from it are gone.

        A missing socket's last sample is kept until the next read all the same: its closing
        notice may come after the read (the kernel sends it from a work queue once the socket
        is freed, which waits for its last queued packets, while it leaves the table when it
        closes), and a dump may miss a socket whose hash chain changed between two of its
        datagrams. Either is then an interval from that sample, not the socket's whole life
        counted again as a new one's."""
        if self.last_table_s is None:
            self.latest = polled
        else:
            self._classify(intervals(self.latest, polled, since_s=self.last_table_s))
            self.latest = merged(self.latest, polled)
            missing = ~np.isin(self.latest.cookie, polled.cookie)
            twice = missing & np.isin(self.latest.cookie, self.vanished)
            # kept aside: a connection reset while its process holds the fd is in no dump,
            # and its closing notice may come much later; it is no new socket then
            self.dropped = _rows(merged(self.dropped, _rows(self.latest, twice)),
                                 slice(-MAX_DROPPED, None))
            self.latest = _rows(self.latest, ~twice)
            self.vanished = self.latest.cookie[missing[~twice]]
        self.last_table_s = now_s
        # closed: their ends are kept until the next report names them
        self.gone |= set(self.endpoints) - set(polled.cookie.tolist())

    def observe_closed(self, polled: Samples, totals_keys: list[int]) -> None:
        """Sockets the kernel freed, with their final counters: the rest of a polled one's
        life, or the whole of one never polled (counted from zero since the last table read).
        Their sums go under `totals_keys`: a polled socket's own cookie; a short one's logical
        link, so an application opening a connection per request (PHP to MySQL) is one entry
        of many sockets, not thousands of entries."""
        if self.last_table_s is None or not len(polled):
            return  # before the baseline: not ours to judge
        iv = intervals(merged(self.dropped, self.latest), polled, since_s=self.last_table_s)
        self.dropped = _rows(self.dropped, ~np.isin(self.dropped.cookie, polled.cookie))
        # a notice is timed by the thread that heard it, a poll after its reply came: a socket
        # freed in between was last seen "after" it closed. It closed at about that poll.
        iv = Intervals(iv.cookie, iv.start_s, np.maximum(iv.end_s, iv.start_s), iv.values,
                       iv.new)
        self._classify(iv, totals_keys)
        self.latest = _rows(self.latest, ~np.isin(self.latest.cookie, polled.cookie))
        self.gone |= set(polled.cookie.tolist())
        for key, cookie in zip(totals_keys, polled.cookie.tolist(), strict=True):
            if key != cookie:
                self.sockets[key] = self.sockets.get(key, 0) + 1

    def observe_lookup(self, polled: Samples) -> None:
        """A lookup of some known sockets (the fast ones)."""
        known = polled.cookie[np.isin(polled.cookie, self.latest.cookie)]
        polled = _rows(polled, np.isin(polled.cookie, known))
        if len(polled):
            self._classify(intervals(self.latest, polled, since_s=0.0))
            self.latest = merged(self.latest, polled)

    def add_calls(self, cookie: int, writes: int, write_bytes: int, small_writes: int) -> None:
        got = self.calls.setdefault(cookie, np.zeros(len(CALLS)))
        got += (writes, write_bytes, small_writes)

    def _classify(self, iv: Intervals, totals_keys: list[int] | None = None) -> None:
        columns = {name: v for name, v in iv.columns().items() if name in COLUMNS}
        calls = np.full((len(iv), len(CALLS)), np.nan)
        if self.calls:
            for i, cookie in enumerate(iv.cookie.tolist()):
                if (got := self.calls.pop(cookie, None)) is not None:
                    calls[i] = got
        columns.update({name: calls[:, j] for j, name in enumerate(CALLS)})
        stats = IntervalStats.from_columns(columns)
        classes = classify(stats, self.thresholds)
        self._total(iv, stats, classes,
                    iv.cookie.tolist() if totals_keys is None else totals_keys)
        problem = classes.problem_matrix().any(axis=1)
        if problem.any():
            self.recent.append((float(iv.end_s.max()), iv.cookie[problem],
                                (iv.end_s - iv.start_s)[problem]))
            self._record(iv, stats, classes, np.flatnonzero(problem))

    def _total(self, iv: Intervals, stats: IntervalStats, classes: Classes,
               keys: list[int]) -> None:
        sums = np.column_stack([np.nan_to_num(getattr(stats, n)) for n in (*SUMS, *CALLS)])
        problem = classes.problem_matrix().any(axis=1)
        # NaN: not moved; socket calls count too (the tracer's summary of a call arrives up to
        # a flush interval after the data moved)
        segments = np.where(np.isnan(stats.data_segs_out + stats.data_segs_in),  # before 4.6:
                            stats.bytes_acked + stats.bytes_received,  # bytes (4.1) tell
                            stats.data_segs_out + stats.data_segs_in)
        moved = (segments > 0) | problem | (stats.writes > 0)
        if not moved.any():
            return
        t = self.totals
        rows = t.slots([k for k, m in zip(keys, moved.tolist(), strict=True) if m],
                       iv.start_s[moved])
        held = np.column_stack([getattr(classes, n) for n in CLASS_NAMES])[moved]
        duration = (iv.end_s - iv.start_s)[moved]
        np.maximum.at(t.last_s, rows, iv.end_s[moved])
        np.add.at(t.polls, rows, 1)
        np.add.at(t.seconds, rows, held * duration[:, None])
        np.add.at(t.sums, rows, sums[moved])
        np.add.at(t.delayed_acks, rows, np.nan_to_num(classes.delayed_acks[moved]))
        np.add.at(t.problem_intervals, rows, problem[moved])

    def _record(self, iv: Intervals, stats: IntervalStats, classes: Classes,
                rows: Iterable[int]) -> None:
        for i in rows:
            if len(self.records) >= self.max_records:
                self.dropped_records += 1
                continue
            values = {name: float(v) for name, v in zip(NAMES, iv.values[i], strict=True)
                      if not np.isnan(v)}
            calls = {name: float(getattr(stats, name)[i]) for name in CALLS
                     if not np.isnan(getattr(stats, name)[i])}
            self.records.append(ProblemRecord(
                cookie=int(iv.cookie[i]), from_s=float(iv.start_s[i]), to_s=float(iv.end_s[i]),
                classes=tuple(classes.names(i)), delayed_acks=_finite(classes.delayed_acks[i]),
                tcp=values, calls=calls or None))

    def recent_problems(self, now_s: float) -> dict[int, float]:
        """Seconds with a problem per live connection within T_history (the budget's input:
        seconds, not intervals, which a faster-polled connection has more of)."""
        while self.recent and self.recent[0][0] < now_s - self.history_s:
            self.recent.popleft()
        live = self.latest.cookie[~np.isin(self.latest.cookie, self.vanished)]
        seconds = dict.fromkeys(live.tolist(), 0.0)
        for _, cookies, durations in self.recent:
            for c, d in zip(cookies.tolist(), durations.tolist(), strict=True):
                if c in seconds:
                    seconds[c] += d
        return seconds

    def drain_records(self) -> tuple[list[ProblemRecord], int]:
        """The problem records since the last call, and how many were dropped."""
        out = (self.records, self.dropped_records)
        self.records, self.dropped_records = [], 0
        return out

    def drain_totals(self) -> tuple[Totals, dict[int, int]]:
        """The connections' sums since the last call, and how many closed short sockets each
        aggregated one holds; the closed connections are forgotten now (their records are
        drained at least as often)."""
        out = (self.totals, self.sockets)
        self.totals, self.sockets = Totals(), {}
        for cookie in self.gone:
            self.endpoints.pop(cookie, None)
            self.calls.pop(cookie, None)
        self.gone = set()
        return out


def _rows(s: Samples, mask: np.ndarray | slice) -> Samples:
    return Samples(s.time_s[mask], s.cookie[mask], s.values[mask])


def _finite(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


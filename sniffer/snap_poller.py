"""SNAP's poller on a host: Poisson-timed reads of every TCP socket and lookups of the fast
ones (SNAP §2.1: PASTA; §7: the CPU budget), fed to `SnapProfile`; reports as `snap` events.

The kernel's cookie names a socket; its ends and owner are read once, when it is first seen
(the owners' /proc scan only when an unknown inode turns up, at most every `OWNER_SCAN_S`).
"""

from __future__ import annotations

import errno
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from linkgrad.protocol.snap import SnapConnection, SnapEnd, SnapRecord, SnapReportEvent
from linkgrad.snap.classify import CLASS_NAMES, SnapThresholds
from sniffer import tcp_info
from sniffer.kernel import socket_owners
from sniffer.links import Process
from sniffer.poll_budget import BudgetSettings, PollBudget
from sniffer.snap_profile import CALLS, SUMS, Endpoint, SnapProfile
from sniffer.snap_sample import Samples, samples
from sniffer.sockdiag import SockDiag, SocketTable, address_text, sockid
from sniffer.socket_call_summary import SocketCallSummary

# TCP states that carry data: ESTABLISHED SYN_SENT FIN_WAIT1 FIN_WAIT2 CLOSE_WAIT LAST_ACK
# CLOSING (not LISTEN, TIME_WAIT, SYN_RECV: no tcp_info, or nothing to send)
CONNECTED_STATES = sum(1 << s for s in (1, 2, 4, 5, 8, 9, 11))
FAMILIES = (socket.AF_INET, socket.AF_INET6)
OWNER_SCAN_S = 5.0
NO_FAMILY = (errno.ENOENT, errno.EAFNOSUPPORT, errno.EOPNOTSUPP)  # a kernel without IPv6
SHORT_KEYS = 1 << 64  # totals keys of short sockets' logical links: above every cookie
CONTROL_S = 1.0  # how often the budget is checked
CPU_WINDOW_S = 5.0  # ... on the CPU share over this long
# what each missing tcp_info field costs the classifier
NEEDED = {"sndbuf_limited": "send-buffer limits are seen only when a poll lands on a full "
          "buffer", "rwnd_limited": "receiver-window limits are not seen",
          "total_rto": "timeouts are seen only when a poll lands in one",
          "min_rtt": "delayed ACKs are not estimated", "data_segs_out": "idle is not told"}


class SnapPoller:
    def __init__(self, budget: BudgetSettings, thresholds: SnapThresholds, *,
                 clock: Callable[[], float] = time.time,
                 cpu_s: Callable[[], float] = time.process_time,
                 owners: Callable[[], dict[int, Process]] = socket_owners,
                 closed: Callable[[], list[tuple[float, SocketTable]]] = list,
                 ephemeral: tuple[int, int] = (32768, 60999),
                 seed: int | None = None) -> None:
        self.budget = PollBudget(budget)
        self.profile = SnapProfile(thresholds, budget.history_s)
        self.clock, self.cpu_s, self.owners, self.closed = clock, cpu_s, owners, closed
        # socket-call summaries since the last call (the tracer's drain; none without one)
        self.calls: Callable[[], list[SocketCallSummary]] = list
        self.by_tuple: dict[tuple[str, int, str, int], int] = {}  # 4-tuple -> cookie
        self.ephemeral = ephemeral
        self.short: dict[tuple[str, int, str, int], int] = {}  # logical link -> totals key
        self.rng = np.random.default_rng(seed)
        self.diag = SockDiag()
        self.known_owners: dict[int, Process] = {}
        self.owners_read_s = -np.inf
        self.unowned: set[int] = set()  # cookies whose process is not known yet
        self.ids: dict[int, tuple[int, bytes]] = {}  # cookie -> (family, sockid) for lookups
        self.next_table_s = 0.0
        self.next_fast: dict[int, float] = {}
        self.sockets = 0
        self.info_length = 0
        self.since_s = clock()
        self.cpu_at_report = cpu_s()
        self.control_s = self.since_s
        self.cpu_seen: deque[tuple[float, float]] = deque([(self.since_s, self.cpu_at_report)])

    def close(self) -> None:
        self.diag.close()

    def step(self) -> float:
        """Do what is due; returns the time of the next thing due."""
        self.step_calls()
        now = self.clock()
        if now >= self.next_table_s:
            self.read_table(now)
        due = [c for c, t in self.next_fast.items() if t <= now]
        if due:
            self._lookup(due)
            for c in due:
                self.next_fast[c] = now + self.rng.exponential(self.budget.interval_of(c))
        if now - self.control_s >= CONTROL_S:
            self._control(now)
        return min([self.next_table_s, self.control_s + CONTROL_S, *self.next_fast.values()])

    def read_table(self, now: float | None = None) -> None:
        """Read every socket now; the next read is drawn from here."""
        now = self.clock() if now is None else now
        self._observe_closed()  # first: a socket freed since is in no dump any more
        tables = []
        for family in FAMILIES:
            try:
                tables.append(self.diag.dump(family, states=CONNECTED_STATES))
            except OSError as e:
                if family == socket.AF_INET or e.errno not in NO_FAMILY:
                    raise
                # no IPv6 in this kernel: no IPv6 socket to see
        polled = [samples(t, self.clock()) for t in tables]
        for t in tables:
            self._learn(t)
        merged = _concat(polled)
        self.sockets = len(merged.cookie)
        self.profile.observe_table(merged, now)
        self.ids = {c: v for c, v in self.ids.items() if c in self.profile.endpoints}
        self.next_table_s = now + self.rng.exponential(self.budget.table_interval_s)

    def restart_budget(self) -> None:
        """Measure the CPU share from now: the first read (every socket's ends and owners
        learnt) and the tracer's start are no steady cost to budget against."""
        now = self.clock()
        self.cpu_seen = deque([(now, self.cpu_s())])
        self.control_s = now

    def step_calls(self) -> None:
        """The socket calls traced since the last step, to each socket's next interval (by
        its 4-tuple: the tracer sees the kernel's socket, not the cookie)."""
        summaries = self.calls()
        endpoints = self.profile.endpoints
        for s in summaries:
            key = (s.local_addr, s.local_port, s.remote_addr, s.remote_port)
            if key not in self.by_tuple:  # a socket learnt since: index them all again
                self.by_tuple = {e.four_tuple: c for c, e in endpoints.items()
                                 if c < SHORT_KEYS}
            if (cookie := self.by_tuple.get(key)) is not None and cookie in endpoints:
                self.profile.add_calls(cookie, s.writes, s.write_bytes, s.small_writes)

    def _observe_closed(self) -> None:
        heard = [(when, t[t.has_info]) for when, t in self.closed()]
        heard = [(when, t) for when, t in heard if len(t)]
        if not heard:
            return
        polled = {*self.profile.latest.cookie.tolist(), *self.profile.dropped.cookie.tolist()}
        for _, table in heard:
            self._learn(table)
        closed = _concat([samples(t, when) for when, t in heard])
        keys = [c if c in polled else self._short_key(c) for c in closed.cookie.tolist()]
        self.profile.observe_closed(closed, keys)

    def _short_key(self, cookie: int) -> int:
        """Where a socket never polled (shorter than a table interval) is summed: its logical
        link, the client's ephemeral port written 0 (as the link counts do)."""
        e = self.profile.endpoints[cookie]
        lo, hi = self.ephemeral
        client = lo <= e.local_port <= hi
        local_port, remote_port = (0, e.remote_port) if client else (e.local_port, 0)
        logical = (e.local_addr, local_port, e.remote_addr, remote_port)
        key = self.short.setdefault(logical, SHORT_KEYS + len(self.short))
        self.profile.endpoints[key] = replace(e, local_port=local_port, remote_port=remote_port,
                                              inode=0)
        return key

    def _lookup(self, cookies: list[int]) -> None:
        for family in FAMILIES:
            ids = [self.ids[c][1] for c in cookies if c in self.ids and self.ids[c][0] == family]
            if ids:
                self.profile.observe_lookup(samples(self.diag.lookup(family, ids), self.clock()))

    def _learn(self, table: SocketTable) -> None:
        """Ends and owners of the sockets not seen before."""
        rows = table[table.has_info]
        if len(rows.info) and tcp_info.has(rows.info, "rtt"):
            self.info_length = rows.info.dtype.itemsize
        endpoints = self.profile.endpoints
        new = [i for i, c in enumerate(rows.diag["cookie"].tolist()) if c not in endpoints]
        for i in new:
            d = rows.diag[i]
            family, cookie, inode = int(d["family"]), int(d["cookie"]), int(d["inode"])
            endpoints[cookie] = Endpoint(
                family, address_text(family, d["src"].tobytes()), int(d["sport"]),
                address_text(family, d["dst"].tobytes()), int(d["dport"]), inode)
            self.ids[cookie] = (family, sockid(d))
            if inode:  # 0: freed already (a closing notice), no process holds it
                self.unowned.add(cookie)
        self._own()

    def _own(self) -> None:
        """Owners of the sockets that have none yet: from the last /proc scan, scanned again
        (at most every OWNER_SCAN_S) while some are unknown to it."""
        endpoints = self.profile.endpoints
        self.unowned &= endpoints.keys()
        if any(endpoints[c].inode not in self.known_owners for c in self.unowned) \
                and self.clock() - self.owners_read_s >= OWNER_SCAN_S:
            self.known_owners = self.owners()
            self.owners_read_s = self.clock()
        for cookie in [c for c in self.unowned if endpoints[c].inode in self.known_owners]:
            owner = self.known_owners[endpoints[cookie].inode]
            endpoints[cookie] = replace(endpoints[cookie], pid=owner.pid, process=owner.name)
            self.unowned.discard(cookie)

    def _control(self, now: float) -> None:
        """A budget step on the CPU share of the last CPU_WINDOW_S (one second holds one
        read or none at 10,000 sockets: 0% or 10%, and the intervals would swing)."""
        self.cpu_seen.append((now, self.cpu_s()))
        while len(self.cpu_seen) > 2 and now - self.cpu_seen[1][0] >= CPU_WINDOW_S:
            self.cpu_seen.popleft()
        (t0, cpu0), (t1, cpu1) = self.cpu_seen[0], self.cpu_seen[-1]
        share_pct = 100.0 * (cpu1 - cpu0) / max(t1 - t0, 1e-9)
        self.control_s = now
        table_interval = self.budget.table_interval_s
        self.budget.adjust(share_pct, self.profile.recent_problems(now))
        if self.budget.table_interval_s != table_interval:  # memoryless: draw again from now
            self.next_table_s = now + self.rng.exponential(self.budget.table_interval_s)
        self.next_fast = {c: self.next_fast.get(c, now) for c in self.budget.fast}

    def missing(self) -> list[str]:
        """The tcp_info fields this kernel lacks that the classifier uses, with their cost."""
        if not self.info_length:
            return []
        have = tcp_info.dtype_for(self.info_length).names or ()
        return [f"tcp_info has no {field} (kernel before {tcp_info.SINCE[field]}): {cost}"
                for field, cost in NEEDED.items() if field not in have]

    def report(self, with_sums: bool = True) -> SnapReportEvent:
        """The `snap` event of the time since the last: the problem records, and
        (`with_sums`) the connections' sums since they were last reported. Sums are the bulk
        of the log (a line per connection that moved data), so they may be sent less often
        than the records."""
        self._observe_closed()  # what closed since the last table read counts in this report
        now, cpu = self.clock(), self.cpu_s()
        ends = dict(self.profile.endpoints)  # before the drain forgets the closed ones
        records, dropped = self.profile.drain_records()
        connections = self._sums(ends) if with_sums else []
        event = SnapReportEvent(
            from_s=self.since_s, to_s=now,
            cpu_pct=100.0 * (cpu - self.cpu_at_report) / max(now - self.since_s, 1e-9),
            table_interval_s=self.budget.table_interval_s,
            fast_connections=len(self.budget.fast), sockets=self.sockets,
            connections=tuple(connections),
            records=tuple(SnapRecord(  # the profile's record, named by its ends
                local=_local(ends[r.cookie]), remote=_remote(ends[r.cookie]), from_s=r.from_s,
                to_s=r.to_s, classes=r.classes, delayed_acks=r.delayed_acks, tcp=r.tcp,
                calls=r.calls)
                for r in records if r.cookie in ends),
            dropped_records=dropped)
        self.since_s, self.cpu_at_report = now, cpu
        return event

    def _sums(self, ends: dict[int, Endpoint]) -> list[SnapConnection]:
        """Each connection's sums, zeros left out (most classes and counters of most
        connections are zero: this halves the log)."""
        totals, sockets = self.profile.drain_totals()
        out = []
        for cookie, row in totals.slot.items():
            e = ends.get(cookie)
            if e is None:
                continue  # closed before its ends were learnt
            out.append(SnapConnection(
                local=_local(e), remote=_remote(e), pid=e.pid, process=e.process,
                first_s=float(totals.first_s[row]), last_s=float(totals.last_s[row]),
                polls=int(totals.polls[row]),
                seconds=_nonzero(CLASS_NAMES, totals.seconds[row]),
                sums=_nonzero((*SUMS, *CALLS), totals.sums[row]),
                delayed_acks=float(totals.delayed_acks[row]),
                problem_intervals=int(totals.problem_intervals[row]),
                sockets=sockets.get(cookie, 1)))
        return out


def _nonzero(names: tuple[str, ...], values: np.ndarray) -> dict[str, float]:
    return {n: v for n, v in zip(names, values.tolist(), strict=True) if v}


def _local(e: Endpoint) -> SnapEnd:
    return SnapEnd(addr=e.local_addr, port=e.local_port)


def _remote(e: Endpoint) -> SnapEnd:
    return SnapEnd(addr=e.remote_addr, port=e.remote_port)


def _concat(parts: list[Samples]) -> Samples:
    return Samples(np.concatenate([p.time_s for p in parts]),
                   np.concatenate([p.cookie for p in parts]),
                   np.concatenate([p.values for p in parts]))

"""SNAP's evidence beside the gradients: the classes each link showed in a time window, and the
shared resources ranked by ACC (§2.3), from the sniffers' `snap` reports as `snap.json` holds
them. Read through the protocols below: the fields this reads of `linkgrad.protocol.snap`'s
models, with the reporting host added (as snap.json has it), so that this package, which the
sniffer imports, needs no pydantic.

Every Table 2 class is a sender's view (its send buffer, its retransmissions and timeouts, the
RTT its ACKs took, the window its peer offered), so a connection a host reports with local end
L and remote end R is evidence about the link L -> R. A link's port 0 (ephemeral) matches any.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from linkgrad.snap.classify import CLASS_NAMES, PROBLEMS, Classes
from linkgrad.snap.correlate import (
    ResourceScore,
    performance_vectors,
    rank_resources,
    shared_resources,
)

__all__ = [
    "End",
    "LinkKey",
    "LinkSeen",
    "Report",
    "ReportedConnection",
    "ReportedEnd",
    "ReportedRecord",
    "correlated_resources",
    "link_classes",
    "links_seen",
]

End = tuple[str | None, int]  # (host, port)


class ReportedEnd(Protocol):
    """One end of a reported socket (`SnapEnd`)."""

    @property
    def addr(self) -> str: ...
    @property
    def port(self) -> int: ...


class ReportedConnection(Protocol):
    """A connection's sums over a report (`SnapConnection`)."""

    @property
    def local(self) -> ReportedEnd: ...
    @property
    def remote(self) -> ReportedEnd: ...
    @property
    def process(self) -> str | None: ...
    @property
    def first_s(self) -> float: ...
    @property
    def last_s(self) -> float: ...
    @property
    def seconds(self) -> Mapping[str, float]: ...
    @property
    def sums(self) -> Mapping[str, float]: ...
    @property
    def sockets(self) -> int: ...


class ReportedRecord(Protocol):
    """An interval with a problem (`SnapRecord`)."""

    @property
    def local(self) -> ReportedEnd: ...
    @property
    def remote(self) -> ReportedEnd: ...
    @property
    def from_s(self) -> float: ...
    @property
    def to_s(self) -> float: ...
    @property
    def classes(self) -> Sequence[str]: ...
    @property
    def tcp(self) -> Mapping[str, float]: ...


class Report(Protocol):
    """A `snap` report with the host that sent it (snap.json's)."""

    @property
    def host(self) -> str: ...
    @property
    def connections(self) -> Sequence[ReportedConnection]: ...
    @property
    def records(self) -> Sequence[ReportedRecord]: ...


@dataclass(frozen=True)
class LinkSeen:
    """A sending direction's connections (sockets), summed."""

    connections: int
    bytes_acked: float
    seconds: dict[str, float]  # Table 2 class -> seconds, over its connections


@dataclass(frozen=True)
class LinkKey:
    src_host: str
    src_port: int  # 0: any (ephemeral)
    dst_host: str
    dst_port: int

    def matches(self, src: End, dst: End) -> bool:
        return (src[0] == self.src_host and dst[0] == self.dst_host
                and self.src_port in (0, src[1]) and self.dst_port in (0, dst[1]))


def _ends(item: ReportedConnection | ReportedRecord,
          hosts: Mapping[str, str]) -> tuple[End, End]:
    return ((hosts.get(item.local.addr), item.local.port),
            (hosts.get(item.remote.addr), item.remote.port))


def _overlap(a: float, b: float, window: tuple[float, float]) -> float:
    return max(0.0, min(b, window[1]) - max(a, window[0]))


def link_classes(reports: Iterable[Report], hosts: Mapping[str, str], link: LinkKey,
                 window: tuple[float, float], injected_us: float = 0.0,
                 max_queuing_us: float = 10_000.0) -> dict[str, float]:
    """Seconds of each class on `link`'s connections within `window`, summed over them.

    The five problems come from the full records (exact intervals); app_limited from the
    connections' sums, spread evenly over the span they cover (their intervals are not sent).
    `injected_us`: a delay put on the link's host pair in the window (either way: the ACKs
    cross it too). An RTT it explains is no delayed ACK: the class stands only where the RTT
    less that delay still exceeds the minimum plus `max_queuing_us` (the classifier's rule).
    """
    seconds = dict.fromkeys(CLASS_NAMES, 0.0)
    for report in reports:
        for record in report.records:
            if link.matches(*_ends(record, hosts)):
                share = _overlap(record.from_s, record.to_s, window)
                for name in record.classes:
                    if name in PROBLEMS and not (name == "delayed_ack" and _explained(
                            record, injected_us, max_queuing_us)):
                        seconds[name] += share
        for c in report.connections:
            if link.matches(*_ends(c, hosts)) and c.last_s > c.first_s:
                fraction = _overlap(c.first_s, c.last_s, window) / (c.last_s - c.first_s)
                seconds["app_limited"] += fraction * c.seconds.get("app_limited", 0.0)
    return seconds


def _explained(record: ReportedRecord, injected_us: float, max_queuing_us: float) -> bool:
    rtt, least = record.tcp.get("rtt_us"), record.tcp.get("min_rtt_us")
    if not injected_us or rtt is None or least is None:
        return False
    return bool(rtt - injected_us <= least + max_queuing_us)


def correlated_resources(reports: Sequence[Report], hosts: Mapping[str, str],
                         window: tuple[float, float], aggregation_s: float = 2.0,
                         alpha: float = 0.4) -> list[ResourceScore]:
    """§2.3 over every connection seen in `window`: the hosts sent from and into, the paths
    and processes ranked by the ACC of their connections' problem vectors. A connection is one
    socket as its host reports it; one without a problem record is present, healthy (a zero
    vector)."""
    ids: dict[tuple[object, ...], int] = {}
    host_of: dict[int, str] = {}
    peer_of: dict[int, str] = {}
    process_of: dict[int, str] = {}
    rows: list[tuple[int, float, float, tuple[str, ...]]] = []

    def add(host: str, item: ReportedConnection | ReportedRecord, process: str | None,
            start: float, end: float, classes: tuple[str, ...]) -> None:
        conn = ids.setdefault((host, *_flat(item)), len(ids))
        (_, _), (peer, _) = _ends(item, hosts)
        host_of[conn], peer_of[conn] = host, peer or ""
        if process:
            process_of[conn] = process
        rows.append((conn, float(start), float(end), classes))

    for report in reports:
        for c in report.connections:
            add(report.host, c, c.process, c.first_s, c.last_s, ())
        for r in report.records:
            add(report.host, r, None, r.from_s, r.to_s, tuple(r.classes))
    if not rows:
        return []
    vectors = performance_vectors(_classes([r[3] for r in rows]), [r[0] for r in rows],
                                  [r[1] for r in rows], [r[2] for r in rows],
                                  from_s=window[0], to_s=window[1], aggregation_s=aggregation_s)
    return rank_resources(shared_resources(host_of, peer_of, process_of), vectors, alpha)


def _flat(item: ReportedConnection | ReportedRecord) -> tuple[object, ...]:
    return (item.local.addr, item.local.port, item.remote.addr, item.remote.port)


def _classes(held: list[tuple[str, ...]]) -> Classes:
    n = len(held)
    flags = {name: np.array([name in h for h in held], dtype=bool) for name in PROBLEMS}
    none = ~np.logical_or.reduce(list(flags.values())) if n else np.zeros(0, bool)
    return Classes(**flags, app_limited=none, small_writes=np.zeros(n, bool),
                   idle=np.zeros(n, bool), delayed_acks=np.full(n, np.nan))


@dataclass
class _Summing:
    sockets: set[tuple[object, ...]] = field(default_factory=set)  # one socket, many reports
    short: int = 0  # short sockets summed per report (a port written 0): disjoint each time
    bytes_acked: float = 0.0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CLASS_NAMES, 0.0))


def links_seen(reports: Iterable[Report], hosts: Mapping[str, str],
               ephemeral: Mapping[str, tuple[int, int]]) -> dict[str, LinkSeen]:
    """Every sending direction the reports saw, by its link label (`app1:0 -> db:5432`: a
    port in its host's ephemeral range written 0; an address of no known host kept as it is),
    with its connections (sockets), the seconds in each class and the bytes acknowledged,
    summed over them."""
    links: dict[str, _Summing] = {}
    for report in reports:
        for c in report.connections:
            (src, sport), (dst, dport) = _ends(c, hosts)
            label = (f"{_end(src or c.local.addr, sport, ephemeral)} -> "
                     f"{_end(dst or c.remote.addr, dport, ephemeral)}")
            entry = links.setdefault(label, _Summing())
            if c.local.port and c.remote.port:
                entry.sockets.add((report.host, *_flat(c)))
            else:
                entry.short += c.sockets
            entry.bytes_acked += c.sums.get("bytes_acked", 0.0)
            for name, s in c.seconds.items():
                entry.seconds[name] = entry.seconds.get(name, 0.0) + s
    return {label: LinkSeen(len(e.sockets) + e.short, e.bytes_acked, e.seconds)
            for label, e in links.items()}


def _end(host: str, port: int, ephemeral: Mapping[str, tuple[int, int]]) -> str:
    lo, hi = ephemeral.get(host, (1, 0))
    return f"{host}:{0 if lo <= port <= hi else port}"

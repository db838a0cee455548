"""What a link carried in a time window, from the connections' sums the sniffers report: the
connections it opened there, the application's writes, their bytes and the data segments they
took. The explanation reads it for handshakes (a connection per request) and for messages
larger than one window (several round trips each)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from linkgrad.snap.evidence import LinkKey, Report, ReportedConnection

__all__ = ["LinkTraffic", "link_traffic"]


@dataclass(frozen=True)
class LinkTraffic:
    opened: int  # connections (sockets) first seen inside the window
    # of the connections whose writes were traced (socket calls; not the short ones summed
    # without a process): their sums' share inside the window, spread over each one's span
    writes: float
    write_bytes: float
    segments: float  # data segments those writes took


def link_traffic(reports: Iterable[Report], hosts: Mapping[str, str], link: LinkKey,
                 window: tuple[float, float]) -> LinkTraffic:
    """`link`'s traffic within `window` as its senders reported it. A connection reported in
    several reports is opened where it was first seen; the short ones summed under client port
    0 were opened inside the span of the report that counts them."""
    first: dict[tuple[str, int, str, int], float] = {}
    opened = 0.0
    writes = write_bytes = segments = 0.0
    for report in reports:
        for c in report.connections:
            src = (hosts.get(c.local.addr), c.local.port)
            dst = (hosts.get(c.remote.addr), c.remote.port)
            if not link.matches(src, dst):
                continue
            share = _share(c, window)
            if c.sums.get("writes", 0.0) > 0:
                writes += share * c.sums["writes"]
                write_bytes += share * c.sums.get("write_bytes", 0.0)
                segments += share * c.sums.get("data_segs_out", 0.0)
            if c.sockets > 1 or 0 in (c.local.port, c.remote.port):
                opened += share * c.sockets
            else:
                key = (c.local.addr, c.local.port, c.remote.addr, c.remote.port)
                first[key] = min(first.get(key, c.first_s), c.first_s)
    opened += sum(window[0] <= t < window[1] for t in first.values())
    return LinkTraffic(opened=round(opened), writes=writes, write_bytes=write_bytes,
                       segments=segments)


def _share(c: ReportedConnection, window: tuple[float, float]) -> float:
    """The part of `c`'s span inside `window` (all or nothing for a span of no length)."""
    span = c.last_s - c.first_s
    if span <= 0:
        return float(window[0] <= c.first_s < window[1])
    return max(0.0, min(c.last_s, window[1]) - max(c.first_s, window[0])) / span

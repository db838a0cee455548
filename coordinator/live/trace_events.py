"""The sniffers' `trace` events (linkgrad.protocol.trace) as the path analysis's host traces."""

from __future__ import annotations

from collections.abc import Iterable

from linkgrad.paths.messages import NO_THREAD
from linkgrad.paths.reconcile import HostRecord, HostTrace, Opening
from linkgrad.protocol.trace import TraceReportEvent


def host_trace(name: str, addresses: Iterable[str], events: Iterable[TraceReportEvent]
               ) -> HostTrace:
    """One host's messages over its events, with its addresses, listening sockets and the
    connections it saw opened."""
    records: list[HostRecord] = []
    listening: set[tuple[str, int]] = set()
    openings: list[Opening] = []
    for e in events:
        listening |= {(a, p) for a, p in e.listening}
        openings += [(e.endpoints[c], e.endpoints[s], t) for c, s, t in e.openings]
        threads = e.threads or (NO_THREAD,) * len(e.messages)
        for (local, remote, sent, first, end, first_s, last_s, loop, proc), thread in zip(
                e.messages, threads, strict=True):
            records.append(HostRecord(e.endpoints[local], e.endpoints[remote], sent, first,
                                      end, first_s, last_s, loop,
                                      e.processes[proc] if proc >= 0 else "", thread))
    return HostTrace(name, frozenset(addresses), frozenset(listening), records,
                     tuple(openings))

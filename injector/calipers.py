"""The injector's calipers: the shared `linkgrad.calipers` over each packet's delay, reported
in milliseconds as the protocol's `Calipers` (no per-packet records, constant memory)."""

from __future__ import annotations

from linkgrad.calipers import Calipers
from linkgrad.protocol import injector as protocol

__all__ = ["Calipers", "delay_summary"]


def delay_summary(calipers: Calipers) -> protocol.Calipers:
    """Delays added in seconds, summarised in milliseconds; empty calipers give nulls."""
    m = calipers.value
    if not m.count:
        return protocol.Calipers()
    return protocol.Calipers(count=m.count, min_ms=round(m.low * 1e3, 6),
                             max_ms=round(m.high * 1e3, 6), mean_ms=round(m.mean * 1e3, 6),
                             std_ms=round(m.sd * 1e3, 6))

"""What the explanation reads of a transaction's causal-path patterns: the crossings inside
the response time the web log measures, and how a link's messages branch."""

from __future__ import annotations

from collections.abc import Sequence

from linkgrad.explain.evidence import Branches
from linkgrad.paths.result import PatternResult

__all__ = ["branches", "logged_crossings", "root_pairs"]


def root_pairs(p: PatternResult) -> frozenset[str]:
    """The root's link and its reverse: the client's request and the reply to it."""
    if not p.hops:
        return frozenset()
    src, _, dst = p.hops[0].link.partition("->")
    return frozenset({f"{src}->{dst}", f"{dst}->{src}"})


def logged_crossings(p: PatternResult) -> dict[str, float]:
    """The pattern's crossings inside the response time the web log measures: the front end
    logs from the request's arrival to the reply's last write, so the root's link (the
    client's request) and its reverse (the reply) lie outside it; a reply larger than the
    socket's buffers waits on the client's ACKs inside it all the same, a cause of `above`."""
    outside = root_pairs(p)
    return {pair: c for pair, c in p.crossings.items() if pair not in outside}


def branches(patterns: Sequence[PatternResult], pair: str) -> Branches | None:
    """How the transaction's patterns send `pair`'s messages: the requests that cross it,
    the share of its crossings on the critical path, and the messages a parent sends beside
    one of its (WAP5 links a message to the one its sender last received: siblings leave
    together, in parallel or without waiting); the client's link is outside the logged time
    and no branch of it."""
    crossing = 0
    weight = critical = 0.0
    parallel: set[str] = set()
    for p in patterns:
        mine = [i for i, h in enumerate(p.hops) if h.link == pair]
        if not mine:
            continue
        crossing += p.count
        outside = root_pairs(p)
        for i in mine:
            weight += p.count
            critical += p.count * p.hops[i].critical
            parent = p.hops[i].parent
            parallel |= {h.link for j, h in enumerate(p.hops)
                         if j != i and parent >= 0 and h.parent == parent and h.link != pair
                         and h.link not in outside}
    if not crossing:
        return None
    return Branches(crossing_requests=crossing, critical_share=critical / weight,
                    parallel=tuple(sorted(parallel)))

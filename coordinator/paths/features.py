"""What a message's size and connection say about its parent: a black box shows them as
well as times.

Sizes. A handler's calls follow from what it was asked: a request for one page makes queries of
their own lengths, and a database's answer of one length is followed by the next query of
that transaction, or by the reply it makes. So a call's size, given a candidate parent's
sender and size, is far from uniform — where the application's messages have sizes of their
own. Fitted from the links a pass found: per (parent's sender, parent's size, node,
destination) the counts of each size the node sent, shrunk toward the pair's own counts
(node, destination) by `PRIOR_WEIGHT` pseudo-observations. Where sizes vary freely every key
is rare, each probability falls back to the pair's, and sizes weigh nothing.

Connections. A client that keeps its connections in a pool often takes back the one its
answer just came on (a last-in-first-out pool: the handler releases it as it wakes and
takes one again for its next call), and a handler that holds one connection for its whole
request always does. How often a node's call to a destination left on the connection its
parent came in on is fitted per (parent's sender, node, destination); where the pool hands
out connections in turn that share is about one over the pool's size and weighs little.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

PRIOR_WEIGHT = 2.0  # pseudo-observations of the pair's distribution in each key's

# (parent sender, parent size, node, destination)
Key = tuple[int, int, int, int]


class SizeModel:
    """P(size of a message | its parent's sender and size, its node and destination)."""

    def __init__(self, links: Iterable[tuple[Key, int]]) -> None:
        self.by_key: dict[Key, Counter[int]] = {}
        self.by_pair: dict[tuple[int, int], Counter[int]] = {}
        for key, size in links:
            self.by_key.setdefault(key, Counter())[size] += 1
            self.by_pair.setdefault((key[2], key[3]), Counter())[size] += 1
        self.key_total = {k: c.total() for k, c in self.by_key.items()}
        self.pair_total = {k: c.total() for k, c in self.by_pair.items()}

    def pair_probability(self, node: int, destination: int, size: int) -> float:
        """P(size | node, destination), with half an observation for every size not seen
        (Jeffreys'), one more kind of size allowed for."""
        seen = self.by_pair.get((node, destination))
        if seen is None:
            return 1.0
        return (seen[size] + 0.5) / (self.pair_total[(node, destination)] + 0.5 * (len(seen) + 1))

    def probability(self, parent_sender: int, parent_size: int, node: int, destination: int,
                    size: int) -> float:
        base = self.pair_probability(node, destination, size)
        key = (parent_sender, parent_size, node, destination)
        seen = self.by_key.get(key)
        if seen is None:
            return base
        return (seen[size] + PRIOR_WEIGHT * base) / (self.key_total[key] + PRIOR_WEIGHT)


class ReuseModel:
    """P(a call leaves on the connection its parent came in on | the parent's sender, the
    node, the callee), with Jeffreys' half observations."""

    def __init__(self, links: Iterable[tuple[tuple[int, int, int], bool]]) -> None:
        same: Counter[tuple[int, int, int]] = Counter()
        every: Counter[tuple[int, int, int]] = Counter()
        for key, reused in links:
            every[key] += 1
            same[key] += reused
        self.share = {k: (same[k] + 0.5) / (n + 1) for k, n in every.items()}

    def probability(self, parent_sender: int, node: int, callee: int, reused: bool) -> float:
        q = self.share.get((parent_sender, node, callee), 0.5)
        return q if reused else 1.0 - q


class Observables:
    """The weights sizes and connections give a message's candidate parents, fitted to the
    (parent, message) links a pass found; columns are the trace's, as lists."""

    def __init__(self, src: list[int], dst: list[int], size: list[int], conn: list[int],
                 links: Iterable[tuple[int, int]], is_reply: list[bool]) -> None:
        self.src, self.dst, self.size, self.conn = src, dst, size, conn
        links = list(links)
        self.sizes = SizeModel(((src[p], size[p], src[m], dst[m]), size[m]) for p, m in links)
        self.reuse = ReuseModel(((src[p], src[m], dst[m]), conn[p] == conn[m])
                                for p, m in links if not is_reply[m])

    def call(self, parent: int, msg: int) -> float:
        src, node, callee = self.src[parent], self.src[msg], self.dst[msg]
        return self.sizes.probability(src, self.size[parent], node, callee, self.size[msg]) \
            * self.reuse.probability(src, node, callee, self.conn[parent] == self.conn[msg])

    def spontaneous(self, msg: int) -> float:
        return self.sizes.pair_probability(self.src[msg], self.dst[msg], self.size[msg])

    def reply(self, parent: int, msg: int) -> float:
        return self.sizes.probability(self.src[parent], self.size[parent], self.src[msg],
                                      self.dst[msg], self.size[msg])

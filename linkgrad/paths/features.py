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

import numpy as np

from linkgrad.paths.messages import Trace

__all__ = ["PRIOR_WEIGHT", "Key", "Observables", "ReuseModel", "SizeModel"]

PRIOR_WEIGHT = 2.0  # pseudo-observations of the pair's distribution in each key's

# (parent sender, parent size, node, destination)
Key = tuple[int, int, int, int]


class SizeModel:
    """P(size of a message | its parent's sender and size, its node and destination)."""

    def __init__(self, keys: np.ndarray, sizes: np.ndarray) -> None:
        """`keys`: a row (parent sender, parent size, node, destination) per link; `sizes`:
        its message's size."""
        self.by_key = _counts(np.column_stack([keys, sizes]))
        self.by_pair = _counts(np.column_stack([keys[:, 2:], sizes]))
        self.key_total = {k: sum(c.values()) for k, c in self.by_key.items()}
        self.pair_total = {k: sum(c.values()) for k, c in self.by_pair.items()}

    def pair_probability(self, node: int, destination: int, size: int) -> float:
        """P(size | node, destination), with half an observation for every size not seen
        (Jeffreys'), one more kind of size allowed for."""
        seen = self.by_pair.get((node, destination))
        if seen is None:
            return 1.0
        return (seen.get(size, 0) + 0.5) / (self.pair_total[(node, destination)]
                                            + 0.5 * (len(seen) + 1))

    def probability(self, parent_sender: int, parent_size: int, node: int, destination: int,
                    size: int) -> float:
        base = self.pair_probability(node, destination, size)
        key = (parent_sender, parent_size, node, destination)
        seen = self.by_key.get(key)
        if seen is None:
            return base
        return (seen.get(size, 0) + PRIOR_WEIGHT * base) / (self.key_total[key] + PRIOR_WEIGHT)


def _counts(rows: np.ndarray) -> dict[tuple[int, ...], dict[int, int]]:
    """{row without its last column: {last column's value: how many rows}}."""
    out: dict[tuple[int, ...], dict[int, int]] = {}
    if len(rows) == 0:
        return out
    unique, count = np.unique(rows, axis=0, return_counts=True)
    for row, n in zip(unique.tolist(), count.tolist(), strict=True):
        out.setdefault(tuple(row[:-1]), {})[row[-1]] = n
    return out


class ReuseModel:
    """P(a call leaves on the connection its parent came in on | the parent's sender, the
    node, the callee), with Jeffreys' half observations."""

    def __init__(self, keys: np.ndarray, reused: np.ndarray) -> None:
        """`keys`: a row (parent sender, node, callee) per call linked; `reused`: whether it
        left on its parent's connection."""
        self.share: dict[tuple[int, ...], float] = {}
        if len(keys):
            unique, which, count = np.unique(keys, axis=0, return_inverse=True,
                                             return_counts=True)
            same = np.bincount(which.ravel(), reused.astype(float))
            self.share = {tuple(k): (s + 0.5) / (n + 1) for k, s, n in zip(
                unique.tolist(), same.tolist(), count.tolist(), strict=True)}

    def probability(self, parent_sender: int, node: int, callee: int, reused: bool) -> float:
        """1 for a transition never linked: no opinion (a half would halve every link
        against being spontaneous)."""
        q = self.share.get((parent_sender, node, callee))
        return 1.0 if q is None else q if reused else 1.0 - q


class Observables:
    """The weights sizes and connections give a message's candidate parents, fitted to the
    links a pass found (`parents[k]` the parent of `children[k]`)."""

    def __init__(self, trace: Trace, parents: np.ndarray, children: np.ndarray) -> None:
        m = trace.messages
        self.src, self.dst = m.src.tolist(), m.dst.tolist()
        self.size, self.conn = m.size_bytes.tolist(), m.conn.tolist()
        src, dst, size, conn = m.src, m.dst, m.size_bytes, m.conn
        p, c = parents, children
        self.sizes = SizeModel(np.column_stack([src[p], size[p], src[c], dst[c]]), size[c])
        calls = ~trace.is_reply()[c]
        p, c = p[calls], c[calls]
        self.reuse = ReuseModel(np.column_stack([src[p], src[c], dst[c]]), conn[p] == conn[c])

    def call(self, parent: int, msg: int) -> float:
        src, node, callee = self.src[parent], self.src[msg], self.dst[msg]
        return self.sizes.probability(src, self.size[parent], node, callee, self.size[msg]) \
            * self.reuse.probability(src, node, callee, self.conn[parent] == self.conn[msg])

    def spontaneous(self, msg: int) -> float:
        return self.sizes.pair_probability(self.src[msg], self.dst[msg], self.size[msg])

    def reply(self, parent: int, msg: int) -> float:
        return self.sizes.probability(self.src[parent], self.size[parent], self.src[msg],
                                      self.dst[msg], self.size[msg])

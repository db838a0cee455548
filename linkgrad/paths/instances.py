"""WAP5 §5.1 step 3: path instances from link probabilities, with try-both decisions.

From each root (a message likely spontaneous), the links to its possible children are
decided in time order: *probably-true* (p above the try-both band) is taken, *probably-false*
(below it, and not its child's most likely cause) is left, *try-both* (in the band, or the
child's most likely cause) builds both instances, at most k such decisions per tree (after
that the likelier choice is taken). An instance's probability is the product of p for each
link taken and 1 − p for each left. A message is in an instance once: the first link to it
(in time order) decides.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from linkgrad.paths.no_gc import no_cycle_collection
from linkgrad.paths.wap5 import DEFAULT_LINKING, LinkingSettings, LinkProbabilities

__all__ = ["ChildIndex", "PathInstance", "instances_from", "link_kinds", "path_instances", "roots"]

TRUE, FALSE, BOTH = 0, 1, 2


@dataclass(frozen=True)
class PathInstance:
    """One inferred tree: its root message, probability, and each message's parent (the root's
    is −1), messages in time order."""

    root: int
    probability: float
    messages: tuple[int, ...]
    parents: tuple[int, ...]


def link_kinds(probs: LinkProbabilities, settings: LinkingSettings) -> np.ndarray:
    """TRUE, FALSE or BOTH per candidate link (§5.1 step 3)."""
    p = probs.p
    best = probs.most_likely_parent()
    is_best = best[probs.links.child] == probs.links.parent
    kind = np.where(p > settings.try_both_high, TRUE,
                    np.where(p >= settings.try_both_low, BOTH, FALSE))
    return np.where((kind == FALSE) & is_best, BOTH, kind)


def roots(probs: LinkProbabilities, settings: LinkingSettings) -> np.ndarray:
    """Messages a tree starts from: being spontaneous is probably-true, try-both, or their
    most likely cause."""
    s = probs.p_spontaneous
    return np.flatnonzero((s >= settings.try_both_low) | (probs.most_likely_parent() < 0))


class ChildIndex:
    """The considered links (p ≥ min_link_p) by parent: children in time order."""

    def __init__(self, probs: LinkProbabilities, settings: LinkingSettings) -> None:
        keep = probs.p >= settings.min_link_p
        kinds = link_kinds(probs, settings)[keep]
        parent, child, p = probs.links.parent[keep], probs.links.child[keep], probs.p[keep]
        order = np.lexsort((child, parent))
        n = len(probs.p_spontaneous)
        self.start = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(parent, minlength=n), out=self.start[1:])
        self.child = child[order].tolist()
        self.parent = parent[order].tolist()
        self.p = p[order].tolist()
        self.kind = kinds[order].tolist()
        self._start = self.start.tolist()

    def of(self, msg: int) -> range:
        return range(self._start[msg], self._start[msg + 1])


def instances_from(root: int, index: ChildIndex, max_try_both: int) -> list[PathInstance]:
    """Every instance built from `root` (§5.1 step 3), most probable first."""
    done: list[PathInstance] = []
    # a partial instance: probability, parent of each message in it, pending link positions
    # (heap by child, so time order), try-both decisions left
    first = [(index.child[i], i) for i in index.of(root)]
    heapq.heapify(first)
    stack = [(1.0, {root: -1}, first, max_try_both)]
    while stack:
        prob, tree, heap, budget = stack.pop()
        while heap:
            child, i = heapq.heappop(heap)
            if child in tree:
                continue
            p, kind = index.p[i], index.kind[i]
            if kind == BOTH and budget > 0:
                budget -= 1
                stack.append((prob * (1 - p), dict(tree), list(heap), budget))
                take = True
            else:
                take = kind == TRUE or (kind == BOTH and p >= 0.5)
            if take:
                prob *= p
                tree[child] = index.parent[i]
                for j in index.of(child):
                    heapq.heappush(heap, (index.child[j], j))
            else:
                prob *= 1 - p
        messages = sorted(tree)
        done.append(PathInstance(root, prob, tuple(messages), tuple(tree[m] for m in messages)))
    done.sort(key=lambda x: -x.probability)
    return done


def path_instances(probs: LinkProbabilities, settings: LinkingSettings = DEFAULT_LINKING
                   ) -> list[list[PathInstance]]:
    """Per root (in time order), its instances, most probable first."""
    with no_cycle_collection():
        index = ChildIndex(probs, settings)
        return [instances_from(int(r), index, settings.max_try_both)
                for r in roots(probs, settings)]

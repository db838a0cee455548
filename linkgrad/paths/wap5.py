"""WAP5's message linking, steps 1 and 2 (Reynolds et al., WWW 2006, §5.1): the probability
that each candidate parent caused each message, from timing alone.

Step 1: per node pair B→C, the mean causal delay d_{B→C} is estimated as the mean over B→C
messages of the delay since the latest message into B within x (none within x: no sample).
Step 2: a candidate parent received t before the child weighs exp(−t/d_{B→C}); the child
being spontaneous weighs as a delay of y·d, exp(−y); the weights of a child are normalised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from linkgrad.paths.candidates import Candidates, candidates, latest_parent_delay
from linkgrad.paths.messages import Trace

__all__ = [
    "DEFAULT_LINKING",
    "MIN_CAUSAL_DELAY_S",
    "LinkProbabilities",
    "LinkingSettings",
    "causal_delay_means",
    "most_likely_parent",
    "wap5_probabilities",
]

# A mean causal delay below this (seconds) is taken as this: delays of 0 on one clock would
# otherwise make every later candidate weigh nothing.
MIN_CAUSAL_DELAY_S = 1e-6


@dataclass(frozen=True)
class LinkingSettings:
    """WAP5 §5.1's parameters, units in the names.

    window_s: x, the longest causal delay a parent may have ("longer than the longest real
      delay in the trace"; the paper used 2 s and 100 ms).
    spontaneous_y: y, a spontaneous message weighs as a link of delay y·d (the paper: 4).
    try_both_low, try_both_high: a link with probability in [low, high] is try-both (§5.1
      step 3: "close to 0.5"); above high it is probably-true, below low probably-false
      unless it is its child's most likely cause.
    max_try_both: k, the try-both decisions allowed per tree (2^k instances at most).
    min_link_p: links less probable than this are not considered at all (their (1 − p) is 1
      for scoring); they bound the possible-children trees.
    clients_spontaneous: messages sent by a client node (one that never listens) start a
      path: a load generator's next request is no effect of its last response.
    """

    window_s: float = 2.0
    spontaneous_y: float = 4.0
    try_both_low: float = 0.25
    try_both_high: float = 0.75
    max_try_both: int = 8
    min_link_p: float = 0.01
    clients_spontaneous: bool = True

    def __post_init__(self) -> None:
        for name in ("window_s", "spontaneous_y"):
            value = getattr(self, name)
            if not (value > 0 and np.isfinite(value)):
                raise ValueError(f"{name}={value!r} must be positive and finite")
        if not 0 < self.try_both_low <= 0.5 <= self.try_both_high < 1:
            raise ValueError(f"try_both_low={self.try_both_low}, try_both_high="
                             f"{self.try_both_high}: need 0 < low <= 0.5 <= high < 1")
        if not 0 <= self.max_try_both <= 30:
            raise ValueError(f"max_try_both={self.max_try_both} must be 0..30")
        if not 0 <= self.min_link_p < 1:
            raise ValueError(f"min_link_p={self.min_link_p} must be in [0, 1)")


DEFAULT_LINKING = LinkingSettings()


@dataclass(frozen=True, eq=False)
class LinkProbabilities:
    """Candidate links with their probabilities (per child, with its spontaneous probability,
    summing to 1). `links.child`/`links.parent` index the trace's messages."""

    links: Candidates
    p: np.ndarray  # per candidate link
    p_spontaneous: np.ndarray  # per message

    def most_likely_parent(self) -> np.ndarray:
        """Per message, its most probable parent, −1 where being spontaneous is (ties: the
        latest parent, as candidates are latest first)."""
        return most_likely_parent(self.links, self.p, self.p_spontaneous)


def causal_delay_means(trace: Trace, latest_delay_s: np.ndarray) -> np.ndarray:
    """d_{B→C} (step 1) per node pair, as an (nodes, nodes) array, from each message's delay
    since the latest message into its sender (`latest_parent_delay`); NaN where no B→C
    message had one within the window."""
    n_nodes = len(trace.nodes)
    has = np.isfinite(latest_delay_s)
    m = trace.messages
    pair = m.src[has].astype(np.int64) * n_nodes + m.dst[has]
    total = np.bincount(pair, weights=latest_delay_s[has], minlength=n_nodes * n_nodes)
    count = np.bincount(pair, minlength=n_nodes * n_nodes)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / count
    return np.maximum(mean, MIN_CAUSAL_DELAY_S).reshape(n_nodes, n_nodes)


def wap5_probabilities(trace: Trace, settings: LinkingSettings = DEFAULT_LINKING,
                       d: np.ndarray | None = None, only: np.ndarray | None = None
                       ) -> LinkProbabilities:
    """Steps 1 and 2 of §5.1 for every message of `trace` (or those `only` marks: the
    others get no candidates).

    A candidate further back than (y + ln(1/min_link_p))·d weighs less than min_link_p of a
    spontaneous message: it is left out before the pairs are made (with x = 2 s at a busy
    node that is hundreds of candidates a message, nearly all of weight ~0)."""
    if d is None:  # step 1, unless the caller has it already
        d = causal_delay_means(trace, latest_parent_delay(trace, settings.window_s))
    m = trace.messages
    reach = settings.spontaneous_y + math.log(1 / max(settings.min_link_p, 1e-12))
    per_child = np.fmin(reach * d[m.src, m.dst], settings.window_s)
    if only is not None:
        per_child = np.where(only, per_child, 0.0)
    links = candidates(trace, np.nan_to_num(per_child, nan=0.0))
    scale = d[m.src[links.child], m.dst[links.child]]
    weight = np.exp(-links.delay_s / scale)  # NaN scale (no estimate): NaN, dropped below
    weight = np.nan_to_num(weight, nan=0.0)
    spontaneous = np.exp(-settings.spontaneous_y)
    if settings.clients_spontaneous:
        weight[trace.clients[m.src[links.child]]] = 0.0
    total = np.bincount(links.child, weights=weight, minlength=len(m)) + spontaneous
    return LinkProbabilities(links, weight / total[links.child], spontaneous / total)


def most_likely_parent(links: Candidates, p: np.ndarray, p_spontaneous: np.ndarray
                       ) -> np.ndarray:
    n = len(p_spontaneous)
    parent = np.full(n, -1, dtype=np.int64)
    if len(p) == 0:
        return parent
    # per child, the first position of its largest probability (reduceat over non-empty runs)
    has = links.count() > 0
    starts = links.start[:-1][has]
    best_p = np.maximum.reduceat(p, starts)
    is_best = p == np.repeat(best_p, links.count()[has])
    position = np.arange(len(p))
    first_best = np.minimum.reduceat(np.where(is_best, position, len(p)), starts)
    chosen = links.parent[first_best]
    beats_spontaneous = best_p > p_spontaneous[has]
    parent[np.flatnonzero(has)[beats_spontaneous]] = chosen[beats_spontaneous]
    return parent

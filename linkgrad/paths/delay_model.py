"""How long a node takes between a message arriving and the call it causes, and how often it
calls on its own: the weights of a call's candidate parents and of its being spontaneous.

WAP5 §5.1 uses one exponential per node pair B→C, mean d_{B→C}, because its ranking
survives a wrong d. But an exponential is memoryless: two contexts waiting for their calls
are then indistinguishable by timing (swapping them leaves the product of the densities
unchanged), and real service times are not memoryless: a handler parses a request in
roughly the same time each time. So once a first pass (§5.1's weights) has linked the trace,
the delays of its links are fitted per *transition* (the parent's sender, the node, the
callee: "a request from web, then a call to db" is not "db's answer, then the next query")
as a lognormal, falling back to the pair's fit; with a broad log-uniform component of weight
OUTLIER_WEIGHT, because real delays have outliers (a first request warming a thread up, a
pause) that a lognormal's thin tail would make impossible.

Fire-and-forget and parallel calls, fitted too: a call may come just after its request was
answered, or just after its context sent another; how often a pair's calls did (in the pass
before) weighs such a context against the ones waiting on nothing.

Spontaneity, fitted too: B's spontaneous calls to C as a Poisson process, its rate counted
from the calls B made while no request of its was ready (plus one half, Jeffreys' prior, over
the trace's duration). A rate and a density are both per second, so they weigh against each other: a
server that never calls on its own links even a slow call to the request it serves, one with
a timer calls spontaneously when no request explains the call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MIN_DELAY_S",
    "MIN_SIGMA",
    "OUTLIER_FROM_S",
    "OUTLIER_WEIGHT",
    "DelayModel",
    "LogNormal",
    "fit_lognormals",
]

MIN_SIGMA = 0.1  # log-space spread floor: a few identical delays must not make a spike
MIN_DELAY_S = 1e-7  # a parent arriving at the very instant the child leaves
OUTLIER_WEIGHT = 0.05  # of the log-uniform component, from OUTLIER_FROM_S to the window
OUTLIER_FROM_S = 1e-5


@dataclass(frozen=True)
class LogNormal:
    mu: float
    sigma: float

    def density(self, delay_s: float) -> float:
        x = max(delay_s, MIN_DELAY_S)
        z = (math.log(x) - self.mu) / self.sigma
        return math.exp(-0.5 * z * z) / (x * self.sigma * math.sqrt(2 * math.pi))

    @property
    def mean_s(self) -> float:
        return math.exp(self.mu + self.sigma ** 2 / 2)


class DelayModel:
    """§5.1's exponentials per pair (a first pass), or fits: densities per transition (parent
    sender, node, callee) and per pair (node, callee), and spontaneous rates per pair."""

    def __init__(self, pair_mean_s: np.ndarray, spontaneous_y: float, window_s: float,
                 transitions: dict[tuple[int, ...], LogNormal] | None = None,
                 pairs: dict[tuple[int, ...], LogNormal] | None = None,
                 spontaneous_per_s: dict[tuple[int, int], float] | None = None,
                 default_spontaneous_per_s: float = 0.0,
                 afterward: dict[tuple[int, int], float] | None = None,
                 siblings: dict[tuple[int, int], float] | None = None,
                 replies: dict[tuple[int, ...], LogNormal] | None = None,
                 reply_pairs: dict[tuple[int, ...], LogNormal] | None = None) -> None:
        self.pair_mean_s = pair_mean_s  # §5.1's d per (node, callee); NaN: none
        self.y, self.window_s = spontaneous_y, window_s
        self.transitions = transitions or {}
        self.pairs = pairs or {}
        self.spontaneous_per_s = spontaneous_per_s or {}
        self.default_spontaneous_per_s = default_spontaneous_per_s
        self.afterward = afterward or {}
        self.siblings = siblings or {}
        self.replies = replies or {}
        self.reply_pairs = reply_pairs or {}
        self.fitted = bool(self.pairs)

    def density(self, parent_sender: int, node: int, callee: int, delay_s: float) -> float:
        """The fitted density of a causal delay (per second), outliers included."""
        fit = self.transitions.get((parent_sender, node, callee)) or self.pairs.get(
            (node, callee))
        x = max(delay_s, MIN_DELAY_S)
        broad = self._outlier_density(x)
        if fit is None:  # a pair without a fit: §5.1's exponential
            d = self.pair_mean_s[node, callee]
            return (1 - OUTLIER_WEIGHT) * math.exp(-x / d) / d + broad if d > 0 else broad
        return (1 - OUTLIER_WEIGHT) * fit.density(x) + broad

    def reply_density(self, parent_sender: int, node: int, requester: int, delay_s: float
                      ) -> float:
        """The fitted density of the delay from a context's latest message to the node's
        reply (per transition, else per pair, else only the outliers' broad density)."""
        fit = self.replies.get((parent_sender, node, requester)) or self.reply_pairs.get(
            (node, requester))
        x = max(delay_s, MIN_DELAY_S)
        broad = self._outlier_density(x)
        return broad if fit is None else (1 - OUTLIER_WEIGHT) * fit.density(x) + broad

    def _outlier_density(self, x: float) -> float:
        """The broad log-uniform component's density at delay x (OUTLIER_FROM_S to the
        window), weighted by OUTLIER_WEIGHT."""
        return OUTLIER_WEIGHT / (max(x, OUTLIER_FROM_S)
                                 * math.log(self.window_s / OUTLIER_FROM_S))

    def afterward_prior(self, node: int, callee: int) -> float:
        """The share of the pair's calls that came after their request was answered (fitted;
        1 before a fit: a first pass lets a closed context compete as an open one)."""
        return self.afterward.get((node, callee), 1.0) if self.fitted else 1.0

    def sibling_prior(self, node: int, callee: int) -> float:
        """The share of the pair's calls that left while their context had just sent another
        (parallel calls; fitted, 1 before a fit)."""
        return self.siblings.get((node, callee), 1.0) if self.fitted else 1.0

    def spontaneous_weight(self, node: int, callee: int) -> float:
        """The weight of a call's being spontaneous, against its candidates' `weight`s
        (unnormalised): the pair's rate once fitted, §5.1's exp(−y) before (1 with no d)."""
        if self.fitted:
            return self.spontaneous_per_s.get((node, callee), self.default_spontaneous_per_s)
        return math.exp(-self.y) if self.pair_mean_s[node, callee] > 0 else 1.0

    def weight(self, parent_sender: int, node: int, callee: int, delay_s: float) -> float:
        """A candidate parent's weight (unnormalised): the fitted density of its delay, or
        §5.1's exp(−t/d) before a fit (0 with no d)."""
        if self.fitted:
            return self.density(parent_sender, node, callee, delay_s)
        d = self.pair_mean_s[node, callee]
        return math.exp(-max(delay_s, 0.0) / d) if d > 0 else 0.0


def fit_lognormals(keys: np.ndarray, delays_s: np.ndarray, min_samples: int
                   ) -> dict[tuple[int, ...], LogNormal]:
    """A lognormal per key (a row of `keys`) with at least `min_samples` delays."""
    if len(delays_s) == 0:
        return {}
    unique, which, count = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    which = which.ravel()
    logs = np.log(np.maximum(delays_s, MIN_DELAY_S))
    mean = np.bincount(which, logs) / count
    spread = np.sqrt(np.maximum(np.bincount(which, logs * logs) / count - mean ** 2, 0.0))
    return {tuple(k): LogNormal(float(mu), max(float(sd), MIN_SIGMA))
            for k, mu, sd, n in zip(unique.tolist(), mean, spread, count, strict=True)
            if n >= min_samples}

"""How long a node takes between a message arriving and the call it causes: the density that
weighs each candidate parent.

WAP5 §5.1 uses one exponential per node pair B→C, mean d_{B→C}, because its ranking
survives a wrong d. But an exponential is memoryless: two contexts waiting for their calls
are then indistinguishable by timing (swapping them leaves the product of the densities
unchanged), and real service times are not memoryless: a handler parses a request in
roughly the same time each time. So once a first pass has linked the trace, the delays of
its links are fitted per *transition* (the parent's sender, the node, the callee: "a
request from web, then a call to db" is not "db's answer, then the next query"), as a
lognormal, falling back to the pair's fit and then to §5.1's exponential.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_SIGMA = 0.1  # log-space spread floor: a few identical delays must not make a spike
MIN_DELAY_S = 1e-7  # a parent arriving at the very instant the child leaves


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
    """Densities per transition (parent sender, node, callee) and per pair (node, callee)."""

    def __init__(self, pair_mean_s: np.ndarray, spontaneous_y: float,
                 transitions: dict[tuple[int, int, int], LogNormal] | None = None,
                 pairs: dict[tuple[int, int], LogNormal] | None = None) -> None:
        self.pair_mean_s = pair_mean_s  # §5.1's d per (node, callee); NaN: none
        self.y = spontaneous_y
        self.transitions = transitions or {}
        self.pairs = pairs or {}

    def density(self, parent_sender: int, node: int, callee: int, delay_s: float) -> float:
        fit = self.transitions.get((parent_sender, node, callee)) or self.pairs.get(
            (node, callee))
        if fit is not None:
            return fit.density(delay_s)
        d = self.pair_mean_s[node, callee]
        return math.exp(-max(delay_s, 0.0) / d) / d

    def mean_s(self, node: int, callee: int) -> float:
        """The pair's mean delay: its fit's, else §5.1's d (NaN: none)."""
        fit = self.pairs.get((node, callee))
        return fit.mean_s if fit is not None else float(self.pair_mean_s[node, callee])

    def weigh(self, node: int, callee: int, parent_senders: list[int], delays_s: list[float]
              ) -> tuple[list[float], float]:
        """Each candidate's probability and the call's being spontaneous.

        Whether the call is spontaneous is §5.1's question, answered as §5.1 does: against
        the exponential of the pair's mean, so a late parent stays likelier than none unless
        it is y means late (a lognormal's thin tail would call every slow step spontaneous).
        Which candidate it is, is shared out by the transitions' densities."""
        d = self.mean_s(node, callee)
        if not d > 0:
            return [0.0] * len(delays_s), 1.0
        near = sum(math.exp(-max(x, 0.0) / d) for x in delays_s)
        p_spontaneous = math.exp(-self.y) / (math.exp(-self.y) + near)
        dens = [self.density(s, node, callee, x) for s, x in zip(parent_senders, delays_s,
                                                                 strict=True)]
        total = sum(dens)
        if not total > 0:  # every density underflowed: the exponential's ranking
            dens = [math.exp(-max(x, 0.0) / d) for x in delays_s]
            total = sum(dens)
        return [(1 - p_spontaneous) * w / total for w in dens], p_spontaneous



def fit_lognormals(keys: list[tuple[int, ...]], delays_s: list[float], min_samples: int
                   ) -> dict[tuple[int, ...], LogNormal]:
    """A lognormal per key with at least `min_samples` delays."""
    by_key: dict[tuple[int, ...], list[float]] = {}
    for k, dl in zip(keys, delays_s, strict=True):
        by_key.setdefault(k, []).append(math.log(max(dl, MIN_DELAY_S)))
    fits = {}
    for k, logs in by_key.items():
        if len(logs) >= min_samples:
            a = np.asarray(logs)
            fits[k] = LogNormal(float(a.mean()), max(float(a.std()), MIN_SIGMA))
    return fits

"""Where should components live? Placement search over sites (thesis §5.6): pure functions.

By eq. 2.1 a placement changes the weighted mean response time by

    Σ_(a,b) W_ab · (L[site'(a), site'(b)] − L[site(a), site(b)]),

W_ab = Σ_apps importance · Σ_transactions mix · gradient(a->b): one quadratic assignment
problem. Small problems are searched exhaustively. Large ones (hundreds of components and
sites) by best-improvement local search — every single move scored at once with two matrix
products — from several starts; its answer comes with a lower bound on the optimum (each pair
term minimised on its own over the sites its ends may take), so the gap to the best possible
placement is known.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

EXHAUSTIVE_LIMIT = 200_000  # placements; above this, local search


@dataclass(frozen=True)
class PlacementProblem:
    hosts: tuple[str, ...]  # every component (a host of some application)
    sites: tuple[str, ...]
    latency_ms: np.ndarray  # (sites, sites) one-way, every entry known
    weight: np.ndarray  # (hosts, hosts) W_ab, ms of weighted response time per ms
    allowed: np.ndarray  # (hosts, sites) bool: where each host may go
    current: np.ndarray  # (hosts,) site index of each host now

    def cost(self, placement: np.ndarray) -> float:
        """Σ W_ab · L[site(a), site(b)] (weighted ms) of one placement (site index per host)."""
        return float(np.sum(self.weight * self.latency_ms[np.ix_(placement, placement)]))

    @property
    def size(self) -> int:
        return math.prod(int(n) for n in self.allowed.sum(axis=1))


@dataclass(frozen=True)
class SearchResult:
    ranked: tuple[tuple[float, tuple[int, ...]], ...]  # (cost, site index per host), best first
    method: str  # "exhaustive" or "local search"
    lower_bound: float  # no placement costs less
    evaluated: int

    @property
    def gap_ms(self) -> float:
        """How far the best found may be above the optimum (0 when searched exhaustively)."""
        return 0.0 if self.method == "exhaustive" else self.ranked[0][0] - self.lower_bound


def lower_bound(problem: PlacementProblem) -> float:
    """Each pair term at its own minimum over the sites its two ends may take."""
    total = 0.0
    a_idx, b_idx = np.nonzero(problem.weight)
    for a, b in zip(a_idx, b_idx, strict=True):
        sa, sb = np.flatnonzero(problem.allowed[a]), np.flatnonzero(problem.allowed[b])
        total += float(np.min(problem.weight[a, b] * problem.latency_ms[np.ix_(sa, sb)]))
    return total


def exhaustive(problem: PlacementProblem, top: int = 5) -> SearchResult:
    choices = [np.flatnonzero(row) for row in problem.allowed]
    best: list[tuple[float, tuple[int, ...]]] = []
    count = 0
    for combo in itertools.product(*choices):
        placement = np.array(combo)
        best.append((problem.cost(placement), tuple(int(s) for s in combo)))
        count += 1
        if len(best) > 4 * top:
            best = sorted(best)[:top]
    return SearchResult(tuple(sorted(best)[:top]), "exhaustive", lower_bound(problem), count)


def _contributions(problem: PlacementProblem, placement: np.ndarray) -> np.ndarray:
    """(hosts, sites): what each host's pair terms would cost were it alone at each site."""
    w, lat = problem.weight, problem.latency_ms
    out_terms = w @ lat[:, placement].T  # Σ_b W[c,b] · L[s, site(b)]
    in_terms = w.T @ lat[placement, :]  # Σ_a W[a,c] · L[site(a), s]
    return out_terms + in_terms


def improve(problem: PlacementProblem, placement: np.ndarray,
            max_moves: int = 100_000) -> tuple[np.ndarray, int]:
    """Best single move until none helps; returns the placement and moves made. After a move
    only the moved host's terms change: the table is updated in O(hosts x sites)."""
    placement = placement.copy()
    w, lat = problem.weight, problem.latency_ms
    contrib = _contributions(problem, placement)
    rows = np.arange(len(placement))
    for moves in range(max_moves):
        gain = np.where(problem.allowed, contrib - contrib[rows, placement][:, None], np.inf)
        c, s = np.unravel_index(np.argmin(gain), gain.shape)
        if not gain[c, s] < -1e-9:
            return placement, moves
        old, placement[c] = placement[c], s
        contrib += np.outer(w[:, c], lat[:, s] - lat[:, old])
        contrib += np.outer(w[c, :], lat[s, :] - lat[old, :])
    return placement, max_moves


def local_search(problem: PlacementProblem, starts: int = 8, seed: int = 0,
                 top: int = 5) -> SearchResult:
    """From the current placement and `starts - 1` random ones, each improved to a local
    optimum; distinct results ranked."""
    rng = np.random.default_rng(seed)
    choices = [np.flatnonzero(row) for row in problem.allowed]
    begin = [problem.current]  # always allowed: staying put is a candidate
    begin += [np.array([rng.choice(c) for c in choices]) for _ in range(starts - 1)]
    found: dict[tuple[int, ...], float] = {}
    evaluated = 0
    for placement in begin:
        placement, moves = improve(problem, placement)
        evaluated += (moves + 1) * int(problem.allowed.sum())
        found[tuple(int(s) for s in placement)] = problem.cost(placement)
    ranked = sorted((cost, p) for p, cost in found.items())[:top]
    return SearchResult(tuple(ranked), "local search", lower_bound(problem), evaluated)


def search(problem: PlacementProblem, top: int = 5) -> SearchResult:
    if problem.size <= EXHAUSTIVE_LIMIT:
        return exhaustive(problem, top)
    return local_search(problem, top=top)

"""Where should components live? Placement search over sites (thesis §5.6): pure functions.

By eq. 2.1 (with ch. 6's second-order term) a placement changes the weighted mean response
time by Σ_(a,b) g_ab·Δ_ab + c_ab·Δ_ab², Δ_ab = L[site'(a), site'(b)] − L[site(a), site(b)],
g_ab and c_ab the importance- and mix-weighted gradients and curvatures. Expanded around the
current latency L⁰_ab this is, up to a constant,

    Σ_(a,b) (g_ab − 2·c_ab·L⁰_ab) · L[site'(a), site'(b)]  +  c_ab · L[site'(a), site'(b)]²

— two quadratic-assignment terms (weight × latency, curvature × latency²). Small problems are
searched exhaustively. Large ones (hundreds of components and sites) by best-improvement local
search — every single move scored at once with matrix products — from several starts; its
answer comes with a Gilmore–Lawler-style lower bound on the optimum, so the gap to the best
possible placement is known.

A ranked placement's interval (`difference`) comes from the gradients' and the latencies'
standard errors, term by term; two placements are within noise of each other when the 95%
interval of their difference holds 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from linkgrad.prediction import Curve, Estimate

__all__ = [
    "EXHAUSTIVE_LIMIT",
    "Compared",
    "PlacementProblem",
    "SearchResult",
    "SitePair",
    "difference",
    "exhaustive",
    "improve",
    "local_search",
    "lower_bound",
    "placement_latency",
    "search",
]

EXHAUSTIVE_LIMIT = 200_000  # placements; above this, local search


@dataclass(frozen=True)
class PlacementProblem:
    hosts: tuple[str, ...]  # every component (a host of some application)
    sites: tuple[str, ...]
    latency_ms: np.ndarray  # (sites, sites) one-way, every entry known
    weight: np.ndarray  # (hosts, hosts) coefficient of L: ms of weighted response time per ms
    allowed: np.ndarray  # (hosts, sites) bool: where each host may go
    current: np.ndarray  # (hosts,) site index of each host now
    curvature: np.ndarray | None = field(default=None)  # (hosts, hosts) coefficient of L²
    latency_se_ms: np.ndarray | None = field(default=None)  # (sites, sites); None: exact

    @classmethod
    def from_curves(cls, hosts: tuple[str, ...], sites: tuple[str, ...], latency_ms: np.ndarray,
                    gradient: np.ndarray, curvature: np.ndarray, allowed: np.ndarray,
                    current: np.ndarray, latency_se_ms: np.ndarray | None = None
                    ) -> PlacementProblem:
        """From weighted gradients and curvatures (per ms of latency *change*): the linear
        coefficient absorbs the curvature's cross term −2·c·L⁰ around the current latency."""
        now = latency_ms[np.ix_(current, current)]
        has_curvature = bool(np.any(curvature))
        return cls(hosts, sites, latency_ms, gradient - 2 * curvature * now, allowed, current,
                   curvature if has_curvature else None, latency_se_ms)

    def terms(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(host-pair coefficient, site-pair matrix) pairs whose products make up the cost."""
        out = [(self.weight, self.latency_ms)]
        if self.curvature is not None:
            out.append((self.curvature, self.latency_ms**2))
        return out

    def cost(self, placement: np.ndarray) -> float:
        """Σ W_ab·L[site(a), site(b)] (+ C_ab·L²) of one placement (site index per host):
        weighted ms, up to a constant that placements share."""
        return float(sum(np.sum(w * m[np.ix_(placement, placement)]) for w, m in self.terms()))

    @property
    def size(self) -> int:
        return math.prod(int(n) for n in self.allowed.sum(axis=1))


SitePair = tuple[Hashable, Hashable]


@dataclass(frozen=True)
class Compared:
    """One transaction's curve on one host pair, with its weight (its share of the mix times
    its application's importance, over the importances' sum) and the pair's sites now and
    under the two placements compared."""

    weight: float
    curve: Curve
    now: SitePair
    first: SitePair
    second: SitePair


def difference(terms: Iterable[Compared], latency: Mapping[SitePair, Estimate]) -> Estimate:
    """Σ weight·(change under the first placement − under the second), ms, with its standard
    error; `latency`: one-way latency between sites (a pair whose sites do not change needs
    none).

    Per term, with d₁, d₂ the pair's latency change under each, the difference is exactly
    (d₁ − d₂)·(g + c·(d₁ + d₂)), and d₁ − d₂ is the latency between its sites under the first
    minus that under the second: the current one cancels, and the same sites at both give
    exactly 0. Its variance has two parts. The gradients': per term, as for a prediction
    (`linkgrad.prediction.Term`), the terms taken as independent (one injection gives every
    transaction's gradient on a link: correlated terms aside). The latencies': one
    measurement serves every pair between its two sites, so each latency's coefficient is
    summed over the terms before it is squared; a latency equal both ways (mean and se) is
    taken as one "a<->b" measurement serving both directions."""
    mean = variance = 0.0
    coefficient: dict[SitePair, float] = {}
    se_of: dict[SitePair, float] = {}
    for t in terms:
        if t.first == t.second:
            continue
        # the latency now matters only to a curvature's slope (and is there: the pair talks)
        now = latency[t.now].mean if t.now in latency else 0.0
        l1, l2 = latency[t.first], latency[t.second]
        d1, d2 = l1.mean - now, l2.mean - now
        g, c, cov = t.curve.gradient, t.curve.curvature, t.curve.covariance
        both = d1 + d2
        slope = g.mean + c.mean * both  # exact: f(d1) − f(d2) = (d1 − d2)·slope
        slope_var = g.variance + both**2 * c.variance + 2 * both * cov
        dd, dd_var = d1 - d2, l1.variance + l2.variance
        mean += t.weight * dd * slope
        variance += t.weight**2 * (dd**2 * slope_var + slope_var * dd_var)
        for pair, sign in ((t.first, 1.0), (t.second, -1.0)):
            key = _measurement(pair, latency)
            coefficient[key] = coefficient.get(key, 0.0) + sign * t.weight * slope
            se_of[key] = latency[pair].se
    variance += sum((k * se_of[key]) ** 2 for key, k in coefficient.items())
    return Estimate(float(mean), math.sqrt(max(variance, 0.0)))


def _measurement(pair: SitePair, latency: Mapping[SitePair, Estimate]) -> SitePair:
    """The latency measurement behind `pair`: one for both directions where they are equal."""
    back = (pair[1], pair[0])
    if back != pair and latency.get(back) == latency[pair] and str(back) < str(pair):
        return back
    return pair


def placement_latency(problem: PlacementProblem) -> dict[SitePair, Estimate]:
    """The problem's latency matrix as `difference` reads it, keyed by site index."""
    se = problem.latency_se_ms if problem.latency_se_ms is not None else \
        np.zeros_like(problem.latency_ms)
    n = len(problem.sites)
    return {(a, b): Estimate(float(problem.latency_ms[a, b]), float(se[a, b]))
            for a in range(n) for b in range(n)}


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
    """Gilmore–Lawler-style bound. Split each pair's cost D_ab(s, t) between its ends (halves;
    all of it to the end that can move when the other is fixed), and let each end's partner
    take its best site for that end's share α_ab:

        cost ≥ Σ_a h_a(site(a)),  h_a(s) = Σ_b α_ab·min_t D_ab(s, t)  ≥  Σ_a min_s h_a(s).

    Never below the bound that minimises every pair on its own, and tighter where a component
    has several partners that cannot all be at their best together."""
    n = len(problem.hosts)
    h = np.where(problem.allowed, 0.0, np.inf)
    choices = [np.flatnonzero(row) for row in problem.allowed]
    coupled = sum((w != 0) for w, _ in problem.terms())
    for a in range(n):  # a host paired with itself (same-site traffic): its own term
        if coupled[a, a]:
            s = choices[a]
            h[a, s] += sum(w[a, a] * m[s, s] for w, m in problem.terms())
    a_idx, b_idx = np.nonzero(np.triu(coupled | coupled.T, k=1))
    for a, b in zip(a_idx, b_idx, strict=True):
        sa, sb = choices[a], choices[b]
        pair = sum(w[a, b] * m[np.ix_(sa, sb)] + w[b, a] * m[np.ix_(sb, sa)].T
                   for w, m in problem.terms())
        share_a = 1.0 if len(sb) == 1 else 0.0 if len(sa) == 1 else 0.5  # a fixed end gives
        h[a, sa] += share_a * pair.min(axis=1)  # its whole pair to the end that can move
        h[b, sb] += (1 - share_a) * pair.min(axis=0)
    return float(np.sum(h.min(axis=1)))


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


def _off_diagonal(w: np.ndarray) -> np.ndarray:
    return w - np.diag(np.diag(w))


def _contributions(problem: PlacementProblem, placement: np.ndarray) -> np.ndarray:
    """(hosts, sites): what each host's terms would cost were it alone moved to each site."""
    total = np.zeros(problem.allowed.shape)
    for w, m in problem.terms():
        pairs = _off_diagonal(w)
        total += pairs @ m[:, placement].T  # Σ_b W[c,b] · M[s, site(b)]
        total += pairs.T @ m[placement, :]  # Σ_a W[a,c] · M[site(a), s]
        total += np.outer(np.diag(w), np.diag(m))  # a host with itself: M[s, s]
    return total


def improve(problem: PlacementProblem, placement: np.ndarray,
            max_moves: int = 100_000) -> tuple[np.ndarray, int]:
    """Best single move until none helps; returns the placement and moves made. After a move
    only the moved host's terms change: the table is updated in O(hosts x sites)."""
    placement = placement.copy()
    terms = [(_off_diagonal(w), m) for w, m in problem.terms()]
    contrib = _contributions(problem, placement)
    rows = np.arange(len(placement))
    for moves in range(max_moves):
        gain = np.where(problem.allowed, contrib - contrib[rows, placement][:, None], np.inf)
        c, s = np.unravel_index(np.argmin(gain), gain.shape)
        if not gain[c, s] < -1e-9:
            return placement, moves
        old, placement[c] = placement[c], s
        for w, m in terms:
            contrib += np.outer(w[:, c], m[:, s] - m[:, old])
            contrib += np.outer(w[c, :], m[s, :] - m[old, :])
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

"""Per-transaction routing between two copies of a tier (thesis §5.5): pure functions.

With a copy of a component at each of two sites, the front end can send each transaction to
the copy where its predicted mean response time is lower (by its link gradients: a transaction
that talks mostly to the web server goes to the near copy, one that talks mostly to the
database to the far one). A fixed ratio r sends r of every transaction to the first copy; its
mean is linear in r, so the best fixed ratio is all-or-nothing under the linear model, and the
per-transaction choice is never worse than it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    transaction: str
    share: float  # of the requests
    at_ms: tuple[float, float]  # predicted mean at copy 0 and copy 1

    @property
    def copy(self) -> int:
        return 0 if self.at_ms[0] <= self.at_ms[1] else 1

    @property
    def gain_ms(self) -> float:
        return abs(self.at_ms[0] - self.at_ms[1])


@dataclass(frozen=True)
class RoutingAdvice:
    routes: tuple[Route, ...]

    def fixed_ratio_ms(self, ratio: float) -> float:
        """Mix-weighted mean when `ratio` of every transaction goes to copy 0."""
        return sum(r.share * (ratio * r.at_ms[0] + (1 - ratio) * r.at_ms[1])
                   for r in self.routes)

    @property
    def best_fixed(self) -> tuple[float, float]:
        """(ratio, mean ms) of the best fixed ratio (an end: the mean is linear in it)."""
        return min(((r, self.fixed_ratio_ms(r)) for r in (0.0, 1.0)), key=lambda x: x[1])

    @property
    def per_transaction_ms(self) -> float:
        return sum(r.share * min(r.at_ms) for r in self.routes)


def advise(mix: Mapping[str, float], at_copy: tuple[Mapping[str, float], Mapping[str, float]]
           ) -> RoutingAdvice:
    """`mix`: transaction -> share; `at_copy`: predicted mean per transaction at each copy."""
    return RoutingAdvice(tuple(Route(n, share, (at_copy[0][n], at_copy[1][n]))
                               for n, share in sorted(mix.items())))

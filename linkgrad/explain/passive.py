"""The passive gradient: a transaction's expected crossings of a host pair on the critical
path, over all of its causal-path patterns (WAP5 §6.1 patterns; Chen 2008 §2.1: a link's
gradient is the number of times the critical path crosses it).

A cache hit 70% of the time crosses the cache link on 30% of requests: the passive gradient
is 0.3, where the dominant pattern alone would say 0. Its interval comes from the path counts:
the requests' crossings are a sample, their mean has a standard error; the requests whose
pattern was not kept (`analyse` keeps a transaction's likeliest few) are unknown and widen
the interval to anything between 0 and the most crossings a pattern of the trace makes, and so
does a share of 3/n for patterns no request showed (the rule of three: with n requests, a
pattern none of them took is rarer than 3/n at 95%). Two 95% bounds taken together make the
interval conservative, wider than 95% needs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# scipy is imported in the functions that use it: a command's --help need not load it

__all__ = ["PassiveGradient", "PatternCrossings", "passive_gradient"]


@dataclass(frozen=True)
class PatternCrossings:
    """A pattern's requests and its mean crossings of each host pair ("a->b")."""

    count: int
    crossings: dict[str, float]


@dataclass(frozen=True)
class PassiveGradient:
    estimate: float
    ci95: tuple[float, float]
    se: float  # of the kept patterns' mean
    requests: int  # traced requests of the transaction
    unmatched: int  # of them, in patterns not kept: counted in the interval, not the mean


def passive_gradient(patterns: Sequence[PatternCrossings], pair: str,
                     requests: int | None = None, most: float = 0.0) -> PassiveGradient | None:
    """The mean crossings of `pair` on the critical path over `patterns`; None without any
    request. `requests`: the transaction's traced requests (None: the patterns' sum); `most`:
    the most crossings any pattern of the trace makes (the unplaced requests' bound, at least
    the kept patterns')."""
    from scipy import stats
    counts = [p.count for p in patterns if p.count > 0]
    n = sum(counts)
    if n == 0:
        return None
    total = max(n, requests or 0)
    values = [float(p.crossings.get(pair, 0.0)) for p in patterns if p.count > 0]
    mean = sum(c * v for c, v in zip(counts, values, strict=True)) / n
    between = sum(c * (v - mean) ** 2 for c, v in zip(counts, values, strict=True)) / n
    # a pattern's mean crossings are a mean over its requests (a parallel branch is critical
    # on some): f(1-f) is the least spread integer crossings with that fractional part have
    within = sum(c * _frac(v) * (1 - _frac(v)) for c, v in zip(counts, values, strict=True)) / n
    se = math.sqrt((between + within) / n)
    # one request has no spread to read: the unseen share below spans it all
    half = float(stats.t.ppf(0.975, n - 1)) * se if n > 1 else 0.0
    lo, hi = max(0.0, mean - half), mean + half
    unmatched = total - n
    unseen = min(1.0, (unmatched + 3) / total)
    most = max(most, *values)
    lo, hi = lo * (1 - unseen), hi * (1 - unseen) + most * unseen
    return PassiveGradient(estimate=mean, ci95=(lo, hi), se=se, requests=total,
                           unmatched=unmatched)


def _frac(v: float) -> float:
    return v - math.floor(v)

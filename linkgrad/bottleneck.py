"""Which resource limits a transfer (Kissel et al. §IV.C): the one whose instantaneous throughput
is lowest, if a t-test says it is lower than each of the others.

Each resource of a transfer (disk read, network send and receive, disk write, each side's CPU)
is summarised by calipers per interval; what it moved over the time it spent moving it is its
*instantaneous throughput* tput_i in that interval (`linkgrad.protocol.transfer.tput_i`): what
the resource moves while it is at work, not while it waits for the others. The
resource with the lowest mean tput_i over the intervals is the candidate; one-sided t-tests
(Welch's, the intervals' tput_i as the samples) of "its mean is lower" against every other decide,
each at alpha / 2 because the candidate was chosen as the lowest (ALPHA).
Where one is not significant, the bottleneck may be any of the statistically similar resources,
and the verdict says which. Resources that cannot be told from what follows them (UNTESTED:
network send) are kept out of the tests, and shown: `bottleneck(tput_i(lines))` is the answer
`linkgrad bottleneck` gives.

    >>> v = bottleneck({"disk.write": [40e6, 41e6, 39e6], "network.receive": [110e6, 112e6,
    ...                 111e6], "network.send": [40e6, 40e6, 41e6]})
    >>> v.describe(), v.untested == {"network.send": UNTESTED["network.send"]}
    ('disk.write is the bottleneck', True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

# scipy is imported in the functions that use it: a command's --help need not load it

__all__ = ["ALPHA", "UNTESTED", "Comparison", "Verdict", "bottleneck"]

# The chance of naming one of two resources that are in truth alike. The candidate is picked as
# the lower of the two, so its one-sided test is made at ALPHA / 2: at ALPHA it would name one
# of two alike resources twice as often as ALPHA says.
ALPHA = 0.05

# Resources a transfer measures that are shown but not tested, and why. The paper tests
# network *read* only: a send blocks while the receiver's window is full, so it is as slow as
# whatever is slowest after it (a slow disk write reads as a slow send) and cannot be told
# from it.
UNTESTED = {"network.send": "a send waits for the receiver's window, so it is as slow as "
                            "whatever is slowest after it: shown, not tested"}


@dataclass(frozen=True)
class Comparison:
    """The candidate against one other resource."""

    other: str
    t: float
    dof: float
    p: float  # of "the candidate's mean tput_i is not lower", one-sided
    lower: bool  # p < alpha / 2: the candidate is slower than this one


@dataclass(frozen=True)
class Verdict:
    candidate: str  # the lowest mean tput_i
    means: dict[str, float]  # resource -> mean tput_i over its intervals (bytes/s), untested too
    intervals: dict[str, int]
    comparisons: tuple[Comparison, ...]
    alpha: float
    untested: dict[str, str] = field(default_factory=dict)  # shown, not tested: why

    @property
    def similar(self) -> tuple[str, ...]:
        """The resources the test cannot tell from the candidate (empty: it is the one)."""
        return tuple(c.other for c in self.comparisons if not c.lower)

    @property
    def bottleneck(self) -> str | None:
        return None if self.similar else self.candidate

    def describe(self) -> str:
        if self.bottleneck is not None:
            return f"{self.candidate} is the bottleneck"
        return ("statistically similar: " + ", ".join((self.candidate, *self.similar))
                + " (any of them may be the bottleneck)")


def bottleneck(tput_i: Mapping[str, Sequence[float]], alpha: float = ALPHA,
               untested: Mapping[str, str] = UNTESTED) -> Verdict:
    """`tput_i`: resource -> its per-interval mean instantaneous throughput; those named in
    `untested` (resource -> why) are given their means but kept out of the tests. ValueError
    with fewer than two tested resources, or a tested one of fewer than two finite intervals
    (no variance, no test)."""
    from scipy import stats
    every = {name: np.asarray([x for x in values if math.isfinite(x)], dtype=float)
             for name, values in tput_i.items()}
    series = {name: x for name, x in every.items() if name not in untested}
    if len(series) < 2:
        raise ValueError(f"{len(series)} resource(s): a bottleneck is one of two or more")
    short = sorted(name for name, x in series.items() if len(x) < 2)
    if short:
        raise ValueError(f"fewer than two intervals with a throughput for {', '.join(short)}: "
                         "no variance to test (run the transfer longer)")
    means = {name: float(x.mean()) for name, x in every.items() if len(x)}
    candidate = min(series, key=lambda n: (means[n], n))
    low = series[candidate]
    comparisons = []
    for name in sorted(series):
        if name == candidate:
            continue
        other = series[name]
        if low.var(ddof=1) == 0 and other.var(ddof=1) == 0:  # constant: t is undefined
            t, p = (-math.inf, 0.0) if means[candidate] < means[name] else (0.0, 1.0)
            dof = float(len(low) + len(other) - 2)
        else:
            result = stats.ttest_ind(low, other, equal_var=False, alternative="less")
            t, p = float(result.statistic), float(result.pvalue)
            dof = float(result.df)
        comparisons.append(Comparison(name, t, dof, p, p < alpha / 2))
    return Verdict(candidate, means, {n: len(x) for n, x in every.items() if len(x)},
                   tuple(comparisons), alpha, {n: untested[n] for n in every if n in untested})

"""A trace's causal paths as linkgrad reports them: one typed value from `analyse` to
`paths.json` and `linkgrad paths --json`, and back.

`PatternResult.of` rounds a pattern once, as reported; what writes the result (a run, `linkgrad
paths`) adds what it knows of the capture with `dataclasses.replace`. The fields, in this order,
are the file's format (tests/data pins it). Plain dataclasses, as the rest of the package: the
coordinator reads a file back into these same classes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from linkgrad.paths.budget import Fallback
from linkgrad.paths.hidden_workers import Fold
from linkgrad.paths.patterns import PathPattern
from linkgrad.paths.wap5 import LinkingSettings

__all__ = ["HopResult", "HostClock", "LinkingBudget", "PathsResult", "PatternResult",
           "finite"]


def finite(x: float) -> float | None:
    """`x` as a float; None when not finite (strict JSON has no NaN)."""
    return None if not math.isfinite(float(x)) else float(x)


@dataclass(frozen=True)
class HopResult:
    """One message of a pattern, in pre-order (`patterns.Hop`, its delays None where NaN)."""

    label: str
    parent: int  # the parent hop's position (-1: the root)
    link: str  # "src host->dst host"
    node_delay_s: float | None  # None: the sender was not traced
    network_delay_s: float | None  # None: an end was not traced, or the clocks not related
    critical: float  # the share of instances with it on the critical path
    # sent by its connection's server end (None: an older file; its label says)
    reply: bool | None = None


@dataclass(frozen=True)
class PatternResult:
    """A path pattern as reported: its probabilities and crossings rounded to 6 digits."""

    key: str
    count: int
    score: float
    max_probability: float
    response_s: float | None  # None: the root's sender was not traced
    crossings: dict[str, float]  # host link -> mean crossings on the critical path
    hops: tuple[HopResult, ...]

    @classmethod
    def of(cls, p: PathPattern) -> PatternResult:
        return cls(key=p.key, count=p.count, score=round(p.score, 6),
                   max_probability=round(p.max_probability, 6),
                   response_s=finite(p.response_s),
                   # probability-weighted means: 2.9999999999999996 is 3
                   crossings={k: round(v, 6) for k, v in p.crossings.items()},
                   hops=tuple(HopResult(label=h.label, parent=h.parent, link=h.link,
                                        node_delay_s=finite(h.node_delay_s),
                                        network_delay_s=finite(h.network_delay_s),
                                        critical=round(h.critical, 6), reply=h.reply)
                              for h in p.hops))


@dataclass(frozen=True)
class HostClock:
    clock_offset_s: float | None  # None: not related to any other host's clock
    clock_reference: str | None  # the host it is measured against


@dataclass(frozen=True)
class LinkingBudget:
    """The time linking was given, and what it took."""

    fraction: float | None  # of the trace's duration (None: no limit)
    seconds: float | None
    linking_s: float
    passes_cut: int  # fitting passes left out to keep it


# the capture's fields: left out of the JSON where the writer had nothing to say
_CAPTURE_FIELDS = ("window", "traced_hosts", "client_requests", "matched_requests",
                   "problems", "at")


@dataclass(frozen=True, kw_only=True)
class PathsResult:
    """The patterns by score, with the hosts' clock offsets; with the trace's requests
    grouped by transaction, each transaction's five likeliest patterns; what linking was
    given and what it cut; and what the writer knew of the capture."""

    linker: str
    settings: LinkingSettings
    messages: int
    nil_send: int  # messages without a send time
    nil_receive: int
    roots: int  # path instances
    hosts: dict[str, HostClock]
    patterns: tuple[PatternResult, ...]  # by score, at most `analyse`'s max_patterns
    patterns_left_out: int
    # what came after the first paths.json, defaulted so a run's older file still reads
    transactions: dict[str, tuple[PatternResult, ...]] = field(default_factory=dict)
    transaction_requests: dict[str, int] = field(default_factory=dict)  # its requests traced
    duration_s: float | None = None
    budget: LinkingBudget | None = None  # None: an older file, linked with no budget
    fallbacks: tuple[Fallback, ...] = ()
    folded: tuple[Fold, ...] = ()  # workers reached by a way the trace lacks
    window: tuple[float, float] | None = None  # a run's passive phase
    traced_hosts: tuple[str, ...] | None = None
    client_requests: int | None = None  # in the trace (a run's)
    matched_requests: int | None = None  # of them, found in the web log
    problems: tuple[str, ...] | None = None  # what a host could not give
    at: float | None = None  # when `linkgrad paths` ended (Unix time)

    def as_json(self) -> dict[str, Any]:  # free-form: the file's JSON, keys in its order
        return {k: v for k, v in asdict(self).items()
                if v is not None or k not in _CAPTURE_FIELDS}

"""Passive first in a run: the facts `linkgrad.explain.strategy` chooses from, gathered from
the passive phase's paths and SNAP reports, and the choice kept as `strategy.json`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from coordinator.config.run_records import MeasuredLink
from coordinator.explain.rows import passive_of
from linkgrad.explain.paths_view import logged_crossings, root_pairs
from linkgrad.explain.strategy import LinkChoice, LinkFacts, Reach, choose_links
from linkgrad.paths.result import PathsResult
from linkgrad.snap.evidence import Report, link_classes

__all__ = ["STRATEGY_FILE", "StrategyFile", "choose", "link_facts"]

STRATEGY_FILE = "strategy.json"


class _Choice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    link: str
    inject: bool
    reasons: list[str]


class StrategyFile(BaseModel):
    """What passive-first chose, and on what calibration."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    strategy: str
    calibration: str | None
    links: list[_Choice]


def link_facts(links: Sequence[MeasuredLink], transactions: Sequence[str],
               paths: PathsResult | None, reports: Sequence[Report],
               addresses: Mapping[str, str], window: tuple[float, float]) -> list[LinkFacts]:
    traced = set(paths.traced_hosts or ()) if paths else set()
    # each transaction's kept patterns, its traced requests and the calls each pattern makes:
    # the same for every link
    kept = {t: paths.transactions.get(t, ()) if paths else () for t in transactions}
    totals = {t: (paths.transaction_requests.get(t) if paths else None)
              or sum(p.count for p in kept[t]) for t in transactions}
    calls = {t: [tuple(sorted(h.label for h in p.hops)) for p in kept[t]]
             for t in transactions if totals[t]}
    roots = {pair for t in transactions for p in kept[t] for pair in root_pairs(p)}
    out = []
    for link in links:
        crossings = {t: passive_of(paths, t, link) for t in transactions}
        patterns = {t: [(p.count / totals[t], logged_crossings(p).get(link.paths_key, 0.0))
                        for p in kept[t]] for t in transactions if totals[t]}
        key = link.snap_key()
        snap = link_classes(reports, addresses, key, window) if key else {}
        out.append(LinkFacts(label=link.label, pair=link.paths_key,
                             hosts=(link.src_host, link.dst_host),
                             traced=paths is not None and (paths.traced_hosts is None or {
                                 link.src_host, link.dst_host} <= traced),
                             crossings=crossings, patterns=patterns, calls=calls, snap=snap,
                             outside=link.paths_key in roots))
    return out


def choose(facts: Sequence[LinkFacts], questions: Sequence[Mapping[str, str]],
           calibration: str | None, reach: Reach | None = None
           ) -> tuple[list[LinkChoice], StrategyFile]:
    choices = choose_links(facts, [frozenset(q) for q in questions], calibration is not None,
                           reach)
    record = StrategyFile(strategy="passive-first", calibration=calibration, links=[
        _Choice(link=c.label, inject=c.inject, reasons=list(c.reasons)) for c in choices])
    return choices, record

"""Every (transaction, link) of a run explained: the injected links' gradients beside the
passive gradients of their causal paths, and every other link of the graph from its paths
alone (`passive-only`)."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.config.hosts_file import HostsFile
from coordinator.config.run_dir import linearity_of
from coordinator.config.run_records import LinkMeasurement, MeasuredLink
from coordinator.config.snap_file import SnapFile
from coordinator.explain.evidence import link_evidence
from linkgrad.explain.calibration import Calibration
from linkgrad.explain.explained import Explained, explain
from linkgrad.explain.passive import PassiveGradient, PatternCrossings, passive_gradient
from linkgrad.explain.paths_view import logged_crossings
from linkgrad.explain.strategy import mixed_paths, unstable_count
from linkgrad.paths.result import PathsResult

__all__ = ["explained_rows", "least_delay", "passive_of"]


def passive_of(paths: PathsResult | None, transaction: str,
               link: MeasuredLink) -> PassiveGradient | None:
    """The transaction's passive gradient on `link`; None where the paths cannot say: no
    paths, no traced request of the transaction, or an end of the link not traced."""
    if paths is None:
        return None
    traced = paths.traced_hosts
    if traced is not None and not {link.src_host, link.dst_host} <= set(traced):
        return None
    patterns = paths.transactions.get(transaction, ())
    # the unplaced requests may take any pattern of the trace, not only the kept ones
    most = max((logged_crossings(p).get(link.paths_key, 0.0) for p in paths.patterns),
               default=0.0)
    return passive_gradient([PatternCrossings(p.count, logged_crossings(p)) for p in patterns],
                            link.paths_key, paths.transaction_requests.get(transaction), most)


def _clear(paths: PathsResult | None, transaction: str, pair: str,
           passive: PassiveGradient | None) -> bool:
    """The transaction's paths on `pair` neither mixed nor unstable (passive-first's test)."""
    if paths is None or passive is None or unstable_count(passive):
        return False
    kept = paths.transactions.get(transaction, ())
    total = paths.transaction_requests.get(transaction) or sum(p.count for p in kept)
    return not total or not mixed_paths(
        [(p.count / total, logged_crossings(p).get(pair, 0.0)) for p in kept])


def least_delay(measurements: Sequence[LinkMeasurement]) -> dict[str, LinkMeasurement]:
    """Per link, its measurement at the least delay (a gradient is a derivative), which the
    row's gradient, SNAP classes and hosts' load all come from."""
    least: dict[str, LinkMeasurement] = {}
    for m in measurements:
        held = least.get(m.link.label)
        if held is None or m.record.magnitude_ms < held.record.magnitude_ms:
            least[m.link.label] = m
    return least


def explained_rows(measurements: Sequence[LinkMeasurement], graph: Sequence[MeasuredLink],
                   transactions: Sequence[str], paths: PathsResult | None,
                   snap: SnapFile | None, hosts: HostsFile | None,
                   calibration: Calibration | None = None,
                   training: tuple[float, float] | None = None) -> list[Explained]:
    """A row per transaction and link, the injected links first in the graph's order. A link
    measured at several delays is explained at its least (a gradient is a derivative)."""
    least = least_delay(measurements)
    linear = linearity_of(list(measurements))
    # a transaction the gradients name that the experiment no longer does still has rows
    transactions = list(dict.fromkeys([*transactions, *(
        n for m in least.values() for n in m.transactions)]))
    links = [*(m.link for m in least.values()),
             *(g for g in graph if g.label not in least)]
    rows = []
    for name in transactions:
        patterns = paths.transactions.get(name, ()) if paths else ()
        for link in links:
            passive = passive_of(paths, name, link)
            m = least.get(link.label)
            t = m.transactions.get(name) if m else None
            if (t is None or t.gradient is None) and passive is None:
                continue  # neither side says anything of it
            if m is None or t is None or t.gradient is None:
                rows.append(explain(name, link.label, link.paths_key, None, None, passive, None,
                                    tuple(t.notes) if t else (), calibration))
                continue
            evidence = link_evidence(m, name, snap, hosts, linear, patterns, training)
            rows.append(explain(name, link.label, link.paths_key, t.gradient, t.ci95, passive,
                                evidence, tuple(t.notes), calibration, t.dof,
                                clear=_clear(paths, name, link.paths_key, passive)))
    return rows

"""Causal paths from the hosts' traces and the web log, as a run, `linkgrad paths` and a
relinking benchmark all make them: the traces reconciled into one, hidden workers folded, each
client request matched to its transaction in the web log, then linked and analysed."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from linkgrad.paths.analysis import (
    Linked,
    client_requests,
    link,
    match_requests,
    summarize,
)
from linkgrad.paths.budget import Progress
from linkgrad.paths.hidden_workers import fold_hidden_workers
from linkgrad.paths.messages import Trace
from linkgrad.paths.reconcile import HostTrace, reconcile
from linkgrad.paths.result import PathsResult
from linkgrad.paths.wap5 import LinkingSettings
from linkgrad.transactions import group_by_transaction, patterns_from

__all__ = ["LinkedHosts", "WebLog", "link_hosts", "paths_from_hosts", "paths_of",
           "transactions_in_log"]


class WebLog(Protocol):
    """What the linking reads of a web log (linkgrad.weblog's RequestLog, which this layer
    does not import): each request's start, response time and URL."""

    @property
    def start_s(self) -> np.ndarray: ...
    @property
    def response_s(self) -> np.ndarray: ...
    @property
    def url(self) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class LinkedHosts:
    """The hosts' traces linked (`link_hosts`), with each client request the web log saw
    and its transaction (None: no web log)."""

    linked: Linked
    hosts: tuple[str, ...]  # the traced hosts' names, sorted
    transaction_of: dict[int, str] | None  # root message -> transaction


def link_hosts(hosts: Sequence[HostTrace], linker: str, window_s: float,
               budget: float | None, log: WebLog | None = None,
               transactions: Mapping[str, str] | None = None,
               progress: Callable[[Progress], None] | None = None) -> LinkedHosts:
    """`hosts` reconciled into one trace, its hidden workers folded, each client request
    matched to the web `log`'s transactions, then linked (`analysis.link`)."""
    # folded before matching: a hidden worker's calls are no client's requests
    trace, folds = fold_hidden_workers(reconcile(list(hosts)))
    transaction_of = None if log is None else transactions_in_log(trace, log,
                                                                  transactions or {})
    linked = link(trace, linker, LinkingSettings(window_s=window_s), budget, progress, folds)
    return LinkedHosts(linked, tuple(sorted(h.name for h in hosts)), transaction_of)


def paths_from_hosts(hosts: Sequence[HostTrace], linker: str, window_s: float,
                     budget: float | None, log: WebLog | None = None,
                     transactions: Mapping[str, str] | None = None,
                     progress: Callable[[Progress], None] | None = None) -> PathsResult:
    """paths.json's analysis of `hosts` (but for the capture's window and problems); with a
    web `log`, each transaction's patterns and how many client requests the log saw."""
    return paths_of(link_hosts(hosts, linker, window_s, budget, log, transactions, progress),
                    linker, window_s)


def paths_of(done: LinkedHosts, linker: str, window_s: float) -> PathsResult:
    """paths.json's analysis of hosts already linked (`link_hosts`)."""
    linked = done.linked
    result = summarize(linked, linker, LinkingSettings(window_s=window_s),
                       transaction_of=done.transaction_of)
    result = replace(result, traced_hosts=done.hosts)
    if done.transaction_of is None:
        return result
    return replace(result, client_requests=len(client_requests(linked.trace)),
                   matched_requests=len(done.transaction_of))


def transactions_in_log(trace: Trace, log: WebLog, transactions: Mapping[str, str]
                        ) -> dict[int, str]:
    """Each client request in the trace that the web log saw (by when its answer ended, or
    it arrived, at the front end) -> its transaction."""
    name_of_row: dict[int, str] = {}
    for name, rows in group_by_transaction(log.url, patterns_from(transactions)).items():
        for row in rows.tolist():
            name_of_row.setdefault(row, name)  # overlapping classes: the first named
    return {root: name_of_row[row] for root, row in match_requests(
        trace, log.start_s, log.start_s + log.response_s).items()
            if row in name_of_row}

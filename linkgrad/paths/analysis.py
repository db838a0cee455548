"""A reconciled trace's causal paths, from linking to the patterns a user reads (paths.json).

`analyse` folds the workers a server reaches unseen into its node (`hidden_workers`), links
the trace (WAP5 §5.1, FCFS, or context linking), builds each root's path instances (§5.1 step
3), aggregates them into patterns (§2.5.1, §6.6), and estimates the clock offsets that take
the skew out of the network delays (§5.2). The result is a `PathsResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from linkgrad.paths.budget import Budget, Fallback, Progress
from linkgrad.paths.clocks import ClockOffsets, clock_offsets
from linkgrad.paths.hidden_workers import Fold, fold_hidden_workers
from linkgrad.paths.instances import PathInstance, path_instances
from linkgrad.paths.messages import Trace
from linkgrad.paths.patterns import aggregate
from linkgrad.paths.result import (
    HostClock,
    LinkingBudget,
    PathsResult,
    PatternResult,
    finite,
)
from linkgrad.paths.structural import context_probabilities, fcfs_probabilities
from linkgrad.paths.wap5 import (
    DEFAULT_LINKING,
    LinkingSettings,
    LinkProbabilities,
    wap5_probabilities,
)

__all__ = [
    "DEFAULT_BUDGET",
    "LINKERS",
    "Linked",
    "analyse",
    "client_requests",
    "link",
    "match_requests",
    "summarize",
    "trace_duration_s",
]

DEFAULT_BUDGET = 0.1  # linking's share of the capture's duration (`budget`)

LINKERS: dict[str, Callable[[Trace, LinkingSettings], LinkProbabilities]] = {
    "context": context_probabilities,  # ours: §5.1's timing within request contexts
    "wap5": wap5_probabilities,  # §5.1 as the paper has it
    "fcfs": fcfs_probabilities,  # the oldest ready context (TraceWeaver's baseline)
}


@dataclass(frozen=True, eq=False)
class Linked:
    """A trace linked: its messages' link probabilities, each root's likeliest instance (the
    requests' trees), the hosts' clock offsets, and what linking took and cut."""

    trace: Trace  # hidden workers folded
    folds: tuple[Fold, ...]
    probs: LinkProbabilities
    roots: int  # trees built (every root's)
    best: tuple[PathInstance, ...]  # each root's likeliest instance, roots in time order
    offsets: ClockOffsets
    duration_s: float
    budget: LinkingBudget
    fallbacks: tuple[Fallback, ...]


def link(trace: Trace, linker: str = "context", settings: LinkingSettings = DEFAULT_LINKING,
         budget: float | None = DEFAULT_BUDGET,
         progress: Callable[[Progress], None] | None = None,
         folds: list[Fold] | None = None) -> Linked:
    """`trace` linked into request trees. Context linking takes at most `budget` times the
    trace's duration (None: no limit), saying what it cut (`fallbacks`); `progress` hears how
    it goes, about once a second. `folds`: the trace's hidden workers already folded
    (`fold_hidden_workers`, before its requests were matched to the web log); None: folded
    here."""
    if linker not in LINKERS:
        raise ValueError(f"linker {linker!r}: expected one of {sorted(LINKERS)}")
    if folds is None:
        trace, folds = fold_hidden_workers(trace)
    duration_s = trace_duration_s(trace)
    limit = Budget(None if budget is None else budget * duration_s, progress,
                   node_names=trace.nodes)
    if linker == "context":
        probs = context_probabilities(trace, settings, budget=limit, worker_nodes={
            trace.nodes.index(f.into) for f in folds})
    else:
        probs = LINKERS[linker](trace, settings)
    linking_s = limit.elapsed_s()
    per_root = path_instances(probs, settings)
    return Linked(trace=trace, folds=tuple(folds), probs=probs, roots=len(per_root),
                  best=tuple(inst[0] for inst in per_root if inst),
                  offsets=clock_offsets(trace), duration_s=duration_s,
                  budget=LinkingBudget(fraction=budget, seconds=limit.seconds,
                                       linking_s=round(linking_s, 3),
                                       passes_cut=limit.passes_cut),
                  fallbacks=tuple(limit.fallbacks))


def analyse(trace: Trace, linker: str = "context",
            settings: LinkingSettings = DEFAULT_LINKING, max_patterns: int = 200,
            transaction_of: Mapping[int, str] | None = None,
            budget: float | None = DEFAULT_BUDGET,
            progress: Callable[[Progress], None] | None = None,
            folds: list[Fold] | None = None) -> PathsResult:
    """paths.json for `trace`, but for the capture's fields its writer adds: patterns by
    score, with the hosts' clock offsets; with `transaction_of` (root message ->
    transaction), the patterns of each transaction too. Linking as `link` does it."""
    return summarize(link(trace, linker, settings, budget, progress, folds), linker, settings,
                     max_patterns, transaction_of)


def summarize(linked: Linked, linker: str, settings: LinkingSettings,
              max_patterns: int = 200, transaction_of: Mapping[int, str] | None = None
              ) -> PathsResult:
    """paths.json of a linked trace (`analyse`)."""
    trace, offsets, best = linked.trace, linked.offsets, linked.best
    patterns = aggregate(best, trace, offsets)
    m = trace.messages
    by_transaction: dict[str, tuple[PatternResult, ...]] = {}
    requests_of: dict[str, int] = {}
    if transaction_of is not None:
        groups: dict[str, list[PathInstance]] = {}
        for inst in best:
            if inst.root in transaction_of:
                groups.setdefault(transaction_of[inst.root], []).append(inst)
        by_transaction = {name: tuple(PatternResult.of(p)
                                      for p in aggregate(group, trace, offsets)[:5])
                          for name, group in sorted(groups.items())}
        requests_of = {name: len(group) for name, group in sorted(groups.items())}
    return PathsResult(
        linker=linker, settings=settings, messages=len(m),
        nil_send=int(np.isnan(m.send_s).sum()), nil_receive=int(np.isnan(m.recv_s).sum()),
        roots=linked.roots,
        hosts={h: HostClock(clock_offset_s=finite(offsets.offset_s[i]),
                            clock_reference=(trace.hosts[offsets.reference[i]]
                                             if offsets.reference[i] >= 0 else None))
               for i, h in enumerate(trace.hosts)},
        patterns=tuple(PatternResult.of(p) for p in patterns[:max_patterns]),
        patterns_left_out=max(0, len(patterns) - max_patterns),
        transactions=by_transaction, transaction_requests=requests_of,
        duration_s=linked.duration_s, budget=linked.budget, fallbacks=linked.fallbacks,
        folded=linked.folds)


def trace_duration_s(trace: Trace) -> float:
    """From the trace's first recorded time to its last (0 for an empty trace)."""
    m = trace.messages
    times = np.concatenate([m.send_s, m.recv_s])
    times = times[np.isfinite(times)]
    return float(times.max() - times.min()) if len(times) else 0.0


def client_requests(trace: Trace) -> np.ndarray:
    """The messages that start a request: sent by a client node (one that never listens)."""
    return np.flatnonzero(trace.clients[trace.messages.src])


def match_requests(trace: Trace, request_start_s: np.ndarray,
                   request_end_s: np.ndarray | None = None, tolerance_s: float = 0.005
                   ) -> dict[int, int]:
    """Each client request message -> the web-log request it is (its row), each row taken
    once. The log's times are the server's clock, as the trace's times at the server are.
    With the log's end times, a request whose answer the trace has is the row that ended
    nearest its answer's last byte (within `tolerance_s`) and did not start before it
    arrived: a busy server starts a request (Apache's %{msec}t) only when a worker takes it
    from the backlog, long after it arrived. Otherwise, the row that started nearest its
    arrival (within `tolerance_s`)."""
    roots = client_requests(trace)
    m = trace.messages
    arrival = m.recv_s[roots]
    taken: set[int] = set()
    out: dict[int, int] = {}
    if request_end_s is not None:
        answer = _answers(trace, roots)
        has = answer >= 0
        at = np.where(has, answer, 0)
        done = np.where(np.isfinite(m.send_end_s[at]), m.send_end_s[at], m.send_s[at])
        done = np.where(has, done, np.nan)
        ends = _Sorted(request_end_s)
        for root, t, d in zip(roots.tolist(), arrival.tolist(), done.tolist(), strict=True):
            if np.isfinite(t) and np.isfinite(d):
                row = ends.claim(d, tolerance_s, taken, range(-3, 3),
                                 lambda j, t=t: request_start_s[j] >= t - tolerance_s)
                if row is not None:
                    out[root] = row
    starts = _Sorted(request_start_s)
    for root, t in zip(roots.tolist(), arrival.tolist(), strict=True):
        if root not in out and np.isfinite(t):
            row = starts.claim(t, tolerance_s, taken, range(-2, 2))
            if row is not None:
                out[root] = row
    return out


class _Sorted:
    """Log times sorted once, for claiming the row nearest a time."""

    def __init__(self, times: np.ndarray) -> None:
        self.times = times
        self.order = np.argsort(times, kind="stable")
        self.sorted = times[self.order]

    def claim(self, t: float, tolerance_s: float, taken: set[int], around: range,
              allowed: Callable[[int], bool] = lambda _: True) -> int | None:
        """The row, among `around` the insertion point of `t`, nearest `t` within
        `tolerance_s`, not taken and `allowed`; taken now. None if there is none."""
        i = int(np.searchsorted(self.sorted, t))
        near = [int(self.order[j]) for j in (i + k for k in around)
                if 0 <= j < len(self.sorted) and abs(self.sorted[j] - t) <= tolerance_s]
        near = [j for j in near if j not in taken and allowed(j)]
        if not near:
            return None
        row = min(near, key=lambda j: abs(self.times[j] - t))
        taken.add(row)
        return row


def _answers(trace: Trace, requests: np.ndarray) -> np.ndarray:
    """Per request message, the next message on its connection if the server sent it (its
    answer), else -1."""
    m = trace.messages
    by_conn = np.argsort(m.conn, kind="stable")  # each connection's messages in time order
    position = np.empty(len(m), dtype=np.int64)
    position[by_conn] = np.arange(len(m))
    after = position[requests] + 1
    nxt = by_conn[np.minimum(after, len(m) - 1)] if len(m) else after
    ok = (after < len(m)) & (m.conn[nxt] == m.conn[requests]) & trace.is_reply()[nxt]
    return np.where(ok, nxt, -1)

"""SNAP's Table 2 classifier against the injected problems (SNAP §4.1, §4.2): precision and
recall of each class per (connection, interval), at several polling intervals side by side.

The run is testbed.snap_validation's (the workload of testbed.snap_workload: one connection
per class between two namespaces, the injector making the loss, the blackouts and the RTT),
longer than the test's (--seconds, 60 by default). On each end one `python -m sniffer` per
polling interval profiles the same traffic at once. Each pins its interval I: table_interval_s
= table_interval_max_s = fast_interval_min_s = I, so the §7 budget neither slows the table for
CPU nor polls a problem connection faster (down to 50 ms by default, which would leave I
meaningless for exactly the connections scored); reads are Poisson with mean I (§2.1),
seeded (the same schedule every run); 0.5 s is SNAP's (§3.2) and our default table
interval. Reports every 0.1 s, with the sums in each.

Intervals. The profiler sends a full record for a problem interval only, and for the others
only each connection's sums per report (`polls`: the intervals that moved data or had a
problem; first_s, last_s: where they start and end). No setting logs every interval, so the
intervals are rebuilt: with the interval pinned, every socket of a host is read at the same
times, and each read time bounds a record or a sums entry of some connection on it; a
connection's intervals are its host's consecutive read times over its life (its first from
the read before it appeared). Checked, in the JSON: each record is one rebuilt interval; a
report never counts more of a connection's intervals than were rebuilt in it (where it
does, a read showed no boundary: the report's longest interval that no connection has a
record of stands for the missing ones); rebuilt minus `polls` are idle intervals (nothing
sent or received: app_limited, logged by nothing): on the timeout connection the waits
between its backoff retransmissions, elsewhere a few intervals shorter than the gaps between
the sends.

Labels, per (connection, interval (a, b]), from what was injected, not from what SNAP saw:
- warm-up: an interval starting before start + --warmup-s (1 s; start = the injections are
  added and the clients start) is not scored: the handshakes, the delayed-ACK connection's
  first request (Linux quickacks at a connection's start), slow start of the bulk flows. The
  first cut starts at start + 1 s, so no cut is lost to it.
- send_buffer, receiver_window, delayed_ack: their class in every interval after the warm-up
  (each one's cause is on from the start: an 8 KiB send buffer with a 10 ms RTT, a 4 KiB
  receive buffer read 1 KiB every 2 ms, Nagle holding the second half of every request for
  the delayed ACK of the first).
- fast_retransmit (2% random loss at 2 MB/s): in the intervals where a segment the injector
  dropped (its drop times, asked of it after the run) is surely retransmitted, the drop within
  (a − 0, b − 30 ms]; none where no drop's retransmission can fall; an interval a drop's
  retransmission may fall either side of is not scored. (A short interval holds no loss at
  all, about exp(−λT) of them: the labels "throughout" of runs before drop times counted them
  as misses; that score is reported beside.)
- timeout: `timeout` in the intervals that overlap a stall, [cut start, the end of the
  client's request that the cut stalled] (from the schedule and the client's log: the cut and
  the RTO backoff until a retransmission got through), after its head; none outside. An
  interval meeting a stall only in its head (its first 200 ms, Linux's least RTO: no RTO can
  have fired yet, and to the kernel too the lost segment is only a late ACK; SNAP's class is
  diff(#Timeout) > 0) is not scored; the recall with the heads scored is reported beside.
- healthy: none.
Scored ends: the data sender's (Problem.seen_at: the server for the bulk flows, the client
for delayed_ack, both for timeout and healthy), where Table 2's statistics live. The other
ends (the bulk flows' and the delayed-ACK connection's receivers) carry no class and are
scored apart: every class there is a false positive.
For each class c: TP = labeled c and classified c; FP = classified c, not labeled c (on any
scored connection; counted by connection, a co-occurring class named as what it is); FN =
labeled c, not classified c; app_limited is scored the same way (labeled: no problem).

    sudo nice -n 5 .venv/bin/python -m benchmarks.snap_classes [--seconds 60]
        [--intervals 0.5,0.2,1.0] [--warmup-s 1.0] [--raw run.json.gz]
    quick (~20 s): --quick (15 s of workload); offline: --rescore run.json.gz

Writes benchmarks/out/snap_classes.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import time
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.results_md import update_section
from linkgrad.protocol.snap import Profile, Profiling, SnapReportEvent
from linkgrad.snap.classify import DEFAULTS, PROBLEMS, TCP_RTO_MIN_MS
from testbed.snap_validation import (
    ENDS,
    NO_PROBLEM,
    Observed,
    Run,
    collect,
    kind_of_port,
    run_workload,
)
from testbed.snap_workload import BY_KIND, KINDS, WorkloadLine, WorkloadSettings

# A stall's first 200 ms (Linux's least RTO) is its head: no RTO (nor a probe for one
# segment) can fire in it, and to the kernel too the lost segment is only a late ACK; an
# interval meeting a stall only there is not scored (SNAP's timeout is diff(#Timeout) > 0).
HEAD_S = TCP_RTO_MIN_MS / 1e3
# A dropped segment of the lossy connection (RTT ~0.1 ms, no delay injected on it) is
# retransmitted within this after the drop: SACK/RACK within an RTT and a reordering window,
# a tail-loss probe within its PTO (~10 ms), an RTO (200 ms+) being the timeout class.
RETX_S = (0.0, 0.03)
OUT = Path(__file__).with_name("out") / "snap_classes.json"
CLASSES = (*PROBLEMS, NO_PROBLEM)
GOAL = 0.95
SRTT_SETTLE_S = 1.0  # how long after a recovery srtt may hold its backoff-long RTT sample
REPORT_INTERVAL_S = 0.1  # the protocol's finest: a report rarely holds two reads
DEFAULT_INTERVAL = "0.5"
# SNAP §4.2 on each class (and Fig. 3 for the delayed ACK)
SNAP_SAYS = {
    "send_buffer": "depends on Poisson sampling catching the buffer full (ours: the kernel's "
                   "sndbuf_limited counter)",
    "fast_retransmit": "always accurate (a counter)",
    "timeout": "always accurate (a counter)",
    "delayed_ack": "inferred from SumRTT; count error 0.006-0.2 (Fig. 3)",
    "receiver_window": "always accurate (a counter)",
    NO_PROBLEM: "none of the above (no figure)",
}
# a class on a connection made for another, legitimately or not: what it is (the test's ALLOWED)
CO_OCCURRING = {
    ("fast_retransmit", "timeout"): "tail-loss probe before a cut's first RTO (RFC 8985)",
    ("delayed_ack", "timeout"): "classifier artefact: srtt holds the RTT sample spanning the "
                                "backoff",
    ("timeout", "fast_retransmit"): "a lost retransmission of the 2% loss ended in an RTO",
    ("fast_retransmit", "send_buffer"): "a probe while an ACK was late, its D-SACK in a later "
                                        "interval",
    ("fast_retransmit", "receiver_window"): "a probe while an ACK was late, its D-SACK in a "
                                            "later interval",
}


@dataclass
class Intervals:
    """One connection's intervals as one end's profiler saw them, rebuilt (module doc)."""

    start_s: np.ndarray
    end_s: np.ndarray
    classes: list[frozenset[str]]  # problem classes (empty: app_limited)
    recorded: np.ndarray  # a record was sent for it
    weight: np.ndarray  # how many intervals it stands for: 1, more where a read was missed
    merged: int  # reads missed on its host (should be 0)
    unmatched_records: int  # records that are no rebuilt interval (should be 0)
    polls: int = 0  # its sums' count of intervals that moved data or had a problem
    missing: int = 0  # intervals its reports counted beyond those rebuilt in them
    # idle ones: (the intervals without a record in a report, how many of them were idle)
    idle: list[tuple[list[int], int]] = field(default_factory=list)


def profiles(intervals: list[float]) -> dict[str, Profile]:
    """One pinned `profile` request per polling interval (module doc)."""
    return {f"{i:g}": Profile(report_interval_s=REPORT_INTERVAL_S,
                              sums_interval_s=REPORT_INTERVAL_S,
                              table_interval_s=i, table_interval_max_s=i, fast_interval_min_s=i,
                              max_queuing_delay_s=DEFAULTS.max_queuing_delay_s,
                              delayed_ack_timeout_s=DEFAULTS.delayed_ack_timeout_s,
                              socket_calls=False, seed=100 + n)
            for n, i in enumerate(intervals)}


@dataclass
class EndLog:
    """One end's reports by workload connection: per report window (from, to], each kind's
    sums entry (None: it moved nothing and had no problem then), and each kind's records."""

    windows: list[tuple[float, float]]
    sums: dict[str, list[Any]]  # kind -> entry or None, one per window
    records: dict[str, list[Any]]


def end_log(events: list[SnapReportEvent], end: str, settings: WorkloadSettings) -> EndLog:
    kind_of = kind_of_port(settings)
    log = EndLog([], {k: [] for k in KINDS}, {k: [] for k in KINDS})
    for e in events:
        log.windows.append((e.from_s, e.to_s))
        entries: dict[str, Any] = {}
        for c in e.connections:
            server_port = c.local.port if end == "server" else c.remote.port
            if server_port in kind_of:
                entries[kind_of[server_port]] = c
        for k in KINDS:
            log.sums[k].append(entries.get(k))
        for r in e.records:
            server_port = r.local.port if end == "server" else r.remote.port
            if server_port in kind_of:
                log.records[kind_of[server_port]].append(r)
    return log


def rebuild(observed: Observed, settings: WorkloadSettings
            ) -> dict[tuple[str, str], Intervals]:
    """Every interval of every workload connection on each end (module doc)."""
    out = {}
    for end in ENDS:
        log = end_log(observed.reports[end], end, settings)
        entries = {k: [c for c in log.sums[k] if c is not None] for k in KINDS}
        own = {k: sorted({t for c in entries[k] for t in (c.first_s, c.last_s)}
                         | {t for r in log.records[k] for t in (r.from_s, r.to_s)})
               for k in KINDS if entries[k] or log.records[k]}
        # a new socket's first interval starts at the start of the read before it appeared
        # (its dump's sample time comes after): no read time of the others
        host = sorted({t for times in own.values() for t in times[1:]})
        got = {}
        for k, times in own.items():
            # between its start and its first read, the sample time of that earlier read
            reads = [times[0], *host[bisect_left(host, times[1]):bisect_right(host,
                                                                              times[-1])]]
            got[k] = _intervals(np.array(reads), log.records[k])
        _count(got, log)
        out |= {(k, end): iv for k, iv in got.items()}
    return out


def _intervals(times: np.ndarray, records: list[Any]) -> Intervals:
    start, stop = times[:-1], times[1:]
    index = {(float(a), float(b)): i for i, (a, b) in enumerate(zip(start, stop, strict=True))}
    classes = [frozenset[str]()] * len(start)
    recorded = np.zeros(len(start), bool)
    unmatched = 0
    for r in records:
        i = index.get((r.from_s, r.to_s))
        if i is None:
            unmatched += 1
            continue
        classes[i] = frozenset(c for c in r.classes if c in PROBLEMS)
        recorded[i] = True
    return Intervals(start, stop, classes, recorded, np.ones(len(start), int), 0, unmatched)


def _count(got: dict[str, Intervals], log: EndLog) -> None:
    """Each report's sums against the intervals rebuilt in it: fewer counted are idle ones;
    more, a read no boundary showed (two intervals rebuilt as one). Such a read is missing on
    the whole host: the longest interval without a record ending in that report, on every
    connection, stands for one more."""
    for w, (from_s, to_s) in enumerate(log.windows):
        spans = {}
        for k, iv in got.items():
            lo, hi = np.searchsorted(iv.end_s, [from_s, to_s], side="right")
            quiet = [i for i in range(lo, hi) if not iv.recorded[i]]
            c = log.sums[k][w]
            moved = 0 if c is None else c.polls - c.problem_intervals
            iv.polls += 0 if c is None else c.polls
            iv.missing += max(0, moved - len(quiet))
            if len(quiet) > moved:
                iv.idle.append((quiet, len(quiet) - moved))
            spans[k] = (quiet, moved - len(quiet))
        lost = max(n for _, n in spans.values())
        if lost <= 0:
            continue
        # no record shows the read missed: the merged interval is quiet on every connection
        ends = [{float(got[k].end_s[i]) for i in quiet} for k, (quiet, _) in spans.items()
                if quiet]
        candidates = set.intersection(*ends) or set.union(*ends)
        some = next(iv for iv in got.values() if np.isin(iv.end_s, list(candidates)).any())
        at = np.flatnonzero(np.isin(some.end_s, list(candidates)))
        longest = some.end_s[at[np.argmax(some.end_s[at] - some.start_s[at])]]
        for iv in got.values():
            hit = iv.end_s == longest
            if hit.any():
                iv.weight[hit] += lost
                iv.merged += lost


def stall_windows(run: Run) -> list[dict[str, Any]]:
    """Each cut and the stall it made: [cut start, end of the client's request it held]."""
    stalls = run.stalls()
    out = []
    for from_s, to_s in run.cuts():
        held = [s for s in stalls if s[0] <= to_s and s[1] >= from_s]
        out.append({"cut": (from_s, to_s), "stalled_requests": len(held),
                    "window": (from_s, max([to_s] + [s[1] for s in held]))})
    return out


def labels(kind: str, end: str, iv: Intervals, windows: list[tuple[float, float]],
           head_s: float = HEAD_S, drops_s: Sequence[float] | None = None
           ) -> list[frozenset[str] | None]:
    """The injected classes of each interval (module doc); the receivers' ends carry none.
    None: not scored (a stall's head; a drop whose retransmission may fall either side of the
    interval's edge)."""
    if end not in BY_KIND[kind].seen_at or kind == "healthy":
        return [frozenset()] * len(iv.start_s)
    if kind == "fast_retransmit" and drops_s is not None:
        return _loss_labels(iv, np.sort(np.asarray(drops_s)))
    if kind != "timeout":
        return [frozenset({kind})] * len(iv.start_s)
    out: list[frozenset[str] | None] = []
    for a, b in zip(iv.start_s, iv.end_s, strict=True):
        if any(a < w1 and b > w0 + head_s for w0, w1 in windows):
            out.append(frozenset({"timeout"}))
        elif any(a < w1 and b > w0 for w0, w1 in windows):
            out.append(None)
        else:
            out.append(frozenset())
    return out


def _loss_labels(iv: Intervals, drops: np.ndarray) -> list[frozenset[str] | None]:
    """fast_retransmit where a drop's retransmission surely falls in the interval (the drop
    within (a − RETX_MIN_S, b − RETX_MAX_S]), none where no drop's can, else not scored."""
    lo, hi = RETX_S
    out: list[frozenset[str] | None] = []
    for a, b in zip(iv.start_s, iv.end_s, strict=True):
        sure = np.searchsorted(drops, b - hi, "right") - np.searchsorted(drops, a - lo, "right")
        maybe = np.searchsorted(drops, b - lo, "right") - np.searchsorted(drops, a - hi, "right")
        out.append(frozenset({"fast_retransmit"}) if sure > 0 else
                   frozenset() if maybe == 0 else None)
    return out


def stall_position(a: float, b: float, windows: list[tuple[float, float]]) -> str:
    """Where interval (a, b] meets the stall it overlaps: `head` if it ends within Linux's
    least RTO of the cut (no RTO can have fired yet: to the kernel too the lost segment is
    only a late ACK), else the interval's (start, end) from the cut, in ms."""
    for w0, w1 in windows:
        if a < w1 and b > w0:
            if b < w0 + TCP_RTO_MIN_MS / 1e3:
                return "head"
            return f"{1e3 * (a - w0):.0f}..{1e3 * (b - w0):.0f}"
    return "outside"


@dataclass
class Tally:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    fp_by: Counter[str] = field(default_factory=Counter)  # "kind/end"
    fn_as: Counter[str] = field(default_factory=Counter)  # what the missed ones were called
    fn_idle: int = 0  # missed ones in which the connection sent and received nothing
    fn_where: Counter[str] = field(default_factory=Counter)  # where in its stall a miss is
    unscored: int = 0  # intervals meeting a stall only in its head (labels' None)
    labeled_s: float = 0.0
    fn_s: float = 0.0
    fn_max_s: float = 0.0

    def as_json(self) -> dict[str, Any]:
        labeled = self.tp + self.fn
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn,
                "precision": _ratio(self.tp, self.tp + self.fp),
                "recall": _ratio(self.tp, labeled),
                "fp_by_connection": dict(self.fp_by), "fn_classified_as": dict(self.fn_as),
                "fn_idle": self.fn_idle, "fn_in_stall": dict(self.fn_where),
                "unscored": self.unscored,
                "labeled_s": round(self.labeled_s, 3),
                "labeled_mean_s": _ratio(self.labeled_s, labeled),
                "fn_mean_s": _ratio(self.fn_s, self.fn), "fn_max_s": self.fn_max_s}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _held(problems: frozenset[str], name: str) -> bool:
    return not problems if name == NO_PROBLEM else name in problems


def score(rebuilt: dict[tuple[str, str], Intervals], windows: list[tuple[float, float]],
          from_s: float, senders: bool, head_s: float = HEAD_S,
          drops_s: Sequence[float] | None = None) -> dict[str, Tally]:
    """TP/FP/FN/TN per class over the scored intervals (starting at `from_s` or later) of the
    senders' ends (`senders`) or of the receivers' ends; an interval standing for n (a missed
    read) counts n times."""
    tallies = {c: Tally() for c in CLASSES}
    for (kind, end), iv in rebuilt.items():
        if (end in BY_KIND[kind].seen_at) != senders:
            continue
        truth = labels(kind, end, iv, windows, head_s, drops_s)
        scored = (iv.start_s >= from_s) & np.array([t is not None for t in truth], dtype=bool)
        tallies[kind if kind in tallies else "timeout"].unscored += int(np.sum(
            (iv.start_s >= from_s) & ~scored))
        for i in np.flatnonzero(scored):
            got, want, n = iv.classes[i], truth[i], int(iv.weight[i])
            span = n * float(iv.end_s[i] - iv.start_s[i])
            for c, t in tallies.items():
                g, w = _held(got, c), _held(want, c)
                t.tp += n * (g and w)
                t.fp += n * (g and not w)
                t.fn += n * (w and not g)
                t.tn += n * (not g and not w)
                t.labeled_s += span * w
                t.fn_s += span * (w and not g)
                if g and not w:
                    t.fp_by[f"{kind}/{end}"] += n
                if w and not g:
                    t.fn_as["+".join(sorted(got)) or NO_PROBLEM] += n
                    if c == "timeout":
                        t.fn_where[stall_position(iv.start_s[i], iv.end_s[i], windows)] += n
                    t.fn_max_s = max(t.fn_max_s, span / n)
        for quiet, idle in iv.idle:  # all app_limited; idle ones where all share a label
            if all(scored[i] for i in quiet) and len({truth[i] for i in quiet}) == 1:
                for c, t in tallies.items():
                    if _held(truth[quiet[0]], c) and c != NO_PROBLEM:
                        t.fn_idle += idle
    return tallies


def cut_detection(rebuilt: dict[tuple[str, str], Intervals], windows: list[tuple[float, float]]
                  ) -> dict[str, int]:
    """Per end of the timeout connection, the stalls with at least one timeout interval."""
    out = {}
    for end in BY_KIND["timeout"].seen_at:
        iv = rebuilt[("timeout", end)]
        out[end] = sum(any("timeout" in iv.classes[i] and iv.start_s[i] < w1 and iv.end_s[i] > w0
                           for i in range(len(iv.start_s))) for w0, w1 in windows)
    return out


def checks(rebuilt: dict[tuple[str, str], Intervals], windows: list[tuple[float, float]]
           ) -> dict[str, Any]:
    """The rebuild's own checks (module doc), per connection: rebuilt = polls + idle; an idle
    interval is in a stall when every interval of its report it could be overlaps one."""
    out = {}
    for (kind, end), iv in rebuilt.items():
        def in_stall(i: int, iv: Intervals = iv) -> bool:
            return any(iv.start_s[i] < w1 and iv.end_s[i] > w0 for w0, w1 in windows)
        spans = iv.end_s - iv.start_s
        out[f"{kind}/{end}"] = {
            "rebuilt": int(iv.weight.sum()), "polls": iv.polls,
            "records": int(iv.recorded.sum()), "unmatched_records": iv.unmatched_records,
            "missed_reads": iv.merged, "idle": int(iv.weight.sum()) - iv.polls,
            "idle_in_stalls": sum(n for quiet, n in iv.idle if all(map(in_stall, quiet)))
            if kind == "timeout" else None,
            "mean_interval_s": round(float(spans.sum() / iv.weight.sum()), 4)
            if len(spans) else None}
    return out


def evaluate(run: Run, warmup_s: float) -> dict[str, Any]:
    windows_full = stall_windows(run)
    windows = [w["window"] for w in windows_full]
    from_s = run.start_s + warmup_s
    outside = [s for s in run.stalls()
               if not any(s[0] <= t and s[1] >= f for f, t in run.cuts())]
    stalls = [{"cut_s": [round(x - run.start_s, 3) for x in w["cut"]],
               "window_s": [round(x - run.start_s, 3) for x in w["window"]],
               "stalled_requests": w["stalled_requests"]} for w in windows_full]
    out: dict[str, Any] = {}
    for name, observed in run.observed.items():
        rebuilt = rebuild(observed, run.settings)
        cpu = {end: float(np.mean([e.cpu_pct for e in observed.reports[end]]))
               for end in ENDS}
        out[name] = {
            "request": observed.request.model_dump(mode="json"),
            "missing": {end: list(p.missing) for end, p in observed.profiling.items()},
            "strangers": observed.strangers,
            "dropped_records": sum(e.dropped_records for end in ENDS
                                   for e in observed.reports[end]),
            "sniffer_cpu_pct": {end: round(v, 2) for end, v in cpu.items()},
            "senders": {c: t.as_json() for c, t in score(rebuilt, windows, from_s,
                                                         True, drops_s=run.drops_s).items()},
            # the lossy connection labelled fast_retransmit throughout, as before drop times
            "fast_retransmit_throughout": score(rebuilt, windows, from_s, True)[
                "fast_retransmit"].as_json(),
            "receivers": {c: t.as_json() for c, t in score(rebuilt, windows, from_s,
                                                           False).items()},
            # the stalls' heads scored as timeout too: the labels before HEAD_S existed
            "timeout_with_heads": score(rebuilt, windows, from_s, True,
                                        head_s=0.0)["timeout"].as_json(),
            "stalls_detected": cut_detection(rebuilt, windows),
            "fast_retransmit_model": loss_model(rebuilt, observed, from_s),
            "timeout_connection": timeout_side(run, observed, from_s),
            "checks": checks(rebuilt, windows)}
    workload = {f"{end}/{kind}": lines[-1].model_dump(exclude_unset=True)
                for (end, kind), lines in run.labels.items()
                if lines and lines[-1].event == "done"}
    return {"profiled_s": round(run.stop_s - run.start_s, 3), "stalls": stalls,
            "stalled_requests_outside_cuts": len(outside), "workload": workload,
            "profiles": out}


def timeout_side(run: Run, observed: Observed, from_s: float) -> dict[str, Any]:
    """What explains the other classes on the timeout connection: its retransmissions beyond
    its RTOs (at most one tail-loss probe per cut), and where its delayed-ACK intervals fall
    (the interval a stall ends in, or one starting within SRTT_SETTLE_S after)."""
    ends = [e for _, e in run.stalls()]
    out: dict[str, Any] = {"cuts": len(run.cuts())}
    for end in BY_KIND["timeout"].seen_at:
        seen = observed.seen[("timeout", end)]
        after = [any(r.from_s <= t + SRTT_SETTLE_S and r.to_s >= t for t in ends)
                 for r in seen.records_of("delayed_ack") if r.from_s >= from_s]
        out[end] = {"retrans": seen.sums["retrans"], "rto": seen.sums["rto"],
                    "delayed_ack_intervals": len(after),
                    "delayed_ack_at_a_recovery": sum(after)}
    return out


def loss_model(rebuilt: dict[tuple[str, str], Intervals], observed: Observed, from_s: float
               ) -> dict[str, float]:
    """The lossy connection's FN if every interval holding a loss is found: random loss at
    the measured rate λ (retransmissions per second of the profile) leaves an interval of
    length T without one with probability exp(-λT); Poisson reads make many short ones."""
    iv = rebuilt[("fast_retransmit", "server")]
    rate = observed.seen[("fast_retransmit", "server")].sums["retrans"] \
        / float(iv.end_s[-1] - iv.start_s[0])
    scored = iv.start_s >= from_s
    spans = (iv.end_s - iv.start_s)[scored]
    return {"retrans_per_s": rate,
            "expected_fn": float((iv.weight[scored] * np.exp(-rate * spans)).sum())}


def _kernel_hz() -> int | None:
    """CONFIG_HZ: the tick tcp_info's busy/rwnd/sndbuf-limited times are counted in."""
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            config = f.read()
    except OSError:
        return None
    hz = [line.split("=")[1] for line in config.splitlines() if line.startswith("CONFIG_HZ=")]
    return int(hz[0]) if hz else None


def environment() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, timeout=10, check=False,
                            cwd=Path(__file__).parent).stdout.strip()
    return {"kernel": platform.release(), "kernel_hz": _kernel_hz(), "cpus": os.cpu_count(),
            "cpu_model": model, "python": platform.python_version(), "numpy": np.__version__,
            "commit": commit,
            "nice": os.nice(0), "loadavg_before": os.getloadavg(),
            "when": datetime.now(UTC).isoformat(timespec="seconds")}


def _pr(t: dict[str, Any]) -> str:
    def f(x: float | None) -> str:
        return "–" if x is None else f"{x:.3f}"
    return f"{f(t['precision'])} / {f(t['recall'])}"


def markdown(result: dict[str, Any]) -> str:
    env, res = result["environment"], result["results"]["profiles"]
    names = result["intervals"]
    default = DEFAULT_INTERVAL if DEFAULT_INTERVAL in names else names[0]
    senders = res[default]["senders"]
    s = result["settings"]
    stalls = result["results"]["stalls"]
    lines = [
        "## SNAP Table 2 classes against injected problems (`benchmarks/snap_classes.py`)",
        "",
        f"SNAP §4.1 by numbers: testbed/snap_workload.py's six connections (one per class, "
        f"two namespaces, the injector making a 10 ms RTT, 2% loss and {len(stalls)} "
        f"blackouts of {s['blackout_period_s'] / 2:g} s), {s['seconds']:g} s, profiled by "
        f"one sniffer per polling interval on each end at once (Poisson reads, the interval "
        f"pinned: no §7 speed-up). Scored per (connection, interval) on the data sender's "
        f"end, after a {result['warmup_s']:g} s warm-up; labels from what was injected "
        f"(module docstring): the four steady classes throughout, `timeout` in the intervals "
        f"overlapping [cut start + {HEAD_S:g} s, end of the request it stalled] (an interval "
        f"meeting a stall only in its first {HEAD_S:g} s, Linux's least RTO, is not scored: "
        f"no RTO can have fired, and the kernel too sees only a late ACK), none on the healthy "
        f"connection. Kernel {env['kernel']}, {env['cpus']} × {env['cpu_model']}, nice "
        f"{env['nice']}, load {env['loadavg_before'][0]:.2f} at the start; {env['when']}.",
        "",
        f"### At SNAP's default interval, {default} s",
        "",
        f"| class | precision | recall | TP/FP/FN | goal {GOAL} | SNAP's §4 statement |",
        "|---|---|---|---|---|---|"]
    for c in CLASSES:
        t = senders[c]
        ok = all(x is not None and x >= GOAL for x in (t["precision"], t["recall"]))
        lines.append(f"| {c} | {_fmt(t['precision'])} | {_fmt(t['recall'])} | "
                     f"{t['tp']}/{t['fp']}/{t['fn']} | {'met' if ok else '**missed**'} | "
                     f"{SNAP_SAYS[c]} |")
    lines += ["", "### Precision / recall by polling interval", "",
              "| class | " + " | ".join(f"{n} s" for n in names) + " |",
              "|---|" + "---|" * len(names)]
    for c in CLASSES:
        lines.append(f"| {c} | " + " | ".join(_pr(res[n]["senders"][c]) for n in names)
                     + " |")
    lines += ["", f"Notes at {default} s unless named:", "",
              *_notes(res, names, default, len(stalls), env)]
    return "\n".join(lines)


def _notes(res: dict[str, Any], names: list[str], default: str, n_stalls: int,
           env: dict[str, Any]) -> list[str]:
    d = res[default]
    out = []
    for c in PROBLEMS:
        for where, n in sorted(d["senders"][c]["fp_by_connection"].items(),
                               key=lambda x: -x[1]):
            what = CO_OCCURRING.get((c, where.split("/")[0]), "not explained")
            out.append(f"- FP {c} on {where}: {n} ({what}{_evidence(d, c, where)}).")
    hz = env.get("kernel_hz")
    tick = f"{1e3 / hz:g} ms at HZ={hz}" if hz else "a jiffy"
    for c in ("send_buffer", "receiver_window"):
        short = {n: res[n]["senders"][c] for n in names if res[n]["senders"][c]["fn"]}
        if short:
            out.append(f"- FN {c}: " + ", ".join(
                f"{t['fn']} at {n} s (at most {1e3 * t['fn_max_s']:.1f} ms long)"
                for n, t in short.items()) + f": tcp_info's limited times count whole "
                f"ticks ({tick}); an interval shorter than one may show none.")
    fr, model = d["senders"]["fast_retransmit"], d["fast_retransmit_model"]
    if (old := d.get("fast_retransmit_throughout")) is not None:
        out.append(f"- fast_retransmit by drop times: {fr['unscored']} intervals a drop's "
                   f"retransmission might fall either side of, not scored. Labelled "
                   f"throughout instead (every interval of the lossy connection): precision "
                   f"{_fmt(old['precision'])}, recall {_fmt(old['recall'])}, "
                   f"{old['fn']} misses where about {model['expected_fn']:.1f} intervals "
                   f"hold no loss at {model['retrans_per_s']:.0f} losses/s (exp(-λT)).")
    if fr["fn"]:
        out.append(f"- FN fast_retransmit: {fr['fn']}, {1e3 * fr['fn_mean_s']:.0f} ms long on "
                   f"average against {1e3 * fr['labeled_mean_s']:.0f} ms for all its labeled "
                   f"intervals: Poisson reads make short intervals, and at the "
                   f"{model['retrans_per_s']:.0f} losses/s measured an interval of T holds none "
                   f"with probability exp(-λT): {model['expected_fn']:.1f} expected.")
    da = d["senders"]["delayed_ack"]
    if da["fn"]:
        out.append(f"- FN delayed_ack: {da['fn']}, {da['fn_idle']} of them idle (nothing sent or "
                   f"received: a short interval inside one delayed-ACK wait, nothing to "
                   f"classify), {1e3 * da['fn_mean_s']:.0f} ms long on average.")
    t = d["senders"]["timeout"]
    if t["fn"]:
        called = ", ".join(f"{k} {v}" for k, v in sorted(t["fn_classified_as"].items()))
        out.append(f"- FN timeout: {t['fn']} stall intervals with no RTO in them and no stall "
                   f"seen at their end (called {called}; {t['fn_idle']} idle), by where they "
                   f"lie in their stall (ms from the cut): "
                   + ", ".join(f"{k} {v}" for k, v in sorted(t["fn_in_stall"].items()))
                   + ". The server's last_ack_recv restarts at each of the client's "
                   "retransmissions (its requests still arrive), so its wait is not always "
                   "seen; after the cut ends, the last RTO's recovery.")
    heads = {n: res[n].get("timeout_with_heads") for n in names}
    if all(heads.values()):
        out.append(f"- Stalls' heads: {t['unscored']} intervals met a stall only in its first "
                   f"{HEAD_S:g} s and were not scored. Scored as timeout, recall would be "
                   + ", ".join(f"{_fmt(h['recall'])} at {n} s" for n, h in heads.items())
                   + " (precision " + ", ".join(_fmt(h["precision"]) for h in heads.values())
                   + ").")
    out.append("- Stalls with a timeout interval, by end: " + "; ".join(
        f"{n} s: " + ", ".join(f"{e} {k}/{n_stalls}"
                               for e, k in res[n]["stalls_detected"].items())
        for n in names) + ".")
    rx = {n: sum(res[n]["receivers"][c]["fp"] for c in PROBLEMS) for n in names}
    out.append("- Receivers' ends (no class injected): problem intervals "
               + ", ".join(f"{rx[n]} at {n} s" for n in names) + ".")
    merged = {n: max(v["missed_reads"] for v in res[n]["checks"].values()) for n in names}
    unmatched = sum(v["unmatched_records"] for n in names for v in res[n]["checks"].values())
    out.append(f"- Rebuild checks: records that are no rebuilt interval {unmatched}; reads no "
               f"boundary showed (two intervals rebuilt as one, counted twice) "
               + ", ".join(f"{merged[n]} at {n} s" for n in names) + ".")
    return out


def _evidence(d: dict[str, Any], c: str, where: str) -> str:
    kind, end = where.split("/")
    if kind != "timeout":
        return ""
    t = d["timeout_connection"]
    if c == "fast_retransmit":
        return (f"; {t[end]['retrans'] - t[end]['rto']:g} retransmissions beyond the "
                f"{t[end]['rto']:g} RTOs at this end, {t['cuts']} cuts")
    if c == "delayed_ack":
        return (f"; {t[end]['delayed_ack_at_a_recovery']} of {t[end]['delayed_ack_intervals']} "
                f"hold a stall's end or start within {SRTT_SETTLE_S:g} s after it")
    return ""


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def save_raw(run: Run, env: dict[str, Any], path: Path) -> None:
    """The run as it came (every `snap` event, the workload's lines), to score again later."""
    raw = {"environment": env, "settings": asdict(run.settings), "start_s": run.start_s,
           "stop_s": run.stop_s, "servers_tcp_info": run.servers_tcp_info,
           "drops_s": run.drops_s,
           "labels": [[end, kind, [line.model_dump(exclude_unset=True) for line in lines]]
                      for (end, kind), lines in run.labels.items()],
           "observed": {name: {
               "request": o.request.model_dump(mode="json"),
               "profiling": {end: p.model_dump(mode="json") for end, p in o.profiling.items()},
               "reports": {end: [e.model_dump(mode="json", by_alias=True) for e in events]
                           for end, events in o.reports.items()}}
               for name, o in run.observed.items()}}
    with gzip.open(path, "wt") as f:
        json.dump(raw, f)


def load_raw(path: Path) -> tuple[Run, dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        raw = json.load(f)
    settings = WorkloadSettings(**raw["settings"])
    observed = {}
    for name, o in raw["observed"].items():
        reports = {end: [SnapReportEvent.model_validate(e) for e in events]
                   for end, events in o["reports"].items()}
        seen, strangers = collect(reports, settings)
        observed[name] = Observed(Profile.model_validate(o["request"]),
                                  {end: Profiling.model_validate(p)
                                   for end, p in o["profiling"].items()},
                                  reports, seen, strangers)
    run = Run(settings, raw["start_s"], raw["stop_s"], observed,
              {(end, kind): [WorkloadLine.model_validate(line) for line in lines]
               for end, kind, lines in raw["labels"]},
              {int(k): v for k, v in raw["servers_tcp_info"].items()},
              tuple(raw["drops_s"]) if raw.get("drops_s") is not None else None)
    return run, raw["environment"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="workload length (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="15 s of workload")
    parser.add_argument("--intervals", default="0.5,0.2,1.0",
                        help="polling intervals, s, profiled at once (default %(default)s)")
    parser.add_argument("--warmup-s", type=float, default=1.0,
                        help="intervals starting this soon after the start are not scored")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--raw", type=Path, metavar="PATH.json.gz",
                        help="also keep the run's raw events here (to --rescore later)")
    parser.add_argument("--rescore", type=Path, metavar="PATH.json.gz",
                        help="score a run kept by --raw instead of running one")
    parser.add_argument("--no-results-md", action="store_true",
                        help="do not rewrite the section of benchmarks/RESULTS.md")
    args = parser.parse_args()
    began = time.monotonic()
    if args.rescore:
        run, env = load_raw(args.rescore)
    else:
        settings = WorkloadSettings(seconds=15.0 if args.quick else args.seconds)
        env = environment()
        run = run_workload(settings, profiles([float(x) for x in args.intervals.split(",")]))
        env["loadavg_after"] = os.getloadavg()
        if args.raw:
            save_raw(run, env, args.raw)
    result = {"environment": env, "settings": asdict(run.settings), "warmup_s": args.warmup_s,
              "intervals": list(run.observed), "goal": GOAL,
              "results": evaluate(run, args.warmup_s),
              "wall_s": round(time.monotonic() - began, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    section = markdown(result)
    print(section)
    if not args.no_results_md:
        update_section("snap-classes", section)


if __name__ == "__main__":
    main()

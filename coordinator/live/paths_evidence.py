"""The run's causal paths on disk: every host's messages captured during the passive phase
(`paths-trace.jsonl`, for `linkgrad paths --trace`), and `paths.json`: the patterns, and
each transaction's (its requests found in the web log by their arrival at the front end)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from coordinator.config.run_dir import RunDir
from coordinator.config.trace_file import write_trace
from coordinator.live.session import Session
from coordinator.live.trace_events import host_trace
from linkgrad.paths.analysis import analyse, client_requests, match_requests
from linkgrad.paths.budget import linking_lines, progress_line
from linkgrad.paths.hidden_workers import fold_hidden_workers
from linkgrad.paths.messages import Trace
from linkgrad.paths.reconcile import HostTrace, reconcile
from linkgrad.paths.wap5 import LinkingSettings
from linkgrad.protocol.trace import TraceRequest
from linkgrad.transactions import group_by_transaction, patterns_from
from linkgrad.weblog.model import RequestLog

TRACE_FILE = "paths-trace.jsonl"
PATHS_FILE = "paths.json"


def start(session: Session) -> list[str]:
    """Tracing on every host (if the experiment wants paths); what a host cannot give."""
    p = session.experiment.paths
    if not p.enabled:
        return []
    # the coordinator's own SSH channels carry the daemons' lines: not the application's
    ports = sorted({e.port for e in (session.endpoints or {}).values()} or {22})
    return session.start_tracing(TraceRequest(report_interval_s=p.report_interval_s,
                                              exclude_ports=tuple(ports)))


def host_traces(session: Session) -> tuple[list[HostTrace], list[str]]:
    """Every host that traced, as the analysis takes it; the capture errors its events told."""
    problems = [f"tracing on {h}: {e.error}" for h, events in session.trace_events.items()
                for e in events if e.error]
    hosts = [host_trace(name, got.addresses, session.trace_events.get(name, []))
             for name, got in session.tracing.items() if not got.missing]
    return hosts, problems


def transactions_of(session: Session, trace: Trace) -> dict[int, str]:
    """Each client request in the trace that the web log saw -> its transaction (by when its
    answer ended, or it arrived, at the front end); empty if the session follows no web
    log."""
    if session.log is None:
        return {}
    return transactions_in_log(trace, session.log.snapshot(), session.experiment.transactions)


def transactions_in_log(trace: Trace, log: RequestLog, transactions: Mapping[str, str]
                        ) -> dict[int, str]:
    """`transactions_of` for a log at hand (a run directory's weblog.log, relinked)."""
    name_of_row: dict[int, str] = {}
    for name, rows in group_by_transaction(log.url, patterns_from(transactions)).items():
        for row in rows.tolist():
            name_of_row.setdefault(row, name)  # overlapping classes: the first named
    return {root: name_of_row[row] for root, row in match_requests(
        trace, log.start_s, log.start_s + log.response_s).items()
            if row in name_of_row}


def save(session: Session, out: RunDir, window: tuple[float, float],
         say: Callable[[str], None] | None = None) -> list[str]:
    """Stop tracing; write the trace and paths.json, linking within the experiment's budget
    (`say` hears how it goes, and what was cut). Returns what went wrong on a host."""
    if not session.tracing:
        return []
    problems = session.stop_tracing()
    hosts, failed = host_traces(session)
    problems += failed
    if not hosts:
        return problems
    write_trace(out.path / TRACE_FILE, hosts)
    # folded before matching: a hidden worker's calls are no client's requests
    trace, folds = fold_hidden_workers(reconcile(hosts))
    transaction_of = transactions_of(session, trace)
    p = session.experiment.paths
    result = analyse(trace, p.linker, LinkingSettings(window_s=p.window_s),
                     transaction_of=transaction_of, budget=p.budget,
                     progress=None if say is None else lambda g: say(progress_line(g)),
                     folds=folds)
    result = replace(result, window=window, traced_hosts=tuple(sorted(h.name for h in hosts)),
                     client_requests=len(client_requests(trace)),
                     matched_requests=len(transaction_of), problems=tuple(problems))
    out.write(PATHS_FILE, result.as_json())
    for line in linking_lines(result) if say is not None else []:
        say(line)
    return problems

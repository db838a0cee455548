"""The run's causal paths on disk: every host's messages captured during the passive phase
(`paths-trace.jsonl`, for `linkgrad paths --trace`), and `paths.json`: the patterns, and
each transaction's (its requests found in the web log by their arrival at the front end)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from coordinator.config.run_dir import RunDir
from coordinator.config.trace_file import TRACE_FILE, write_trace
from coordinator.live.session import Session
from coordinator.live.trace_events import host_trace
from linkgrad.paths.budget import linking_lines, progress_line
from linkgrad.paths.candidates import TraceTooLong
from linkgrad.paths.from_hosts import paths_from_hosts
from linkgrad.paths.reconcile import HostTrace
from linkgrad.protocol.trace import TraceRequest
from linkgrad.weblog.model import RequestLog

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


def web_log_now(session: Session) -> RequestLog | None:
    """The requests the session's web log has seen so far (None: it follows no web log)."""
    return None if session.log is None else session.log.snapshot()


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
    p = session.experiment.paths
    try:
        result = paths_from_hosts(
            hosts, p.linker, p.window_s, p.budget, web_log_now(session),
            session.experiment.transactions,
            progress=None if say is None else lambda g: say(progress_line(g)))
    except TraceTooLong as e:  # the trace is kept: `linkgrad paths --trace` can take parts
        return [*problems, f"causal paths not linked: {e}"]
    result = replace(result, window=window, problems=tuple(problems))
    out.write(PATHS_FILE, result.as_json())
    for line in linking_lines(result) if say is not None else []:
        say(line)
    return problems

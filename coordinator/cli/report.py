"""`report.html` of a run, read top-down: the summary (what was measured, when, where, the
verdicts, findings and next step), the verdict table, each transaction's causal timeline
annotated with its links' gradients, the whole application's graph, then the detail (the
gradient table, linearity, SNAP, hosts, each link's response series and spectrum).
Self-contained (figures embedded), built from the run directory alone, so `linkgrad report
RUN_DIR` can redo it."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from coordinator.cli import (
    app_graph,
    paths_report,
    report_detail,
    report_summary,
    report_verdicts,
)
from coordinator.config.run_dir import read_measurements, read_record
from coordinator.config.run_records import ExperimentAsRun, LinkMeasurement, PlanFile, RunJournal
from coordinator.config.run_weblog import read_run_weblog
from coordinator.explain.answer import Explanation
from coordinator.explain.run import explain_run
from linkgrad.errors import InputError, RuntimeFailure
from linkgrad.transactions import group_by_transaction, patterns_from


def _paths_section(run_dir: Path, e: Explanation | None) -> list[str]:
    try:
        return paths_report.html_section(paths_report.read_paths(run_dir),
                                         e.rows if e is not None else [])
    except InputError as err:  # a file an older linkgrad wrote: the rest of the report stands
        return ["<h2>Causal paths</h2>",
                f"<p>paths.json cannot be read: {html.escape(str(err))}. <code>linkgrad paths "
                "--trace RUN/paths-trace.jsonl --output RUN/paths.json</code> remakes it from "
                "the run's trace.</p>"]


def _graph_section(run_dir: Path, e: Explanation | None, hosts: Sequence[str],
                   links: list[LinkMeasurement]) -> list[str]:
    """Every host and every link of graph.json (and any link measured beside it)."""
    head = ["<h2>The application's graph</h2>",
            "<p>Every host of the run and every link of its communication graph, each arrow "
            "labelled per transaction with its gradient: measured where the link was injected "
            "(red arrows), else the passive gradient from the causal paths, marked "
            "<i>passive</i> (grey dashed arrows).</p>"]
    try:
        graph = app_graph.read_graph(run_dir)
    except InputError as err:
        graph = []
        head.append(f"<p>graph.json cannot be read: {html.escape(str(err))}</p>")
    known = {g.label for g in graph}
    graph += [m.link for m in links if m.link.label not in known]
    if not graph:
        return [*head, "<p>no links: the run learned no graph</p>"]
    return [*head, app_graph.app_graph_html(hosts, graph, e.rows if e is not None else [])]


STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1250px}"
         "table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}"
         "tr.txn th{background:#eef}tr.v-above td,tr.v-below td{background:#fdecea}"
         "td.nw{white-space:nowrap}p.next{background:#eef7ee;padding:6px}"
         "svg{display:block;margin:8px 0}")


def write_report(run_dir: Path, interrupted: str | None = None) -> Path:
    """report.html; `interrupted`: why a journal that says running is not (its coordinator
    is gone)."""
    experiment = read_record(run_dir / "experiment.json", ExperimentAsRun,
                             "the experiment as run")
    journal = read_record(run_dir / "run.json", RunJournal, "how the run went")
    plan = read_record(run_dir / "plan.json", PlanFile, "the square wave's plan")
    links = read_measurements(run_dir / "gradients.json")
    log = read_run_weblog(run_dir, experiment)
    patterns = patterns_from(experiment.transactions)
    groups = group_by_transaction(log.url, patterns) if log is not None else {}
    parts = [f"<h1>{html.escape(experiment.name)}</h1>"]
    explanation: Explanation | None = None
    try:
        explanation = explain_run(run_dir, interrupted)
    except (InputError, ValueError) as e:  # a file (or a shipped calibration) it cannot
        # read: the measurements, paths and graph still stand below, unexplained
        status = ("interrupted", interrupted) if interrupted else (journal.status,
                                                                   journal.reason or "")
        parts += ["<h2>Summary</h2>",
                  f"<p>status: <b>{html.escape(status[0])}</b> {html.escape(status[1])}</p>",
                  f"<p>the run cannot be explained: {html.escape(str(e))}</p>"]
    if explanation is not None:
        parts += report_summary.html_section(explanation.summary, plan.notes)
        parts += report_verdicts.html_section(explanation)
    hosts = explanation.summary.hosts if explanation else [h.name for h in experiment.hosts]
    parts += _paths_section(run_dir, explanation)
    parts += _graph_section(run_dir, explanation, hosts, links)
    parts += report_detail.html_section(run_dir, links, plan, log, groups)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>linkgrad: "
            f"{html.escape(experiment.name)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(parts) + "</body></html>")
    target = run_dir / "report.html"
    try:
        target.write_text(page)
    except OSError as e:  # a run directory of another user, a full disk
        raise RuntimeFailure(f"cannot write {target}: {e.strerror or e}") from e
    return target

"""`report.html` of a run, read top-down: the summary (what was measured, when, where, the
verdicts, findings and next step), the verdict table, each transaction's causal timeline
annotated with its links' gradients, the whole application's graph, then the detail (the
gradient table, linearity, SNAP, hosts, each link's response series and spectrum).
Self-contained (figures embedded), built from the run directory alone, so `linkgrad report
RUN_DIR` can redo it."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coordinator.cli import (
    app_graph,
    hosts_report,
    paths_report,
    report_summary,
    report_verdicts,
    snap_report,
)
from coordinator.cli.figures import plt, png_img
from coordinator.config.hosts_file import read_hosts
from coordinator.config.run_dir import linearity_of, read_measurements, read_record
from coordinator.config.run_records import ExperimentAsRun, LinkMeasurement, PlanFile, RunJournal
from coordinator.config.snap_file import read_snap
from coordinator.explain.answer import Explanation
from coordinator.explain.run import explain_run
from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.protocol.record import InjectionRecord
from linkgrad.spectral.binning import bin_series, fill_empty
from linkgrad.transactions import group_by_transaction, patterns_from
from linkgrad.weblog.model import RequestLog
from linkgrad.weblog.read import bounded_lines, choose_format, line_parser


def series_figures(log: RequestLog, rows: np.ndarray, record: InjectionRecord) -> str:
    """The transaction's binned response time over the window, the wave, and the spectrum."""
    wave = record.square_wave()
    n_bins = 16 * wave.cycles
    bin_s = wave.duration_s / n_bins
    t, y = log.start_s[rows], log.response_s[rows] * 1e3
    means, _ = bin_series(t, y, wave.start_s, bin_s, n_bins)
    if np.all(np.isnan(means)):
        return "<p>no requests in the window</p>"
    series = fill_empty(means)
    centers = np.arange(n_bins) * bin_s + bin_s / 2
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3))
    a1.plot(centers, series, lw=1, label="mean response")
    on = wave.is_on(wave.start_s + centers)
    a1.fill_between(centers, series.min(), series.max(), where=on, alpha=0.15, color="red",
                    step="mid", label=f"delay on ({record.magnitude_ms:.1f} ms)")
    a1.set_xlabel("s from the first rising edge")
    a1.set_ylabel("mean response (ms)")
    a1.legend(fontsize=8)
    spectrum = np.abs(np.fft.rfft(series - series.mean()))
    freq = np.fft.rfftfreq(n_bins, bin_s)
    a2.semilogy(freq[1:], spectrum[1:] + 1e-9, lw=1)
    for m in (1, 3, 5):
        a2.axvline(m / wave.period_s, color="red", alpha=0.4 if m > 1 else 0.8, lw=1)
    a2.set_xlabel("Hz (red: injection frequency and odd harmonics)")
    a2.set_ylabel("|FFT| of the response (ms)")
    return png_img(fig)


def _table(links: list[LinkMeasurement]) -> str:
    names = sorted({n for lk in links for n in lk.transactions})
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    rows = []
    for lk in links:
        cells = []
        for n in names:
            t = lk.transactions.get(n)
            if t is None or t.gradient is None:
                cells.append("<td>-</td>")
                continue
            lo, hi = t.ci95 or (math.nan, math.nan)
            thesis = t.thesis_gradient
            cells.append(f"<td><b>{t.gradient:.3f}</b> [{lo:.3f}, {hi:.3f}]"
                         f"<br><small>thesis {'-' if thesis is None else f'{thesis:.3f}'}, "
                         f"n={t.requests}</small></td>")
        r, p = lk.record, lk.perturbation
        throughput = "-" if p.throughput_change is None else f"{p.throughput_change:+.1%}"
        response = "-" if p.mean_response_change_ms is None \
            else f"{p.mean_response_change_ms:+.1f}"
        rows.append(
            f"<tr><td>{html.escape(lk.link.label)}<br><small>{r.cycles}×"
            f"{r.period_s:g} s, {r.magnitude_ms:.2f} ms actual; while on against off: "
            f"throughput {throughput}{_se(p.throughput_change_se)}, response "
            f"{response} ms</small></td>{''.join(cells)}</tr>")
    return f"<table><tr><th>link</th>{head}</tr>{''.join(rows)}</table>"


def _linearity(links: list[LinkMeasurement]) -> list[str]:
    """The gradients against the delay, where a link was measured at delays far apart."""
    rows = [f"<li>{'' if x.linear else '<b>'}{html.escape(x.describe())}"
            f"{'' if x.linear else '</b>'}</li>" for x in linearity_of(links)]
    return ["<h2>Gradient against delay</h2>", f"<ul>{''.join(rows)}</ul>"] if rows else []


def _se(se: float | None) -> str:
    return "" if se is None else f" ± {se:.1%}"


def _weblog(run_dir: Path, experiment: ExperimentAsRun) -> RequestLog | None:
    """The run's saved requests, or None when there are none to draw."""
    weblog, path = experiment.web_log, run_dir / "weblog.log"
    if weblog is None or not path.exists():
        return None
    parse, _ = line_parser(choose_format(Path(weblog.path), weblog.format, weblog.log_format),
                           weblog.log_format)
    try:  # the server's bytes as they came: a bad byte is a malformed line, counted there
        with path.open(encoding="utf-8", errors="surrogateescape", newline="") as f:
            lines = list(bounded_lines(f, path))  # /dev/zero is no log to read whole
    except OSError as e:
        raise InputError(Problem(f"cannot read: {e.strerror or e}", str(path))) from e
    return parse(lines, str(path)) if lines else None


def _paths_section(run_dir: Path, e: Explanation | None) -> list[str]:
    try:
        return paths_report.html_section(paths_report.read_paths(run_dir),
                                         e.rows if e is not None else [])
    except InputError as err:  # a file an older linkgrad wrote: the rest of the report stands
        return ["<h2>Causal paths</h2>",
                f"<p>paths.json cannot be read: {html.escape(str(err))}. <code>linkgrad paths "
                "--trace RUN/paths-trace.jsonl --save RUN/paths.json</code> remakes it from "
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


def _detail(run_dir: Path, links: list[LinkMeasurement], plan: PlanFile,
            log: RequestLog | None, groups: dict[str, np.ndarray]) -> list[str]:
    parts = ["<h2>Gradients</h2>", _table(links), *_linearity(links)]
    parts += snap_report.html_section(read_snap(run_dir), links, plan.training)
    try:
        parts += hosts_report.html_section(read_hosts(run_dir), links)
    except InputError as e:  # the rest of the report stands
        parts += ["<h2>Hosts</h2>", f"<p>hosts.json cannot be read: {html.escape(str(e))}</p>"]
    parts.append("<h2>Response series and spectra</h2>")
    for lk in links:
        if not lk.transactions:
            continue
        best = max(lk.transactions.items(), key=lambda kv: abs(kv[1].gradient or 0))[0]
        parts.append(f"<h3>{html.escape(lk.link.label)} — {html.escape(best)}</h3>")
        if log is not None and best in groups:
            parts.append(series_figures(log, groups[best], lk.record))
    return parts


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
    read_record(run_dir / "run.json", RunJournal, "how the run went")  # a run's, or no report
    plan = read_record(run_dir / "plan.json", PlanFile, "the square wave's plan")
    links = read_measurements(run_dir / "gradients.json")
    log = _weblog(run_dir, experiment)
    patterns = patterns_from(experiment.transactions)
    groups = group_by_transaction(log.url, patterns) if log is not None else {}
    parts = [f"<h1>{html.escape(experiment.name)}</h1>"]
    explanation: Explanation | None = None
    try:
        explanation = explain_run(run_dir, interrupted)
    except (InputError, ValueError) as e:  # a file (or a shipped calibration) it cannot
        # read: the measurements, paths and graph still stand below, unexplained
        parts += ["<h2>Summary</h2>", f"<p>the run cannot be explained: "
                  f"{html.escape(str(e))}</p>"]
    if explanation is not None:
        parts += report_summary.html_section(explanation.summary, plan.notes)
        parts += report_verdicts.html_section(explanation.rows)
    hosts = explanation.summary.hosts if explanation else [h.name for h in experiment.hosts]
    parts += _paths_section(run_dir, explanation)
    parts += _graph_section(run_dir, explanation, hosts, links)
    parts += _detail(run_dir, links, plan, log, groups)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>linkgrad: "
            f"{html.escape(experiment.name)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(parts) + "</body></html>")
    target = run_dir / "report.html"
    try:
        target.write_text(page)
    except OSError as e:  # a run directory of another user, a full disk
        raise RuntimeFailure(f"cannot write {target}: {e.strerror or e}") from e
    return target

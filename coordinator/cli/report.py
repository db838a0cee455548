"""`report.html` of a run, a person can read: the link gradient graph drawn per transaction,
each link's response series with its square wave overlaid, the spectrum with the injection
frequency marked, and the tables. Self-contained (figures embedded), built from the run
directory alone, so `linkgrad report RUN_DIR` can redo it."""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np

from coordinator.cli import hosts_report, paths_report, snap_report
from coordinator.cli.figures import plt, png_img
from coordinator.config.hosts_file import read_hosts
from coordinator.config.run_dir import linearity_of, read_measurements, read_record
from coordinator.config.run_records import ExperimentAsRun, LinkMeasurement, PlanFile, RunJournal
from coordinator.config.snap_file import read_snap
from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.protocol.record import InjectionRecord
from linkgrad.spectral.binning import bin_series, fill_empty
from linkgrad.transactions import group_by_transaction, patterns_from
from linkgrad.weblog.model import RequestLog
from linkgrad.weblog.read import bounded_lines, choose_format, line_parser


def graph_figure(name: str, links: list[LinkMeasurement]) -> str:
    """Hosts on a circle; each measured link an arrow labelled with the transaction's gradient."""
    hosts = sorted({h for lk in links for h in lk.pair})
    angle = {h: 2 * math.pi * i / max(len(hosts), 1) for i, h in enumerate(hosts)}
    pos = {h: (math.cos(a), math.sin(a)) for h, a in angle.items()}
    fig, ax = plt.subplots(figsize=(5, 5))
    for h, (x, y) in pos.items():
        ax.annotate(h, (x, y), ha="center", va="center", fontsize=11,
                    bbox={"boxstyle": "round", "fc": "#eef", "ec": "#446"})
    for lk in links:
        t = lk.transactions.get(name)
        if t is None or t.gradient is None or t.ci95 is None:
            continue
        src, dst = lk.pair
        (x0, y0), (x1, y1) = pos[src], pos[dst]
        bend = 0.15  # the two directions of a pair curve apart
        ax.annotate("", (x1, y1), (x0, y0), arrowprops={
            "arrowstyle": "->", "connectionstyle": f"arc3,rad={bend}",
            "shrinkA": 22, "shrinkB": 22,  # stop short of the host labels
            "lw": 1 + 2 * min(abs(t.gradient), 3), "color": "#a33"})
        mx, my = (x0 + x1) / 2 + bend * (y1 - y0) / 2, (y0 + y1) / 2 - bend * (x1 - x0) / 2
        lo, hi = t.ci95
        ax.text(mx, my, f"{t.gradient:.2f}\n[{lo:.2f}, {hi:.2f}]", fontsize=8,
                ha="center", color="#722")
    ax.set_xlim(-1.5, 1.5)
    ax.set_ylim(-1.5, 1.5)
    ax.axis("off")
    ax.set_title(f"{name}: link gradients (95% CI)")
    return png_img(fig)


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
    a1.plot(centers, series, lw=1, label="mean response (ms)")
    on = wave.is_on(wave.start_s + centers)
    a1.fill_between(centers, series.min(), series.max(), where=on, alpha=0.15, color="red",
                    step="mid", label=f"delay on ({record.magnitude_ms:.1f} ms)")
    a1.set_xlabel("seconds from the first rising edge")
    a1.legend(fontsize=8)
    spectrum = np.abs(np.fft.rfft(series - series.mean()))
    freq = np.fft.rfftfreq(n_bins, bin_s)
    a2.semilogy(freq[1:], spectrum[1:] + 1e-9, lw=1)
    for m in (1, 3, 5):
        a2.axvline(m / wave.period_s, color="red", alpha=0.4 if m > 1 else 0.8, lw=1)
    a2.set_xlabel("Hz (red: injection frequency and odd harmonics)")
    a2.set_ylabel("|FFT|")
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


def write_report(run_dir: Path, interrupted: str | None = None) -> Path:
    """report.html; `interrupted`: why a journal that says running is not (its coordinator
    is gone)."""
    experiment = read_record(run_dir / "experiment.json", ExperimentAsRun,
                             "the experiment as run")
    status = read_record(run_dir / "run.json", RunJournal, "how the run went")
    plan = read_record(run_dir / "plan.json", PlanFile, "the square wave's plan")
    links = read_measurements(run_dir / "gradients.json")
    log = _weblog(run_dir, experiment)
    patterns = patterns_from(experiment.transactions)
    groups = group_by_transaction(log.url, patterns) if log is not None else {}
    said = ("interrupted", interrupted) if interrupted else (status.status, status.reason or "")
    parts = [f"<h1>{html.escape(experiment.name)}</h1>",
             f"<p>status: <b>{html.escape(said[0])}</b> "
             f"{html.escape(said[1])}; plan: "
             f"{html.escape('; '.join(plan.notes))}</p>",
             "<h2>Gradients</h2>", _table(links), *_linearity(links),
             "<h2>Link gradient graphs</h2>"]
    parts += [graph_figure(n, links) for n in experiment.transactions]
    parts += snap_report.html_section(read_snap(run_dir), links, plan.training)
    try:
        parts += hosts_report.html_section(read_hosts(run_dir), links)
    except InputError as e:  # the rest of the report stands
        parts += ["<h2>Hosts</h2>", f"<p>hosts.json cannot be read: {html.escape(str(e))}</p>"]
    try:
        parts += paths_report.html_section(paths_report.read_paths(run_dir), links)
    except InputError as e:  # a file an older linkgrad wrote: the rest of the report stands
        parts += ["<h2>Causal paths</h2>",
                  f"<p>paths.json cannot be read: {html.escape(str(e))}. <code>linkgrad paths "
                  "--trace RUN/paths-trace.jsonl --save RUN/paths.json</code> remakes it from "
                  "the run's trace.</p>"]
    parts.append("<h2>Response series and spectra</h2>")
    for lk in links:
        if not lk.transactions:
            continue
        best = max(lk.transactions.items(), key=lambda kv: abs(kv[1].gradient or 0))[0]
        parts.append(f"<h3>{html.escape(lk.link.label)} — {html.escape(best)}</h3>")
        if log is not None and best in groups:
            parts.append(series_figures(log, groups[best], lk.record))
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>linkgrad: "
            f"{html.escape(experiment.name)}</title><style>{style}</style></head><body>"
            + "\n".join(parts) + "</body></html>")
    target = run_dir / "report.html"
    try:
        target.write_text(page)
    except OSError as e:  # a run directory of another user, a full disk
        raise RuntimeFailure(f"cannot write {target}: {e.strerror or e}") from e
    return target

"""The detail at the end of report.html, for a reader who wants the measurement itself: the
gradient table (each link's square wave and what it did to throughput and response), the
gradients against the delay, SNAP, the hosts, and each link's response series with its
square wave overlaid and its spectrum with the injection frequency marked."""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np

from coordinator.cli import hosts_report, snap_report
from coordinator.cli.figures import png_img, pyplot
from coordinator.config.hosts_file import read_hosts
from coordinator.config.run_dir import linearity_of
from coordinator.config.run_records import LinkMeasurement, PlanFile
from coordinator.config.snap_file import read_snap
from linkgrad.errors import InputError
from linkgrad.protocol.record import InjectionRecord
from linkgrad.spectral.binning import bin_series, fill_empty
from linkgrad.weblog.model import RequestLog

__all__ = ["html_section", "series_figures"]


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
    fig, (a1, a2) = pyplot().subplots(1, 2, figsize=(11, 3))
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


def html_section(run_dir: Path, links: list[LinkMeasurement], plan: PlanFile,
                 log: RequestLog | None, groups: dict[str, np.ndarray]) -> list[str]:
    """The detail; `groups`: each transaction's rows of `log`, for the series."""
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

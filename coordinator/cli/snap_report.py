"""SNAP in the run's report and in `linkgrad profile`: per link the Table 2 classes seen
during the passive phase and during its measurement, and the shared resources ranked by ACC
(SNAP §2.3). Text for the terminal, HTML for report.html; both from `snap.json`."""

from __future__ import annotations

import html

from coordinator.cli.answer import Answer
from coordinator.config.run_records import LinkMeasurement
from coordinator.config.snap_file import SnapFile
from linkgrad.snap.correlate import ResourceScore
from linkgrad.snap.evidence import correlated_resources

TOP = 8  # resources shown


def classes_text(seconds: dict[str, float] | None, unit: str = " s") -> str:
    """`receiver_window 3.2 s, app_limited 40.1 s`; problems first, by time. The seconds
    are connection-seconds (each connection's seconds in the class, summed): the report
    names the unit once in its header and passes `unit=""`."""
    if not seconds:
        return "-"
    ordered = sorted(seconds.items(), key=lambda kv: (kv[0] == "app_limited", -kv[1]))
    return ", ".join(f"{name} {s:.1f}{unit}" for name, s in ordered)


def ranked(snap: SnapFile, window: tuple[float, float] | None = None,
           aggregation_s: float = 2.0, alpha: float = 0.4) -> list[ResourceScore]:
    """Every shared resource of the run (or `window`) by ACC."""
    reports = snap.reports
    if not reports:
        return []
    if window is None:
        window = (min(r.from_s for r in reports), max(r.to_s for r in reports))
    if window[1] <= window[0]:
        return []
    return correlated_resources(reports, snap.addresses, window, aggregation_s, alpha)


class ResourceRow(Answer):
    """A ranked resource as shown: its ACC (None: not computed), how many connections share
    it, the seconds of each problem they had."""

    resource: str
    acc: float | None
    above_alpha: bool
    connections: int
    problems_s: dict[str, float]


def resource_rows(scores: list[ResourceScore]) -> list[ResourceRow]:
    """The ranked resources shown: the top ones and any above α."""
    shown = [s for i, s in enumerate(scores) if i < TOP or s.above_alpha]
    return [ResourceRow(resource=s.resource, acc=s.acc, above_alpha=s.above_alpha,
                        connections=len(s.connections),
                        problems_s={k: round(v, 3) for k, v in s.problems.items() if v > 0})
            for s in shown]


def missing_notes(snap: SnapFile) -> list[str]:
    return [f"{host}: {note}" for host, p in snap.hosts.items() for note in p.missing] + \
        [f"{host}: no socket-call logs" for host, p in snap.hosts.items() if not p.socket_calls]


def html_section(snap: SnapFile | None, links: list[LinkMeasurement],
                 passive: tuple[float, float] | None = None) -> list[str]:
    """The classes per link, and the resources ranked by ACC over the passive phase (while a
    link is delayed, its connections' RTTs rise together: a correlation the run made)."""
    if snap is None:
        return ["<h2>SNAP</h2><p>no snap.json: this run profiled no TCP connection</p>"]
    rows = "".join(
        f"<tr><td>{html.escape(lk.link.label)}</td>"
        f"<td>{html.escape(classes_text((lk.snap or {}).get('passive'), ''))}</td>"
        f"<td>{html.escape(classes_text((lk.snap or {}).get('measurement'), ''))}</td></tr>"
        for lk in links)
    scores = resource_rows(ranked(snap, passive))
    resources = "".join(
        f"<tr><td>{html.escape(r.resource)}</td><td>{_acc(r.acc)}"
        f"{' <b>above α</b>' if r.above_alpha else ''}</td><td>{r.connections}</td>"
        f"<td>{html.escape(classes_text(r.problems_s, ''))}</td></tr>" for r in scores)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in missing_notes(snap))
    return ["<h2>SNAP: TCP classes per link</h2>",
            "<p>Each class in connection-seconds: the seconds each of the link's connections "
            "spent in it, summed over the connections (so they can exceed the phase's own "
            "length).</p>",
            "<table><tr><th>link</th><th>passive phase (connection-seconds)</th>"
            "<th>its measurement (connection-seconds)</th></tr>"
            f"{rows}</table>",
            "<h3>Shared resources by ACC (α = 0.4)"
            f"{', over the passive phase' if passive else ''}</h3>",
            "<table><tr><th>resource</th><th>ACC</th><th>connections</th>"
            "<th>problems (connection-seconds)</th>"
            f"</tr>{resources}</table>", f"<ul>{notes}</ul>" if notes else ""]


def _acc(acc: float | None) -> str:
    return "-" if acc is None else f"{acc:.2f}"

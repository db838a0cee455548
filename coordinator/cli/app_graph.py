"""The whole application's graph for report.html: every host of the run and every link of
graph.json as an SVG, each arrow labelled with each transaction's gradient on it (measured
where the link was injected, else the passive one, said so).
The geometry (where hosts, arrows and labels go, and what overlaps) is app_graph_layout's;
this module reads the graph, words the labels and draws the SVG."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from coordinator.cli.app_graph_layout import HOST_FONT, LABEL_FONT, Arrow, layout
from coordinator.cli.report_svg import (
    Box,
    cut,
    text_svg,
)
from coordinator.config.run_dir import read_run_file
from coordinator.config.run_records import MeasuredLink
from coordinator.explain.answer import ExplainRow
from linkgrad.errors import InputError
from linkgrad.reading import problems_of

__all__ = ["app_graph_html", "link_labels", "read_graph"]

_GRAPH = TypeAdapter(list[MeasuredLink])


def read_graph(run_dir: Path) -> list[MeasuredLink]:
    """graph.json's links (as coordinator/explain/run.py reads them); [] when the run has
    none; InputError naming the file when it cannot be read."""
    path = run_dir / "graph.json"
    if not path.exists():
        return []
    try:
        return _GRAPH.validate_python(read_run_file(path, "the communication graph"))
    except ValidationError as e:
        raise InputError(problems_of(e, str(path))) from e


def _value(g: float | None, ci: tuple[float, float] | None) -> str:
    if g is None:
        return "-"
    return f"{g:.2f}" + ("" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]")


def link_labels(rows: Sequence[ExplainRow]) -> dict[str, tuple[list[str], bool]]:
    """Per link label: a line per transaction (its measured gradient, else its passive one
    marked "passive"), and whether any was measured."""
    out: dict[str, tuple[list[str], bool]] = {}
    for r in rows:
        lines, measured = out.get(r.link, ([], False))
        name = cut(r.transaction, 14)
        if r.gradient is not None:
            lines.append(f"{name} {_value(r.gradient, r.ci95)}")
        elif r.passive_gradient is not None:
            lines.append(f"{name} {_value(r.passive_gradient, r.passive_ci95)} passive")
        out[r.link] = (lines, measured or r.gradient is not None)
    return out

def _arrow_svg(a: Arrow) -> str:
    (x0, y0) = a.line[0]
    colour, dash = ("#a33", "") if a.measured else ("#888", " stroke-dasharray='5 3'")
    (hx, hy) = ((a.head[1][0] + a.head[2][0]) / 2, (a.head[1][1] + a.head[2][1]) / 2)
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in a.head)
    label = "" if a.label is None else text_svg(
        a.label, list(a.lines), LABEL_FONT, "label",
        fills=["#222" if not ln.endswith(" passive") else "#777" for ln in a.lines])
    return (f"<g><title>{html.escape(a.link)}</title>"
            f"<line x1='{x0:.1f}' y1='{y0:.1f}' x2='{hx:.1f}' y2='{hy:.1f}' "
            f"stroke='{colour}' stroke-width='2'{dash} data-mark='arrow'/>"
            f"<path d='M{points.replace(' ', ' L')} Z' fill='{colour}' data-mark='head'/>"
            f"{label}</g>")


def app_graph_html(hosts: Sequence[str], links: Sequence[MeasuredLink],
                   rows: Sequence[ExplainRow]) -> str:
    """The graph as an SVG, and the footnotes of any label that did not fit."""
    g = layout(hosts, links, link_labels(rows))
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='checked app-graph' "
             f"width='{g.width:.0f}' height='{g.height:.0f}' "
             f"viewBox='0 0 {g.width:.0f} {g.height:.0f}' style='max-width:100%;height:auto'>"]
    for name, b in g.hosts.items():
        parts.append(
            f"<rect x='{b.x:.1f}' y='{b.y:.1f}' width='{b.w:.1f}' height='{b.h:.1f}' rx='6' "
            f"fill='#eef' stroke='#446' data-node='{html.escape(name)}'/>"
            + text_svg(Box(b.x + 10, b.y + 6, b.w - 20, b.h - 12), [name], HOST_FONT,
                       "host", f"data-in='{html.escape(name)}'"))
    parts += [_arrow_svg(a) for a in g.arrows]
    parts.append("</svg>")
    if g.footnotes:
        parts.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in g.footnotes)
                     + "</ul>")
    return "".join(parts)

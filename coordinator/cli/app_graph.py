"""The whole application's graph for report.html: every host of the run and every link of
graph.json as an SVG, each arrow labelled with each transaction's gradient on it (measured
where the link was injected, else the passive one, said so).

Hosts stand in columns by call depth (the caller of a connection is its ephemeral-port end),
the two directions of a pair are two parallel arrows, and each label sits beside its own arrow,
on its own side, where it touches no arrow, host or other label; a layout where some label
cannot is spread wider, and at the last a label becomes a footnote number."""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from coordinator.cli.report_svg import (
    Box,
    Segment,
    clip,
    cut,
    segment_hits_box,
    text_size,
    text_svg,
)
from coordinator.config.run_dir import read_run_file
from coordinator.config.run_records import MeasuredLink
from coordinator.explain.answer import ExplainRow
from linkgrad.errors import InputError
from linkgrad.reading import problems_of

__all__ = ["Arrow", "GraphLayout", "app_graph_html", "collisions", "layout", "link_labels",
           "read_graph"]

HOST_FONT, LABEL_FONT = 13, 10
PARALLEL_PX = 10  # between the arrows of one host pair
HEAD_PX = 9
GAP_PX = 4  # the least room between a label and anything else
SPREADS = (1.0, 1.4, 1.9, 2.6)
_GRAPH = TypeAdapter(list[MeasuredLink])


@dataclass(frozen=True)
class Arrow:
    link: str  # the run's label
    src: str
    dst: str
    line: Segment  # tail to the arrowhead's tip
    head: tuple[tuple[float, float], ...]  # the arrowhead's corners
    measured: bool
    lines: tuple[str, ...]  # its label's
    label: Box | None  # None: drawn without a label


@dataclass(frozen=True)
class GraphLayout:
    width: float
    height: float
    hosts: dict[str, Box]
    arrows: tuple[Arrow, ...]
    footnotes: tuple[str, ...]  # labels that did not fit, numbered as on their arrows


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


def _caller(lk: MeasuredLink) -> tuple[str, str]:
    """(caller, callee) of the link's connection: the caller's port is the ephemeral one."""
    if (lk.src_port or 0) != 0 and (lk.dst_port or 0) == 0:
        return lk.dst_host, lk.src_host
    return lk.src_host, lk.dst_host


def _columns(hosts: Sequence[str], links: Sequence[MeasuredLink]) -> list[list[str]]:
    """Hosts by their longest call chain from those nobody calls (so a caller stands left of
    every host it calls, cycles cut where met); hosts without links under the shortest
    column."""
    calls: dict[str, set[str]] = defaultdict(set)
    linked: list[str] = []
    for lk in links:
        a, b = _caller(lk)
        if a != b:
            calls[a].add(b)
        linked += [h for h in (a, b) if h not in linked]
    called = {b for bs in calls.values() for b in bs}
    finished: list[str] = []
    seen: set[str] = set()

    def visit(h: str) -> None:
        seen.add(h)
        for b in sorted(calls[h]):
            if b not in seen:
                visit(b)
        finished.append(h)

    for start in [h for h in linked if h not in called] + linked:
        if start not in seen:
            visit(start)
    topo = finished[::-1]  # callers before callees, but for a cycle's closing call
    rank = {h: i for i, h in enumerate(topo)}
    depth: dict[str, int] = {}
    for h in topo:
        depth[h] = max((depth[a] + 1 for a in topo[:rank[h]] if h in calls[a]), default=0)
    order = list(dict.fromkeys([*hosts, *linked]))
    columns = [[h for h in order if depth.get(h) == d] for d in sorted(set(depth.values()))]
    for h in order:
        if h not in depth:
            if not columns:
                columns.append([])
            min(columns, key=len).append(h)
    return columns


def _layered(columns: list[list[str]], col_px: float, row_px: float,
             stagger: bool) -> dict[str, tuple[float, float]]:
    return {name: (c * col_px, r * row_px + (row_px / 2 if stagger and c % 2 else 0.0))
            for c, column in enumerate(columns) for r, name in enumerate(column)}


def _circle(names: list[str], radius: float) -> dict[str, tuple[float, float]]:
    """Hosts on a circle: a straight arrow between two never passes through a third."""
    step = 2 * math.pi / max(len(names), 1)
    return {n: (radius * math.cos(math.pi + i * step), radius * math.sin(math.pi + i * step))
            for i, n in enumerate(names)}


def _host_box(name: str, cx: float, cy: float) -> Box:
    w, h = text_size([name], HOST_FONT)
    return Box(cx - w / 2 - 10, cy - h / 2 - 6, w + 20, h + 12)


def _arrow_line(src: Box, dst: Box, offset: float, flip: bool) -> Segment | None:
    """From the src box to the dst box, `offset` px to the side of the pair's direction in
    name order (`flip`: src is the later name), so the pair's two directions lie apart; cut
    at the boxes' edges."""
    (sx, sy), (dx, dy) = (src.x + src.w / 2, src.y + src.h / 2), (dst.x + dst.w / 2,
                                                                  dst.y + dst.h / 2)
    ux, uy = (sx - dx, sy - dy) if flip else (dx - sx, dy - sy)
    length = math.hypot(ux, uy) or 1.0
    nx, ny = -uy / length * offset, ux / length * offset
    seg = ((sx + nx, sy + ny), (dx + nx, dy + ny))
    out_src, in_dst = clip(seg, src.grown(3)), clip(seg, dst.grown(3))
    if out_src is None or in_dst is None or out_src[1] >= in_dst[0]:
        return None  # the boxes touch: no room for an arrow
    (x0, y0), (x1, y1) = seg
    return ((x0 + (x1 - x0) * out_src[1], y0 + (y1 - y0) * out_src[1]),
            (x0 + (x1 - x0) * in_dst[0], y0 + (y1 - y0) * in_dst[0]))


def _head(line: Segment) -> tuple[tuple[float, float], ...]:
    (x0, y0), (x1, y1) = line
    length = math.hypot(x1 - x0, y1 - y0) or 1.0
    ux, uy = (x1 - x0) / length, (y1 - y0) / length
    bx, by = x1 - ux * HEAD_PX, y1 - uy * HEAD_PX
    return (x1, y1), (bx - uy * HEAD_PX / 2, by + ux * HEAD_PX / 2), \
        (bx + uy * HEAD_PX / 2, by - ux * HEAD_PX / 2)


def _head_box(head: tuple[tuple[float, float], ...]) -> Box:
    xs, ys = [p[0] for p in head], [p[1] for p in head]
    return Box(min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys))


def _place(arrow: Arrow, side: float, lines: list[str], hosts: dict[str, Box],
           arrows: list[Arrow], placed: list[Box]) -> Box | None:
    """The first spot beside `arrow`, on `side`, touching nothing drawn so far."""
    w, h = text_size(lines, LABEL_FONT)
    (x0, y0), (x1, y1) = arrow.line
    length = math.hypot(x1 - x0, y1 - y0) or 1.0
    mx, my = -(y1 - y0) / length * side, (x1 - x0) / length * side  # the side's normal
    reach = abs(mx) * w / 2 + abs(my) * h / 2  # the box's half-extent along it
    for d in (GAP_PX + 2, 12, 24, 40, 60):
        for t in (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8):
            cx = x0 + (x1 - x0) * t + mx * (d + reach)
            cy = y0 + (y1 - y0) * t + my * (d + reach)
            box = Box(cx - w / 2, cy - h / 2, w, h)
            if _free(box, hosts, [*arrows, arrow], placed):
                return box
    return None


def _sides(arrow: Arrow, hosts: dict[str, Box]) -> tuple[float, ...]:
    """The side of its pair's centre line an arrow is drawn on, where its label goes (the
    other direction's label goes to the other side); either for a lone arrow."""
    (x0, y0), (x1, y1) = arrow.line
    a, b = hosts[arrow.src], hosts[arrow.dst]
    ox = (x0 + x1) / 2 - (a.x + a.w / 2 + b.x + b.w / 2) / 2
    oy = (y0 + y1) / 2 - (a.y + a.h / 2 + b.y + b.h / 2) / 2
    dot = -(y1 - y0) * ox + (x1 - x0) * oy
    if abs(dot) < 1e-6:
        return 1.0, -1.0
    return (1.0,) if dot > 0 else (-1.0,)


def _place_any(arrow: Arrow, sides: tuple[float, ...], lines: list[str],
               hosts: dict[str, Box], arrows: list[Arrow], placed: list[Box]) -> Box | None:
    for side in sides:
        box = _place(arrow, side, lines, hosts, arrows, placed)
        if box is not None:
            return box
    return None


def _free(box: Box, hosts: dict[str, Box], arrows: Sequence[Arrow], placed: list[Box]) -> bool:
    room = box.grown(GAP_PX)
    return (not any(room.overlaps(b) for b in hosts.values())
            and not any(segment_hits_box(a.line, room) or room.overlaps(_head_box(a.head))
                        for a in arrows)
            and not any(room.overlaps(b) for b in placed))


def _attempt(centres: dict[str, tuple[float, float]], links: Sequence[MeasuredLink],
             labels: dict[str, tuple[list[str], bool]],
             footnote: bool) -> tuple[GraphLayout, int]:
    """The hosts at `centres`, their arrows and labels, and how many labels could not be
    placed or arrows drawn clear of other hosts."""
    hosts = {name: _host_box(name, x, y) for name, (x, y) in centres.items()}
    pairs: dict[tuple[str, str], list[MeasuredLink]] = defaultdict(list)
    for lk in links:
        if lk.src_host != lk.dst_host:
            pairs[tuple(sorted((lk.src_host, lk.dst_host)))].append(lk)  # type: ignore[index]
    arrows: list[Arrow] = []
    misses = 0
    for (a, _), group in pairs.items():
        group.sort(key=lambda lk: (lk.src_host != a, lk.label))
        for i, lk in enumerate(group):
            offset = (i - (len(group) - 1) / 2) * PARALLEL_PX
            line = _arrow_line(hosts[lk.src_host], hosts[lk.dst_host], offset,
                               flip=lk.src_host != a)
            if line is None:
                misses += 1
                continue
            lines, measured = labels.get(lk.label, (["no gradient"], False))
            arrows.append(Arrow(lk.label, lk.src_host, lk.dst_host, line, _head(line),
                                measured, tuple(lines), None))
    for arrow in arrows:  # an arrow through a host it does not join
        misses += sum(segment_hits_box(arrow.line, b.grown(2)) for n, b in hosts.items()
                      if n not in (arrow.src, arrow.dst))
    placed: list[Box] = []
    notes: list[str] = []
    for i, arrow in enumerate(arrows):
        sides = _sides(arrow, hosts)
        lines = list(arrow.lines)
        box = _place_any(arrow, sides, lines, hosts, arrows, placed)
        if box is None and footnote:
            notes.append(f"[{len(notes) + 1}] {arrow.link}: " + "; ".join(lines))
            lines = [f"[{len(notes)}]"]
            box = _place_any(arrow, sides, lines, hosts, arrows, placed)
        if box is None:
            misses += 1
        else:
            placed.append(box)
        arrows[i] = replace(arrow, lines=tuple(lines), label=box)
    return _moved(hosts, arrows, notes), misses


def _moved(hosts: dict[str, Box], arrows: list[Arrow], notes: list[str]) -> GraphLayout:
    """Everything shifted so the drawing starts at a margin from 0, 0."""
    boxes = [*hosts.values(), *(a.label for a in arrows if a.label is not None),
             *(_head_box(a.head) for a in arrows)]
    dx, dy = 10 - min(b.x for b in boxes), 10 - min(b.y for b in boxes)

    def box(b: Box) -> Box:
        return Box(b.x + dx, b.y + dy, b.w, b.h)

    def pt(p: tuple[float, float]) -> tuple[float, float]:
        return p[0] + dx, p[1] + dy

    moved = tuple(replace(a, line=(pt(a.line[0]), pt(a.line[1])),
                          head=tuple(pt(p) for p in a.head),
                          label=None if a.label is None else box(a.label)) for a in arrows)
    boxes = [box(b) for b in boxes]
    return GraphLayout(width=max(b.x + b.w for b in boxes) + 10,
                       height=max(b.y + b.h for b in boxes) + 10,
                       hosts={n: box(b) for n, b in hosts.items()}, arrows=moved,
                       footnotes=tuple(notes))


def _candidates(hosts: Sequence[str], links: Sequence[MeasuredLink],
                labels: dict[str, tuple[list[str], bool]]
                ) -> list[dict[str, tuple[float, float]]]:
    """Host positions to try, tightest first: in columns by call depth, then on a circle."""
    big = [text_size(lines, LABEL_FONT) for lines, _ in labels.values()] or [(0.0, 0.0)]
    label_w, label_h = max(w for w, _ in big), max(h for _, h in big)
    columns = _columns(hosts, links)
    names = [h for column in columns for h in column]
    out = [_layered(columns, (label_w + 90) * s, (2 * label_h + 70) * s, stagger)
           for s in SPREADS for stagger in (False, True)]
    reach = max(label_w, label_h) * max(len(names), 3) / 3
    out += [_circle(names, reach * s) for s in SPREADS]
    return out


def layout(hosts: Sequence[str], links: Sequence[MeasuredLink],
           labels: dict[str, tuple[list[str], bool]]) -> GraphLayout:
    """The first layout, from the tightest, where every label fits beside its arrow and no
    arrow crosses a host; else the widest circle, with footnotes for labels that do not."""
    candidates = _candidates(hosts, links, labels)
    for centres in candidates:
        drawn, misses = _attempt(centres, links, labels, footnote=False)
        if not misses:
            return drawn
    return _attempt(candidates[-1], links, labels, footnote=True)[0]


def collisions(g: GraphLayout) -> list[str]:
    """What overlaps in a layout: labels on labels, arrows or hosts; arrows through hosts
    they do not join. Empty when it reads clean."""
    out = []
    labelled = [a for a in g.arrows if a.label is not None]
    for i, a in enumerate(labelled):
        assert a.label is not None
        for b in labelled[i + 1:]:
            if b.label is not None and a.label.overlaps(b.label):
                out.append(f"label {a.link} on label {b.link}")
        for b in g.arrows:
            if segment_hits_box(b.line, a.label) or a.label.overlaps(_head_box(b.head)):
                out.append(f"label {a.link} on arrow {b.link}")
        out += [f"label {a.link} on host {n}" for n, h in g.hosts.items()
                if a.label.overlaps(h)]
    for a in g.arrows:
        out += [f"arrow {a.link} through host {n}" for n, h in g.hosts.items()
                if n not in (a.src, a.dst) and segment_hits_box(a.line, h)]
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

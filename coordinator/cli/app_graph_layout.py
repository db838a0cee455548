"""The application graph's geometry: host boxes, one arrow per link (the two directions of a
pair parallel, apart), and each arrow's label beside it on its own side where it touches no
arrow, host or other label. A layout where some label cannot is spread wider (columns, then
a circle), and at the last a label becomes a footnote number. `collisions` says what
overlaps, for the layout's own choice and for the tests."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from coordinator.cli.app_graph_hosts import circle, columns, layered
from coordinator.cli.report_svg import Box, Segment, clip, segment_hits_box, text_size
from coordinator.config.run_records import MeasuredLink

__all__ = ["HOST_FONT", "LABEL_FONT", "Arrow", "GraphLayout", "collisions", "head_box",
           "layout"]

HOST_FONT, LABEL_FONT = 13, 10
PARALLEL_PX = 10  # between the arrows of one host pair
HEAD_PX = 9
GAP_PX = 4  # the least room between a label and anything else
SPREADS = (1.0, 1.4, 1.9, 2.6)  # the layouts tried, tightest first


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


def head_box(head: tuple[tuple[float, float], ...]) -> Box:
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
    for d in (GAP_PX + 2, 12, 24, 40, 60, 90, 130):
        for t in (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8, 0.15, 0.85):
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
            and not any(segment_hits_box(a.line, room) or room.overlaps(head_box(a.head))
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
             *(head_box(a.head) for a in arrows)]
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
    cols = columns(hosts, links)
    names = [h for column in cols for h in column]
    out = [layered(cols, (label_w + 90) * s, (2 * label_h + 70) * s, stagger)
           for s in SPREADS for stagger in (False, True)]
    reach = max(label_w, label_h) * max(len(names), 3) / 3
    out += [circle(names, reach * s) for s in SPREADS]
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
            if segment_hits_box(b.line, a.label) or a.label.overlaps(head_box(b.head)):
                out.append(f"label {a.link} on arrow {b.link}")
        out += [f"label {a.link} on host {n}" for n, h in g.hosts.items()
                if a.label.overlaps(h)]
    for a in g.arrows:
        out += [f"arrow {a.link} through host {n}" for n, h in g.hosts.items()
                if n not in (a.src, a.dst) and segment_hits_box(a.line, h)]
    return out

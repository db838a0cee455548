"""SVG pieces the report's drawings share: monospace text whose box is known before a browser
draws it (so layouts can keep labels off each other and off the marks, and tests can check),
and the overlap tests those layouts use."""

from __future__ import annotations

import html
from dataclasses import dataclass

FONT = "DejaVu Sans Mono, monospace"
CHAR_EM = 0.62  # a monospace glyph's advance, per font size (DejaVu's is 0.602): a margin
LINE_EM = 1.25


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float

    def overlaps(self, other: Box, gap: float = 0.0) -> bool:
        return (self.x < other.x + other.w + gap and other.x < self.x + self.w + gap
                and self.y < other.y + other.h + gap and other.y < self.y + self.h + gap)

    def grown(self, by: float) -> Box:
        return Box(self.x - by, self.y - by, self.w + 2 * by, self.h + 2 * by)


Segment = tuple[tuple[float, float], tuple[float, float]]


def text_size(lines: list[str], size: float) -> tuple[float, float]:
    """Width and height of lines of monospace text."""
    return (max((len(t) for t in lines), default=0) * size * CHAR_EM,
            len(lines) * size * LINE_EM)


def text_svg(box: Box, lines: list[str], size: float, css: str = "", attrs: str = "",
             fills: list[str] | None = None) -> str:
    """Lines drawn inside `box` (top-left anchored), one <text> of <tspan>s; `fills`: each
    line's colour."""
    spans = "".join(
        f"<tspan x='{box.x:.1f}' y='{box.y + size * (LINE_EM * i + 1.0):.1f}'"
        f"{f' fill={chr(39)}{fills[i]}{chr(39)}' if fills else ''}>"
        f"{html.escape(t)}</tspan>" for i, t in enumerate(lines))
    return (f"<text font-family='{FONT}' font-size='{size}' class='{css}' {attrs}>"
            f"{spans}</text>")


def cut(text: str, chars: int) -> str:
    """`text` cut in the middle to `chars` (ends say most: hosts and ports)."""
    if len(text) <= chars:
        return text
    keep = max(chars - 1, 2)
    return text[:keep - keep // 2] + "…" + text[len(text) - keep // 2:]


def segment_hits_box(seg: Segment, box: Box) -> bool:
    """Whether a line segment passes through a box."""
    return clip(seg, box) is not None


def clip(seg: Segment, box: Box) -> tuple[float, float] | None:
    """The part of a segment inside a box, as (from, to) fractions of its length; None when
    it misses the box (Liang-Barsky)."""
    (x0, y0), (x1, y1) = seg
    dx, dy = x1 - x0, y1 - y0
    lo, hi = 0.0, 1.0
    for p, q in ((-dx, x0 - box.x), (dx, box.x + box.w - x0),
                 (-dy, y0 - box.y), (dy, box.y + box.h - y0)):
        if p == 0:
            if q < 0:
                return None
            continue
        t = q / p
        if p < 0:
            lo = max(lo, t)
        else:
            hi = min(hi, t)
        if lo > hi:
            return None
    return lo, hi

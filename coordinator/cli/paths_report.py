"""Causal paths in the run's report: each transaction's dominant path as a timeline (WAP5 §6.1,
Fig. 9: time and causality left to right, a box for the time in a node, a line for the
network), each hop annotated with its link's gradient, SNAP classes and hosts' load from the
run's explanation, in a column and lines of their own so no text lies on a bar."""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from coordinator.cli.report_svg import CHAR_EM, LINE_EM, Box, cut, text_svg
from coordinator.cli.snap_report import classes_text
from coordinator.config.paths_file import read_paths_file
from coordinator.explain.answer import ExplainRow
from linkgrad.paths.result import HopResult, PathsResult

LABEL_PX, BAR_PX, NOTE_PX = 250, 560, 300  # hop labels | bars | each hop's gradient
GAP_PX, ROW_PX = 16, 20
FONT, NOTE_FONT, DETAIL_FONT = 11, 10, 9
WIDTH_PX = LABEL_PX + BAR_PX + GAP_PX + NOTE_PX


@dataclass(frozen=True)
class HopNote:
    """What a hop's row says beside its bars (`value`) and under them (`details`)."""

    value: str
    details: tuple[str, ...] = ()


def read_paths(run_dir: Path) -> PathsResult | None:
    """The run's causal paths; None if it traced no messages."""
    path = run_dir / "paths.json"
    return read_paths_file(path) if path.exists() else None


def timeline(hops: Sequence[HopResult]) -> tuple[list[float], list[float]]:
    """Each hop's send and arrival, ms from the root's send: a hop leaves its node's delay
    after its parent arrived; unknown delays count 0."""
    send, arrive = [0.0] * len(hops), [0.0] * len(hops)
    for i, h in enumerate(hops):
        node = (h.node_delay_s or 0.0) * 1e3
        net = (h.network_delay_s or 0.0) * 1e3
        send[i] = (arrive[h.parent] + node) if h.parent >= 0 else 0.0
        arrive[i] = send[i] + net
    return send, arrive


def hop_notes(hops: Sequence[HopResult], rows: Sequence[ExplainRow]) -> list[HopNote]:
    """Each hop's link's gradient (measured, else passive), and under the first hop on each
    link its SNAP classes and its hosts' load while it was measured."""
    by_pair: dict[str, ExplainRow] = {}
    for r in rows:  # a measured row of the pair wins over a passive one
        if r.pair not in by_pair or (by_pair[r.pair].gradient is None and r.gradient is not None):
            by_pair[r.pair] = r
    notes, told = [], set()
    for h in hops:
        r = by_pair.get(h.link)
        if r is None:
            notes.append(HopNote("no gradient"))
            continue
        if r.gradient is not None:
            value = f"{_interval(r.gradient, r.ci95)} measured"
        elif r.passive_gradient is not None:
            value = f"{_interval(r.passive_gradient, r.passive_ci95)} passive"
        else:
            value = "no gradient"
        details: list[str] = []
        if h.link not in told:
            told.add(h.link)
            if r.snap:
                details.append(f"SNAP {h.link}: {classes_text(r.snap, '')} "
                               "(connection-seconds)")
            details += [f"{host}: {load.describe()}" for host, load in (r.hosts or {}).items()]
        notes.append(HopNote(value, tuple(details)))
    return notes


def _interval(g: float, ci: tuple[float, float] | None) -> str:
    return f"{g:.2f}" + ("" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]")


def _ticks(span: float) -> list[float]:
    """Round tick values from 0 to `span` ms, four to eight of them."""
    step = 10 ** math.floor(math.log10(span / 4))
    for m in (1, 2, 5, 10):
        if span / (m * step) <= 8:
            step *= m
            break
    return [i * step for i in range(int(span / step + 1e-9) + 1)]


def svg_timeline(hops: Sequence[HopResult], notes: Sequence[HopNote] | None = None) -> str:
    """The hops as rows: the label, the node's box and the network's line on a time axis
    (ms), the hop's note in a right-hand column and its details on lines under the row."""
    send, arrive = timeline(hops)
    span = max([*arrive, 1e-3])
    scale = BAR_PX / span
    detail_chars = int((BAR_PX + GAP_PX + NOTE_PX) / (DETAIL_FONT * CHAR_EM))
    rows, y = [], 4.0
    for i, h in enumerate(hops):
        mid = y + ROW_PX / 2
        start = arrive[h.parent] if h.parent >= 0 else 0.0
        x0, x1, x2 = (LABEL_PX + scale * v for v in (start, send[i], arrive[i]))
        colour = "#c0392b" if h.critical >= 0.5 else "#7f8c8d"
        label = cut(h.label, int((LABEL_PX - 10) / (FONT * CHAR_EM)))
        rows.append(
            text_svg(Box(0, mid - FONT * LINE_EM / 2, LABEL_PX - 10, FONT * LINE_EM),
                     [label], FONT, "hop") +
            f"<rect x='{x0:.1f}' y='{mid - 5:.1f}' width='{max(x1 - x0, 0.5):.1f}' "
            f"height='10' fill='#bdc3c7' data-mark='node'><title>node "
            f"{send[i] - start:.3f} ms</title></rect>"
            f"<line x1='{x1:.1f}' y1='{mid:.1f}' x2='{max(x2, x1 + 1):.1f}' y2='{mid:.1f}' "
            f"stroke='{colour}' stroke-width='3' data-mark='network'><title>network "
            f"{arrive[i] - send[i]:.3f} ms</title></line>")
        y += ROW_PX
        if notes is not None:
            note = notes[i]
            rows.append(text_svg(Box(LABEL_PX + BAR_PX + GAP_PX, mid - NOTE_FONT * LINE_EM / 2,
                                     NOTE_PX, NOTE_FONT * LINE_EM),
                                 [cut(note.value, int(NOTE_PX / (NOTE_FONT * CHAR_EM)))],
                                 NOTE_FONT, "note"))
            lines = [w for d in note.details for w in textwrap.wrap(d, detail_chars)]
            if lines:
                rows.append(text_svg(Box(LABEL_PX, y, BAR_PX + GAP_PX + NOTE_PX,
                                         DETAIL_FONT * LINE_EM * len(lines)),
                                     lines, DETAIL_FONT, "detail", fills=["#555"] * len(lines)))
                y += DETAIL_FONT * LINE_EM * len(lines) + 4
    axis_y = y + 6
    axis = [f"<line x1='{LABEL_PX}' y1='{axis_y:.1f}' x2='{LABEL_PX + BAR_PX}' "
            f"y2='{axis_y:.1f}' stroke='#444' data-mark='axis'/>"]
    for v in _ticks(span):
        x = LABEL_PX + scale * v
        text = f"{v:g}"
        w = len(text) * 10 * CHAR_EM
        axis.append(f"<line x1='{x:.1f}' y1='{axis_y:.1f}' x2='{x:.1f}' y2='{axis_y + 4:.1f}' "
                    f"stroke='#444' data-mark='tick'/>"
                    + text_svg(Box(x - w / 2, axis_y + 6, w, 10 * LINE_EM), [text], 10, "tick"))
    title = "ms from the request's first message"
    axis.append(text_svg(Box(LABEL_PX, axis_y + 20, BAR_PX, 10 * LINE_EM), [title], 10, "axis"))
    height = axis_y + 20 + 10 * LINE_EM + 4
    return (f"<svg xmlns='http://www.w3.org/2000/svg' class='checked timeline' "
            f"width='{WIDTH_PX + 30}' height='{height:.0f}'>"
            + "".join(rows) + "".join(axis) + "</svg>")


def _found_in_log(paths: PathsResult) -> str:
    if paths.matched_requests is None:  # the run followed no web log
        return "no web log to find the client requests in"
    return (f"{paths.matched_requests} of {paths.client_requests or 0} client requests found "
            "in the web log")


def html_section(paths: PathsResult | None, rows: Sequence[ExplainRow]) -> list[str]:
    """Each transaction's dominant path, annotated from its rows of the explanation."""
    if paths is None:
        return ["<h2>Causal paths</h2><p>no paths.json: this run traced no messages</p>"]
    parts = ["<h2>Causal paths (WAP5)</h2>",
             f"<p>{paths.messages} messages in the passive phase, linked by "
             f"{html.escape(paths.linker)}; {_found_in_log(paths)}. "
             "Each transaction's dominant path: grey, time in the node; line, the network "
             "(red on the critical path). Right: the gradient of the hop's link, measured "
             "where it was injected, else the passive one; under a hop, its link's SNAP "
             "classes and its hosts' load while it was measured.</p>"]
    for name, patterns in sorted(paths.transactions.items()):
        if not patterns:
            continue
        top = patterns[0]
        share = top.count / max(1, sum(p.count for p in patterns))
        response = "" if top.response_s is None else f", {1e3 * top.response_s:.2f} ms"
        mine = [r for r in rows if r.transaction == name]
        parts += [f"<h3>{html.escape(name)}: {top.count} requests ({share:.0%}) on this path"
                  f"{response}</h3>", svg_timeline(top.hops, hop_notes(top.hops, mine))]
    return parts

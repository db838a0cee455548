"""Causal paths in the run's report: each transaction's dominant path as a timeline (WAP5 §6.1,
Fig. 9: time and causality left to right, a box for the time in a node, a line for the
network), and each measured link's crossings on that path beside its gradient, flagged where
they disagree."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from coordinator.config.paths_file import read_paths_file
from coordinator.config.run_records import LinkMeasurement
from linkgrad.paths.result import HopResult, PathsResult, PatternResult

# A crossing count and a gradient disagree when the count lies this far outside the
# gradient's 95% interval (gradients measure a little beside the ideal count: second-order
# effects of the delay itself, see tests/test_run_netns.py).
DISAGREE_BEYOND = 0.1
ROW_PX, WIDTH_PX, LABEL_PX = 18, 900, 300


@dataclass(frozen=True)
class CrossingRow:
    """A measured link's gradient for a transaction beside its crossings on the dominant
    path."""

    link: str
    transaction: str
    gradient: float
    ci95: tuple[float, float]
    crossings: float
    disagree: bool


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


def svg_timeline(hops: Sequence[HopResult]) -> str:
    send, arrive = timeline(hops)
    span = max([*arrive, 1e-3])
    scale = (WIDTH_PX - LABEL_PX - 20) / span
    rows = []
    for i, h in enumerate(hops):
        y = i * ROW_PX + 12
        start = arrive[h.parent] if h.parent >= 0 else 0.0
        x0, x1, x2 = (LABEL_PX + scale * v for v in (start, send[i], arrive[i]))
        colour = "#c0392b" if h.critical >= 0.5 else "#7f8c8d"
        rows.append(
            f"<text x='0' y='{y + 4}' font-size='11'>{html.escape(h.label)}</text>"
            f"<rect x='{x0:.1f}' y='{y - 5}' width='{max(x1 - x0, 0.5):.1f}' height='10' "
            f"fill='#bdc3c7'><title>node {send[i] - start:.3f} ms</title></rect>"
            f"<line x1='{x1:.1f}' y1='{y}' x2='{max(x2, x1 + 1):.1f}' y2='{y}' "
            f"stroke='{colour}' stroke-width='3'><title>network {arrive[i] - send[i]:.3f} ms"
            f"</title></line>")
    height = len(hops) * ROW_PX + 24
    axis = (f"<text x='{LABEL_PX}' y='{height - 4}' font-size='10'>0 ms</text>"
            f"<text x='{WIDTH_PX - 60}' y='{height - 4}' font-size='10'>{span:.2f} ms</text>")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH_PX}' height='{height}'>"
            + "".join(rows) + axis + "</svg>")


def crossing_rows(transactions: dict[str, tuple[PatternResult, ...]],
                  links: list[LinkMeasurement]) -> list[CrossingRow]:
    """Per measured link and transaction: the gradient, its interval, the crossings of that
    host pair on the transaction's dominant path (the first of its `transactions`' patterns),
    whether they disagree."""
    rows = []
    for lk in links:
        pair = f"{lk.link.src_host}->{lk.link.dst_host}"
        for name, t in sorted(lk.transactions.items()):
            patterns = transactions.get(name)
            if not patterns or t.gradient is None:
                continue
            crossings = float(patterns[0].crossings.get(pair, 0.0))
            lo, hi = t.ci95 or (t.gradient, t.gradient)
            rows.append(CrossingRow(
                link=lk.link.label, transaction=name, gradient=t.gradient, ci95=(lo, hi),
                crossings=crossings,
                disagree=not lo - DISAGREE_BEYOND <= crossings <= hi + DISAGREE_BEYOND))
    return rows


def html_section(paths: PathsResult | None, links: list[LinkMeasurement]) -> list[str]:
    if paths is None:
        return ["<h2>Causal paths</h2><p>no paths.json: this run traced no messages</p>"]
    parts = ["<h2>Causal paths (WAP5)</h2>",
             f"<p>{paths.messages} messages in the passive phase, linked by "
             f"{html.escape(paths.linker)}; {paths.matched_requests or 0} of "
             f"{paths.client_requests or 0} client requests found in the web log. "
             "Grey: time in the node; line: the network (red on the critical path).</p>"]
    rows = crossing_rows(paths.transactions, links)
    if rows:
        body = "".join(
            f"<tr><td>{html.escape(r.link)}</td><td>{html.escape(r.transaction)}</td>"
            f"<td>{r.gradient:.2f} [{r.ci95[0]:.2f}, {r.ci95[1]:.2f}]</td>"
            f"<td>{r.crossings:g}</td><td>{'<b>disagree</b>' if r.disagree else ''}"
            f"</td></tr>" for r in rows)
        parts += ["<h3>Crossings on the dominant path beside each gradient</h3>",
                  "<table><tr><th>link</th><th>transaction</th><th>gradient [95%]</th>"
                  f"<th>crossings</th><th></th></tr>{body}</table>"]
    for name, patterns in sorted(paths.transactions.items()):
        if not patterns:
            continue
        top = patterns[0]
        share = top.count / max(1, sum(p.count for p in patterns))
        response = "" if top.response_s is None else f", {1e3 * top.response_s:.2f} ms"
        parts += [f"<h3>{html.escape(name)}: {top.count} requests ({share:.0%}){response}"
                  "</h3>", svg_timeline(top.hops)]
    return parts

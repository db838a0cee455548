"""Where the application graph's hosts stand: in columns by call depth (the caller of a
connection is its ephemeral-port end, so a caller stands left of every host it calls), or on
a circle, where no straight arrow between two hosts passes through a third."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from coordinator.config.run_records import MeasuredLink

__all__ = ["circle", "columns", "layered"]


def _caller(lk: MeasuredLink) -> tuple[str, str]:
    """(caller, callee) of the link's connection: the caller's port is the ephemeral one."""
    if (lk.src_port or 0) != 0 and (lk.dst_port or 0) == 0:
        return lk.dst_host, lk.src_host
    return lk.src_host, lk.dst_host


def columns(hosts: Sequence[str], links: Sequence[MeasuredLink]) -> list[list[str]]:
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


def layered(columns: list[list[str]], col_px: float, row_px: float,
             stagger: bool) -> dict[str, tuple[float, float]]:
    return {name: (c * col_px, r * row_px + (row_px / 2 if stagger and c % 2 else 0.0))
            for c, column in enumerate(columns) for r, name in enumerate(column)}


def circle(names: list[str], radius: float) -> dict[str, tuple[float, float]]:
    """Hosts on a circle: a straight arrow between two never passes through a third."""
    step = 2 * math.pi / max(len(names), 1)
    return {n: (radius * math.cos(math.pi + i * step), radius * math.sin(math.pi + i * step))
            for i, n in enumerate(names)}

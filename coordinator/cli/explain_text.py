"""The explained table as text for a terminal or an 80-column CI log: the summary, then per
transaction its links (measured and passive gradients, the verdict), each cause and note on
its own wrapped line, and the next step."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from coordinator.explain.answer import Explanation, RunSummary

__all__ = ["explanation_lines", "link_names"]

WIDTH = 80
VERDICT_W = 12
MIN_LINK_W = 12


def explanation_lines(e: Explanation, width: int = WIDTH) -> list[str]:
    lines = _summary_lines(e.summary, width)
    if not e.rows:
        return [*lines, "nothing to explain: no gradient measured and no causal paths",
                *_wrap(f"next: {e.summary.next_step}", width, "  ")]
    values = [(_pair(r.gradient, r.ci95), _pair(r.crossings, r.crossings_ci95))
              for r in e.rows]
    value_w = max(9, *(len(v) for pair in values for v in pair))
    # "  link  measured  passive  verdict": 2 + link + 2 + 2 values + 2 + 2 + verdict; where
    # that leaves a link too little room, the link has a line of its own above its values
    room = width - 8 - 2 * value_w - VERDICT_W
    stacked = room < MIN_LINK_W
    names = link_names([r.link for r in e.rows], [r.pair for r in e.rows],
                       width - 2 if stacked else room)
    link_w = 2 if stacked else max(len("link"), *(len(n) for n in names.values()))
    common = e.shared_notes()
    lines += [""]
    lines += [x for n in common for x in _wrap(f"every gradient: {n}", width, "")]
    lines += [f"  {'' if stacked else 'link':<{link_w}}  {'measured':<{value_w}}  "
              f"{'crossings':<{value_w}}  verdict"]
    current = None
    for r, (measured, passive) in zip(e.rows, values, strict=True):
        if r.transaction != current:
            current = r.transaction
            traced = e.summary.traced_requests.get(current)
            lines += _wrap(current + (f" ({traced} requests traced)" if traced else ""),
                           width, "")
        if stacked:
            lines.append(f"  {names[r.link]}")
        lines.append(f"  {'' if stacked else names[r.link]:<{link_w}}  {measured:<{value_w}}  "
                     f"{passive:<{value_w}}  {r.verdict}")
        if r.combined is not None and r.combined_ci95 is not None:
            lines += _wrap(f"combined: {_pair(r.combined, r.combined_ci95)}", width, "    ")
        elif r.gradient is None and r.passive_gradient is not None and r.passive_ci95 and (
                r.passive_gradient, r.passive_ci95) != (r.crossings, r.crossings_ci95):
            lines += _wrap(f"passive estimate: {_pair(r.passive_gradient, r.passive_ci95)}",
                           width, "    ")
        for c in r.causes:
            lines += _wrap(f"cause: {c.text}", width, "    ")
        for n in r.notes:
            if n in common:
                continue
            lines += _wrap(f"note: {n}", width, "    ")
    return [*lines, "", *_wrap(f"next: {e.summary.next_step}", width, "")]


def _summary_lines(s: RunSummary, width: int) -> list[str]:
    took = f" in {s.duration_s:.0f} s" if s.duration_s is not None else ""
    head = (f"{s.experiment}: {s.status}{took} on {len(s.hosts)} hosts; "
            f"{s.injected_links} of {s.graph_links} links injected")
    counts = ", ".join(f"{n} {v}" for v, n in s.verdicts.items())
    lines = _wrap(head, width, "")
    if s.reason:
        lines += _wrap(f"why: {s.reason}", width, "  ")
    if counts:
        lines += _wrap(f"verdicts: {counts}", width, "  ")
    lines += _wrap(f"strategy: {s.strategy}", width, "  ")
    calibration = s.calibration or "none (too few points): the passive side uncalibrated"
    lines += _wrap(f"calibration: {calibration}", width, "  ")
    for f in s.findings:
        lines += _wrap(f"- {f}", width, "  ")
    return lines


def _pair(value: float | None, ci: tuple[float, float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" + (f" [{ci[0]:.2f},{ci[1]:.2f}]" if ci else "")


def _wrap(text: str, width: int, indent: str) -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False) or [indent]


def link_names(labels: Sequence[str], pairs: Sequence[str], width: int) -> dict[str, str]:
    """A name per link label, at most `width` characters, never two alike: its host pair
    where no other link shares it, else its label without the protocol; cut in the middle
    (the ports at the end tell links apart) and numbered if that still collides."""
    by_pair: dict[str, set[str]] = {}
    for label, pair in zip(labels, pairs, strict=True):
        by_pair.setdefault(pair, set()).add(label)
    names: dict[str, str] = {}
    for label, pair in zip(labels, pairs, strict=True):
        if label in names:
            continue
        full = pair if len(by_pair[pair]) == 1 else label.split(" ", 1)[-1]
        names[label] = _cut(full, width)
    taken: dict[str, int] = {}
    for label, name in names.items():
        taken[name] = taken.get(name, 0) + 1
        if taken[name] > 1:  # the same cut: number it, within the width
            suffix = f"#{taken[name]}"
            names[label] = _cut(name, width - len(suffix)) + suffix
    return names


def _cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]

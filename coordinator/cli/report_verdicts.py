"""The report's verdict table: every (transaction, link) of the explanation with its measured
gradient and its paths' crossings, the verdict, the answer to use (both halves, the
measurement or the calibrated passive gradient), every cause and every note, so nothing the
estimate said about itself is left out of the page."""

from __future__ import annotations

import html

from coordinator.explain.answer import ExplainRow, Explanation

__all__ = ["html_section"]


def _value(g: float | None, ci: tuple[float, float] | None) -> str:
    if g is None:
        return "-"
    return f"<b>{g:.2f}</b>" + ("" if ci is None else f" [{ci[0]:.2f}, {ci[1]:.2f}]")


def _answer(r: ExplainRow) -> str:
    """What to use: both halves where they agree, else the measurement, else the passive
    estimate (calibrated), labelled."""
    if r.combined is not None:
        return _value(r.combined, r.combined_ci95) + "<br><small>both halves</small>"
    if r.gradient is not None:
        return _value(r.gradient, r.ci95) + "<br><small>measured</small>"
    if r.passive_gradient is not None:
        return (_value(r.passive_gradient, r.passive_ci95)
                + "<br><small>passive, calibrated</small>")
    return "-"


def _notes(r: ExplainRow, shared: set[str]) -> str:
    said = [("" if c.text.startswith(c.kind) else f"<i>{html.escape(c.kind)}</i>: ")
            + html.escape(c.text) for c in r.causes]  # the kind, unless the text says it
    said += [html.escape(n) for n in r.notes if n not in shared]
    return "<br>".join(said)


def html_section(e: Explanation) -> list[str]:
    rows = e.rows
    if not rows:
        return ["<h2>Verdicts</h2><p>nothing to explain: no gradient and no causal path</p>"]
    shared = e.shared_notes()
    body = []
    for name in dict.fromkeys(r.transaction for r in rows):
        mine = [r for r in rows if r.transaction == name]
        traced = next((r.passive_requests for r in mine if r.passive_requests), None)
        said = "" if traced is None else f" ({traced} requests traced)"
        body.append(f"<tr class='txn'><th colspan='6'>{html.escape(name)}{said}</th></tr>")
        body += [f"<tr class='v-{html.escape(r.verdict)}'>"
                 f"<td class='nw'>{html.escape(r.pair)}<br>"
                 f"<small>{html.escape(r.link)}</small></td>"
                 f"<td class='nw'>{_value(r.gradient, r.ci95)}</td>"
                 f"<td class='nw'>{_value(r.crossings, r.crossings_ci95)}</td>"
                 f"<td class='nw'>{html.escape(r.verdict)}</td>"
                 f"<td class='nw'>{_answer(r)}</td>"
                 f"<td>{_notes(r, set(shared))}</td></tr>"
                 for r in mine]
    return ["<h2>Verdicts</h2>",
            "<p>Measured: the gradient from the injection, with its 95% interval. Crossings: "
            "the critical-path crossings of the transaction's causal paths (all patterns, "
            "weighted by requests) inside the logged response time, with its 95% interval. "
            "The verdict compares the two (docs/explain.md). Answer: both halves in one "
            "estimate where they agree and the paths are clear, else the measurement, else "
            "the passive gradient calibrated against earlier runs.</p>",
            *([f"<p>Every measured gradient: {html.escape('; '.join(shared))}.</p>"]
              if shared else []),
            "<table class='verdicts'><tr><th>link</th><th>measured [95%]</th>"
            "<th>crossings [95%]</th><th>verdict</th><th>answer [95%]</th>"
            "<th>causes and notes</th></tr>"
            + "".join(body) + "</table>"]

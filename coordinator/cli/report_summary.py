"""The report's first screen: what the run measured, when, where and for how long, what the
two halves of the evidence said (the verdict counts), the findings and the next step, all
from the explanation's summary."""

from __future__ import annotations

import html

from coordinator.cli.times import local_time
from coordinator.explain.answer import RunSummary

__all__ = ["html_section"]


def _status(s: RunSummary) -> str:
    reason = f" ({html.escape(s.reason)})" if s.reason else ""
    return f"<b>{html.escape(s.status)}</b>{reason}"


def html_section(s: RunSummary, plan_notes: list[str]) -> list[str]:
    """The summary as a short list, the findings and the next step."""
    traced = ", ".join(f"{html.escape(n)} {c}" for n, c in s.traced_requests.items())
    verdicts = ", ".join(f"{c} {html.escape(v)}" for v, c in s.verdicts.items()) or "none"
    took = "-" if s.duration_s is None else f"{s.duration_s:.0f} s"
    items = [
        f"status: {_status(s)}",
        f"when: {local_time(s.started)} to {local_time(s.ended)} ({took})",
        f"hosts ({len(s.hosts)}): {html.escape(', '.join(s.hosts))}",
        f"links injected: <b>{s.injected_links} of the graph's {s.graph_links}</b>",
        f"requests traced on causal paths: {traced or 'none'}",
        f"verdicts (measured gradient against passive): {verdicts}",
    ]
    if s.calibration:
        items.append(f"passive calibration: {html.escape(s.calibration)}")
    if plan_notes:
        items.append(f"plan: {html.escape('; '.join(plan_notes))}")
    findings = "".join(f"<li>{html.escape(f)}</li>" for f in s.findings)
    return ["<h2>Summary</h2>",
            f"<p>Each transaction's link gradients (ms of response per ms of added latency) "
            f"measured by injection on <b>{html.escape(s.experiment)}</b>, beside the "
            "passive gradients its causal paths give.</p>",
            "<ul class='summary'>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>",
            "<h3>Findings</h3>", f"<ul>{findings}</ul>" if findings else "<p>none</p>",
            f"<p class='next'><b>Next step:</b> {html.escape(s.next_step)}</p>"]

"""What `paths --otlp` and `export --otlp` do with linked requests: send them as OpenTelemetry
traces (or print them, `--dry-run`), and say what went where in a few lines for a person."""

from __future__ import annotations

import textwrap
from typing import Any

from coordinator.export.otlp import otlp_json, send_traces
from linkgrad.paths.from_hosts import LinkedHosts
from linkgrad.paths.spans import RequestTraces, request_traces

__all__ = ["otlp_dry_run", "send_request_traces"]

WIDTH = 80


def otlp_dry_run(linked: LinkedHosts) -> dict[str, Any]:
    """The OTLP/JSON export request `send_request_traces` would POST (all traces in one)."""
    return otlp_json(request_traces(linked.linked, linked.transaction_of).traces)


def send_request_traces(url: str, linked: LinkedHosts) -> str:
    """Sends every request of `linked` to the traces `url`; what it did, wrapped at 80."""
    traces = request_traces(linked.linked, linked.transaction_of)
    if not traces.traces:
        return _wrap(f"No request to send to {url}: no tree starts with a client's request "
                     f"({traces.fragments} trees from other messages).")
    sent = send_traces(url, traces.traces)
    return _wrap(*_summary(url, traces, sent.spans, sent.requests))


def _summary(url: str, traces: RequestTraces, spans: int, requests: int) -> list[str]:
    named = sum(t.transaction is not None for t in traces.traces)
    lines = [f"Sent {len(traces.traces)} traces ({spans} spans) to {url} in {requests} "
             f"request{'s' if requests != 1 else ''}; {named} named by their transaction."]
    left = []
    if traces.fragments:
        left.append(f"{traces.fragments} trees not sent: they start with a reply or a call "
                    "no client made (a background job, a capture's edge)")
    if traces.moved:
        left.append(f"{traces.moved} server spans moved into their client spans (the "
                    "hosts' clock offsets, estimated, were off; attribute "
                    "linkgrad.clock_moved_s)")
    lines += [f"{x}." for x in left]
    first = next(t for t in traces.traces)
    lines.append(f"next: look them up in Jaeger or Tempo by service "
                 f"{first.spans[0].service}, or trace id {first.trace_id:032x}.")
    return lines


def _wrap(*paragraphs: str) -> str:
    return "\n".join(textwrap.fill(p, WIDTH, subsequent_indent="  ", break_on_hyphens=False,
                                   break_long_words=False) for p in paragraphs)

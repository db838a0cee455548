"""Request traces (`linkgrad.paths.spans`) to an OpenTelemetry collector over OTLP/HTTP.

The spans become the SDK's own `ReadableSpan`s and go out through its OTLP/HTTP exporter
(protobuf), so the encoding, retries and the standard `OTEL_EXPORTER_OTLP_*` variables
(headers for a vendor's key, timeout, TLS certificates, compression) are the SDK's. No
TracerProvider: these spans happened in the past, with times and ids of their own, and the
provider would give them new ones. `--dry-run` prints the same request as OTLP/JSON.
"""

from __future__ import annotations

import base64
import logging
import re
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.paths.spans import RequestTrace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["TRACES_PATH", "Sent", "check_endpoint", "otlp_json", "readable_spans",
           "send_traces", "span_count"]

TRACES_PATH = "/v1/traces"
REACH_TIMEOUT_S = 3.0
SPANS_PER_REQUEST = 4096  # a few MB of protobuf: under any collector's default body limit


def check_endpoint(url: str, option: str) -> str:
    """The traces URL of a base OTLP/HTTP endpoint (`/v1/traces` appended, as
    OTEL_EXPORTER_OTLP_ENDPOINT means it); InputError naming `option` if it is none."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as e:
        raise InputError(Problem(f"not a URL: {e}", field=option)) from e
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InputError(Problem(f"{url!r} is not an http:// or https:// URL with a host (a "
                                 "collector's OTLP/HTTP endpoint: http://HOST:4318)",
                                 field=option))
    if parsed.query or parsed.fragment:
        raise InputError(Problem(f"{url!r}: a base endpoint has no ?query or #fragment "
                                 f"({TRACES_PATH} is appended to it)", field=option))
    if parsed.path.rstrip("/").endswith(TRACES_PATH):
        raise InputError(Problem(f"give the base endpoint, without {TRACES_PATH} (it is "
                                 f"appended, as OTEL_EXPORTER_OTLP_ENDPOINT means it): "
                                 f"{url[:url.rfind(TRACES_PATH)] or url}", field=option))
    return url.rstrip("/") + TRACES_PATH


def readable_spans(traces: Sequence[RequestTrace]) -> list[ReadableSpan]:
    """Every span of `traces` as the SDK's, each node a service (resource) of its own."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    scope = InstrumentationScope("linkgrad.paths", _version())
    sampled = TraceFlags(TraceFlags.SAMPLED)
    kinds = {"server": SpanKind.SERVER, "client": SpanKind.CLIENT}
    resources: dict[tuple[str, str], Resource] = {}
    out = []
    for t in traces:
        for s in t.spans:
            resource = resources.get((s.service, s.host))
            if resource is None:
                resource = resources[(s.service, s.host)] = Resource(
                    {"service.name": s.service, "host.name": s.host})
            parent = None if s.parent_id is None else SpanContext(
                s.trace_id, s.parent_id, is_remote=False, trace_flags=sampled)
            out.append(ReadableSpan(
                name=s.name, context=SpanContext(s.trace_id, s.span_id, is_remote=False,
                                                 trace_flags=sampled),
                parent=parent, resource=resource, attributes=s.attributes,
                kind=kinds[s.kind], start_time=s.start_ns, end_time=s.end_ns,
                instrumentation_scope=scope))
    return out


def otlp_json(traces: Sequence[RequestTrace]) -> dict[str, Any]:
    """The export request as OTLP/JSON: ids in hex, enums as numbers (the protocol's JSON
    mapping, not protobuf's default one)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    body = MessageToDict(encode_spans(readable_spans(traces)), use_integers_for_enums=True)
    for resource in body.get("resourceSpans", []):
        for scoped in resource.get("scopeSpans", []):
            for span in scoped.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return body


@dataclass(frozen=True)
class Sent:
    url: str
    traces: int
    spans: int
    requests: int  # HTTP requests it took


def send_traces(url: str, traces: Sequence[RequestTrace]) -> Sent:
    """POSTs `traces` to the traces `url` (`check_endpoint`), a few thousand spans a request;
    RuntimeFailure with the collector's or the connection's reason on the first refusal,
    saying how many traces had gone before it."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    exporter = OTLPSpanExporter(endpoint=url)
    done = spans = requests = 0
    try:
        for batch in _batches(traces):
            flat = readable_spans(batch)
            with _ExporterLog() as said:
                result = exporter.export(flat)
            if result is not SpanExportResult.SUCCESS:
                before = f"; {done} of {len(traces)} traces went before it" if done else ""
                raise RuntimeFailure(f"the collector at {url} did not take the traces: "
                                     f"{said.reason() or _reach(url)}{before}")
            done, spans, requests = done + len(batch), spans + len(flat), requests + 1
    finally:
        exporter.shutdown()
    return Sent(url, done, spans, requests)


def _reach(url: str) -> str:
    """Why a collector the exporter gave up on (before it logged a reason) was not reached,
    from one plain TCP connection to it."""
    parsed = httpx.URL(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.host, port), timeout=REACH_TIMEOUT_S):
            return "it was reachable, but the exporter gave up (timeout or retries)"
    except OSError as e:
        return f"{e.strerror or e} (connecting to {parsed.host}:{port})"


def _batches(traces: Sequence[RequestTrace]) -> Iterator[list[RequestTrace]]:
    """Whole traces, about SPANS_PER_REQUEST spans at a time."""
    batch: list[RequestTrace] = []
    size = 0
    for t in traces:
        if batch and size + len(t.spans) > SPANS_PER_REQUEST:
            yield batch
            batch, size = [], 0
        batch.append(t)
        size += len(t.spans)
    if batch:
        yield batch


class _ExporterLog(logging.Handler):
    """The exporter says why a batch failed only in its log: kept here, not printed raw."""

    LOGGER = "opentelemetry.exporter.otlp"

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def reason(self) -> str:
        """The connection's error where there was one (the exporter retried it till its
        timeout), else what the collector answered; "" if the exporter only gave up."""
        for text in reversed(self.messages):
            errno = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
            if errno:
                return f"{errno.group(0).strip()} (retried till the exporter's timeout)"
        answered = [m for m in self.messages if "due to timeout" not in m and "retrying" not in m]
        return "; ".join(dict.fromkeys(answered))[:400]

    def __enter__(self) -> _ExporterLog:
        logger = logging.getLogger(self.LOGGER)
        self._propagate = logger.propagate
        logger.addHandler(self)
        logger.propagate = False
        return self

    def __exit__(self, *_: object) -> None:
        logger = logging.getLogger(self.LOGGER)
        logger.removeHandler(self)
        logger.propagate = self._propagate


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("linkgrad")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def span_count(traces: Sequence[RequestTrace]) -> int:
    return sum(len(t.spans) for t in traces)

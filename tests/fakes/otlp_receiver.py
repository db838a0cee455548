"""A local OTLP/HTTP traces receiver for the export tests: it decodes each POST to /v1/traces
with opentelemetry-proto (as a collector does) and keeps the spans; or answers a set HTTP
status, as a collector refusing a batch does."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto


@dataclass
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str  # "server" or "client"
    service: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]


@dataclass
class Receiver:
    url: str  # the base endpoint
    status: int = 200
    posts: list[tuple[str, str]] = field(default_factory=list)  # path, content type
    spans: list[ReceivedSpan] = field(default_factory=list)

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        out: dict[str, list[ReceivedSpan]] = {}
        for s in self.spans:
            out.setdefault(s.trace_id, []).append(s)
        return out


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for rs in request.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                kind = {SpanProto.SPAN_KIND_SERVER: "server",
                        SpanProto.SPAN_KIND_CLIENT: "client"}.get(s.kind, str(s.kind))
                out.append(ReceivedSpan(
                    s.trace_id.hex(), s.span_id.hex(),
                    s.parent_span_id.hex() or None, s.name, kind,
                    resource.get("service.name", ""), s.start_time_unix_nano,
                    s.end_time_unix_nano, {a.key: _value(a.value) for a in s.attributes}))
    return out


@contextmanager
def otlp_receiver(status: int = 200) -> Iterator[Receiver]:
    """A receiver on a free local port for the `with` block."""
    receiver = Receiver("", status)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            receiver.posts.append((self.path, self.headers.get("Content-Type", "")))
            if receiver.status != 200:
                self.send_response(receiver.status)
                self.end_headers()
                self.wfile.write(b"refused by the test")
                return
            receiver.spans.extend(decode(body))
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def check_trace_shape(spans: list[ReceivedSpan], front_end: str) -> None:
    """One root, the front end's server span; every parent in the trace; a server span
    inside its client span; a client span under a server span of its own node; the
    attributes every span has."""
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)
    assert len({s.trace_id for s in spans}) == 1
    roots = [s for s in spans if s.parent_id is None]
    assert len(roots) == 1, spans
    assert (roots[0].kind, roots[0].service) == ("server", front_end), roots[0]
    for s in spans:
        assert s.start_ns <= s.end_ns
        assert s.attributes["linkgrad.label"]
        assert "->" in s.attributes["linkgrad.link"]
        assert 0 <= s.attributes.get("linkgrad.link_probability", 0) <= 1
        if s.parent_id is None:
            continue
        parent = by_id[s.parent_id]
        if s.kind == "server":
            assert parent.kind == "client"
            assert parent.attributes["peer.service"] == s.service
            assert parent.start_ns <= s.start_ns <= s.end_ns <= parent.end_ns, (parent, s)
        else:
            assert parent.kind == "server"
            assert parent.service == s.service  # made by the node the request came to
            assert s.start_ns >= parent.start_ns

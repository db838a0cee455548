"""Causal paths as OpenTelemetry traces: `paths --otlp` and `export --otlp` POST to a local
OTLP/HTTP receiver that decodes with opentelemetry-proto, as a collector does. A saved trace
of the testbed (tests/data/paths/trace.jsonl: client, web, app1, db) gives the requests."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from coordinator.cli.main import main
from coordinator.config.trace_file import read_trace
from coordinator.export.otlp import check_endpoint
from linkgrad.errors import InputError
from linkgrad.paths.analysis import client_requests
from linkgrad.paths.from_hosts import link_hosts
from linkgrad.paths.reconcile import HostRecord, HostTrace
from linkgrad.paths.spans import RequestTraces, request_traces
from tests.fakes.front_end_log import write_front_end_log
from tests.fakes.otlp_receiver import ReceivedSpan, check_trace_shape, otlp_receiver

TRACE = Path(__file__).parent / "data" / "paths" / "trace.jsonl"


def _traces() -> RequestTraces:
    linked = link_hosts(list(read_trace(TRACE)), "context", 2.0, None)
    return request_traces(linked.linked)


def test_each_request_is_a_trace_of_nested_server_and_client_spans():
    got = _traces()
    linked = link_hosts(list(read_trace(TRACE)), "context", 2.0, None).linked
    # every tree from a client's request is a trace; the rest are counted, not sent
    from_clients = set(client_requests(linked.trace).tolist())
    assert len(got.traces) == sum(i.root in from_clients for i in linked.best)
    assert len(got.traces) + got.fragments == len(linked.best)
    assert len({t.trace_id for t in got.traces}) == len(got.traces)
    full = 0
    for t in got.traces:
        spans = [ReceivedSpan(f"{s.trace_id:032x}", f"{s.span_id:016x}",
                              None if s.parent_id is None else f"{s.parent_id:016x}", s.name,
                              s.kind, s.service, s.start_ns, s.end_ns, s.attributes)
                 for s in t.spans]
        check_trace_shape(spans, "web/nginx")
        names = [s.name for s in t.spans]
        # web -> app1 -> db and back: the testbed's call structure, spans for both ends
        if "app1/python->db/postgres:5432" in names:
            full += 1
            assert names[:3] == ["web/nginx:80", "web/nginx->app1/python:8000",
                                 "app1/python:8000"]
            assert "db/postgres:5432" in names
            root = t.spans[0]
            assert root.attributes["client.port"] > 0
            if root.attributes.get("linkgrad.reply_seen", True):  # the front end's own time
                assert root.attributes["linkgrad.node_delay_s"] >= 0
    assert full >= len(got.traces) // 2
    assert got.traces == _traces().traces  # the same ids again: a re-export is the same


def test_paths_otlp_sends_what_its_dry_run_prints(capsys):
    with otlp_receiver() as receiver:
        assert main(["paths", "--trace", str(TRACE), "--otlp", receiver.url]) == 0
        out = capsys.readouterr().out
        assert main(["paths", "--trace", str(TRACE), "--otlp", receiver.url + "/"]) == 0
        capsys.readouterr()
    assert {p for p in receiver.posts} == {("/v1/traces", "application/x-protobuf")}
    expected = _traces()
    traces = receiver.traces()
    assert len(traces) == len(expected.traces)
    assert all(len(spans) == 2 * len(t.spans) for t, spans in  # sent twice, the same ids
               zip(expected.traces, (traces[f"{t.trace_id:032x}"] for t in expected.traces),
                   strict=True))
    for spans in traces.values():
        check_trace_shape(spans[:len(spans) // 2], "web/nginx")
    assert f"Sent {len(expected.traces)} traces" in out
    assert f"to {receiver.url}/v1/traces" in " ".join(out.split())
    assert "\nnext: " in out
    # --dry-run: the same request as OTLP/JSON (ids in hex), nothing sent
    assert main(["paths", "--trace", str(TRACE), "--otlp", "http://127.0.0.1:9",
                 "--dry-run"]) == 0
    body = json.loads(capsys.readouterr().out)
    printed = Counter(s["traceId"] for r in body["resourceSpans"] for ss in r["scopeSpans"]
                      for s in ss["spans"])
    assert {k: 2 * v for k, v in printed.items()} == {k: len(v) for k, v in traces.items()}
    services = {a["value"]["stringValue"] for r in body["resourceSpans"]
                for a in r["resource"]["attributes"] if a["key"] == "service.name"}
    assert services == {"web/nginx", "app1/python", "db/postgres"}


def test_export_names_each_request_by_its_transaction(tmp_path, capsys):
    """A run directory's trace linked again, each request named from the run's web log."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(TRACE, run / "paths-trace.jsonl")
    write_front_end_log(TRACE, run / "weblog.log")
    (run / "experiment.json").write_text(json.dumps({
        "name": "shop", "web_log": {"path": "/var/log/shop.csv", "format": "csv"},
        "transactions": {"A": "^/a/", "B": "^/b/"}}))
    with otlp_receiver() as receiver:
        assert main(["export", str(run), "--otlp", receiver.url]) == 0
    out = capsys.readouterr().out
    roots = [s for s in receiver.spans if s.parent_id is None]
    assert [s.name for s in roots] == [s.attributes["linkgrad.transaction"] for s in roots]
    assert {s.name for s in roots} == {"A", "B"}
    assert f"Sent {len(roots)} traces" in out
    assert f"{len(roots)} named by their transaction" in " ".join(out.split())
    assert main(["export", str(run), "--otlp", receiver.url, "--dry-run"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["dry_run"], printed["target"]) == (True, "otlp")
    assert printed["url"] == f"{receiver.url}/v1/traces"
    assert printed["body"]["resourceSpans"]


@pytest.mark.parametrize(("url", "said"), [
    ("http://collector:4318/v1/traces", "give the base endpoint"),
    ("ftp://collector:4318", "not an http:// or https:// URL"),
    ("collector:4318", "not an http:// or https:// URL"),
    ("http://", "with a host"),
    ("http://[::1", "not a URL"),
    ("http://collector:4318?key=1", r"no \?query"),
])
def test_an_endpoint_that_is_no_base_url_is_bad_input(url, said):
    with pytest.raises(InputError, match=said):
        check_endpoint(url, "--otlp")


def test_bad_otlp_arguments_are_said_before_anything_is_captured(tmp_path, capsys):
    assert main(["paths", "--trace", str(TRACE), "--dry-run"]) == 2
    assert "field '--dry-run': only with --otlp URL" in capsys.readouterr().err
    # checked before the experiment is even read
    assert main(["paths", str(tmp_path / "nope.yaml"), "--otlp", "collector:4318"]) == 2
    assert "--otlp" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--otlp", "http://127.0.0.1:9"]) == 2
    assert "paths-trace.jsonl: the run has no causal-path trace" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "gone"), "--otlp", "http://127.0.0.1:9"]) == 2


def test_a_collector_that_refuses_or_is_not_there_is_a_runtime_failure(capsys, monkeypatch):
    with otlp_receiver(status=400) as receiver:
        assert main(["paths", "--trace", str(TRACE), "--otlp", receiver.url]) == 1
    err = capsys.readouterr().err
    assert f"the collector at {receiver.url}/v1/traces did not take the traces" in err
    assert "400" in err
    assert "Traceback" not in err
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    assert main(["paths", "--trace", str(TRACE), "--otlp", "http://127.0.0.1:9"]) == 1
    captured = capsys.readouterr()
    assert "Connection refused" in captured.err
    assert "messages" in captured.out  # the analysis was printed before the send failed


@pytest.mark.parametrize(("host", "shift_s"), [("web", 0.003), ("client", 0.05),
                                               ("web", -0.05)])
def test_hosts_clocks_apart_keep_each_trace_s_shape(host, shift_s):
    """The trace's order is each sender's own clock: with one host's clock ahead or behind,
    a child can come before its parent there. Spans are built parents first all the same."""
    hosts = [h if h.name != host else replace(
        h, records=[replace(r, first_s=r.first_s + shift_s, last_s=r.last_s + shift_s)
                    for r in h.records],
        openings=tuple((a, b, t + shift_s) for a, b, t in h.openings))
        for h in read_trace(TRACE)]
    got = request_traces(link_hosts(hosts, "context", 2.0, None).linked)
    assert len(got.traces) == len(_traces().traces)
    for t in got.traces:
        by_id = {s.span_id: s for s in t.spans}
        check_trace_shape([ReceivedSpan(f"{s.trace_id:032x}", f"{s.span_id:016x}",
                                        None if s.parent_id is None else f"{s.parent_id:016x}",
                                        s.name, s.kind, s.service, s.start_ns, s.end_ns,
                                        s.attributes) for s in t.spans], "web/nginx")
        for s in t.spans:  # the database's calls are app1's, whichever clock is off
            if s.name.startswith("app1/python->db"):
                assert by_id[s.parent_id].name == "app1/python:8000"



def test_a_call_from_an_untraced_node_hangs_under_the_call_into_it():
    """web traced, app not: app's callback to web's second service (port 81) comes from a
    node with no spans. Its server span is the child of web's client span to app (app's
    work is inside it), not of the root, and is not moved into that span as if it were
    that call's other end."""
    client, web, app = "10.0.0.1", "10.0.0.2", "10.0.0.3"
    seen: dict[str, list[HostRecord]] = {client: [], web: []}  # by the traced hosts

    def message(src, dst, at, size, seq=1000):
        for end, other, sent, t in ((src, dst, True, at), (dst, src, False, at + 2e-4)):
            if end[0] in seen:
                process = "ab" if end[0] == client else "srv"
                seen[end[0]].append(HostRecord(end, other, sent, seq, seq + size, t, t,
                                               False, process))
    for i in range(30):
        t = 1795000000.0 + 0.1 * i
        c, w80, w81 = (client, 40000 + i), (web, 80), (web, 81)
        wa, a8, aw = (web, 50000 + i), (app, 8000), (app, 51000 + i)
        message(c, w80, t, 100)
        message(wa, a8, t + 0.001, 200)
        message(aw, w81, t + 0.003, 50)  # app's callback
        message(w81, aw, t + 0.004, 60, 7000)
        message(a8, wa, t + 0.006, 300, 9000)
        message(w80, c, t + 0.007, 400, 5000)
    for records in seen.values():
        records.sort(key=lambda r: r.first_s)
    hosts = [HostTrace("client", frozenset({client}), frozenset(), seen[client]),
             HostTrace("web", frozenset({web}), frozenset({("0.0.0.0", 80), ("0.0.0.0", 81)}),
                       seen[web])]
    got = request_traces(link_hosts(hosts, "context", 2.0, None).linked)
    assert len(got.traces) == 30
    for t in got.traces:
        by_id = {s.span_id: s for s in t.spans}
        [callback] = [s for s in t.spans if s.name == "web/srv:81"]
        parent = by_id[callback.parent_id]
        assert (parent.kind, parent.name) == ("client", f"web/srv->{app}:8000")
        assert "linkgrad.clock_moved_s" not in callback.attributes
        assert parent.start_ns < callback.start_ns < callback.end_ns < parent.end_ns

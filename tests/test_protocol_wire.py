"""The daemons' wire format, byte for byte: what other tools (and older coordinators) read.

Each case feeds request lines to a daemon's real serve loop and compares the JSON lines it
writes with the format the daemons had before the protocol was typed (issue 11: no
behaviour change), so a renamed key, a null where a field was absent, or a request newly
refused fails here.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from injector.daemon import serve as serve_injector
from injector.schedule import Caps
from linkgrad.protocol.injector import Add, ConstantSchedule, LinkSpec, StatsRequest
from linkgrad.protocol.jsonlines import DaemonClient, DidNotStart
from linkgrad.protocol.sniffer import SnifferReady
from sniffer.daemon import Service, Sniffer
from sniffer.daemon import run as run_sniffer
from sniffer.links import Process, SocketRecord
from tests.fakes.remote import FakeEngine, ThreadChannel


def _injector_lines(*requests: str) -> list[dict]:
    out = io.StringIO()
    serve_injector(FakeEngine(), Caps(), io.StringIO("".join(r + "\n" for r in requests)),
                   out, reaper=lambda chain: None, clock=lambda: 1000.0)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_injector_replies_keep_their_keys():
    add = ('{"id": 1, "cmd": "add", "link": {"proto": "udp", "dst": "10.0.0.2:53"}, '
           '"schedule": {"kind": "constant", "magnitude_ms": 5}}')
    lines = _injector_lines(
        '{"id": 7, "cmd": "health", "extra": "ignored"}', add,
        '{"id": 2, "cmd": "stats", "link_id": 9}', '{"id": 3, "cmd": "stats", "link_id": 1}',
        '{"id": "x", "cmd": "remove", "link_id": "1"}', '{"id": 4, "cmd": "stop"}')
    ready, health, added, unknown, one, bad_id, stop, stopped = lines
    assert ready == {"event": "ready", "pid": ready["pid"], "chain": "LINKGRAD-FAKE",
                     "stale_removed": False}
    assert health["id"] == 7
    assert set(health["result"]) == {"pid", "backend", "chain", "links", "held",
                                     "callback_errors", "realtime", "stale_removed", "caps"}
    assert added == {"id": 1, "ok": True, "result": {"link_id": 1, "link":
                                                     "udp *:0 -> 10.0.0.2:53",
                                                     "schedule_id": 0}}
    assert unknown == {"id": 2, "ok": True, "result": {}}  # no such link: nothing
    assert set(one["result"]["links"]["1"]) == {"link", "schedule_id", "dropped", "held",
                                                "schedules", "drop_times_s"}
    assert one["result"]["links"]["1"]["drop_times_s"] is None  # not asked for
    assert bad_id["id"] == "x"  # echoed, whatever it is
    assert bad_id["ok"] is False
    assert set(bad_id) == {"id", "ok", "error"}
    assert bad_id["error"]["kind"] == "input"
    assert bad_id["error"]["message"].startswith("field 'link_id'")  # a string is no id
    assert stop == {"id": 4, "ok": True, "result": {"stats": {"1": stop["result"]["stats"]["1"]}}}
    assert stopped == {"event": "stopped", "reason": "stop"}


def test_injector_errors_name_the_field_and_keep_the_daemon_alive():
    lines = _injector_lines(
        "not json", '{"id": 1, "cmd": "bogus"}',
        '{"id": 2, "cmd": "add", "link": {"dst": "10.0.0.2", "x": 1}, '
        '"schedule": {"kind": "constant", "magnitud_ms": 5}}',
        '{"id": 3, "cmd": "add", "link": {"dst": "10.0.0.2"}, '
        '"schedule": {"kind": "square", "magnitude_ms": 900, "period_s": 1, "cycles": 2}}')
    _, not_json, bogus, misspelt, capped, stopped = lines
    assert not_json == {"id": None, "ok": False,
                        "error": {"kind": "input", "message": not_json["error"]["message"]}}
    assert bogus["error"] == {"kind": "input", "message": "field 'cmd': unknown command 'bogus'"}
    assert "field 'link.x': unknown field" in misspelt["error"]["message"]
    assert "field 'schedule.magnitud_ms': unknown field" in misspelt["error"]["message"]
    assert "above the cap" in capped["error"]["message"]
    assert stopped["reason"] == "stdin closed"


def _sniffer(stdin: str, warning: str | None = None) -> list[dict]:
    counters = iter([[], [SocketRecord("tcp", "10.0.0.3", 40001, "10.0.0.5", 5432, 11, 4, 3)]])
    sniffer = Sniffer(lambda: next(counters), lambda: {11: Process(7, "python")},
                      (32768, 60999), lambda: 100.0)
    out = io.StringIO()
    run_sniffer(Service(sniffer, out), io.StringIO(stdin), warning)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_sniffer_lines_keep_their_keys():
    ready, poll, stopped = _sniffer('{"id": 1, "cmd": "poll", "threshold": 0}\n')
    assert ready == {"event": "ready", "pid": ready["pid"], "closed_sockets": True,  # no null
                     "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip()}
    assert poll == {"id": 1, "ok": True, "result": {"from": 100.0, "to": 100.0, "links": [
        {"proto": "tcp", "src": {"addr": "10.0.0.3", "pid": 7, "process": "python", "port": 0},
         "dst": {"addr": "10.0.0.5", "pid": None, "process": None, "port": 5432},
         "messages": 4},
        {"proto": "tcp", "src": {"addr": "10.0.0.5", "pid": None, "process": None,
                                 "port": 5432},
         "dst": {"addr": "10.0.0.3", "pid": 7, "process": "python", "port": 0},
         "messages": 3}]}}
    assert stopped == {"event": "stopped", "reason": "stdin closed"}
    warned = _sniffer("", warning="closed sockets not reported")[0]
    assert warned["warning"] == "closed sockets not reported"
    assert warned["closed_sockets"] is False


def test_the_client_sends_no_nulls_and_passes_over_a_stale_reply():
    sent: list[dict] = []

    def daemon(stdin, stdout):
        stdout.write('{"event": "ready", "pid": 1, "chain": "C", "stale_removed": false}\n')
        stdout.flush()
        for line in stdin:
            request = json.loads(line)
            sent.append(request)
            if request["id"] == 2:  # the reply to a request given up on comes late
                stdout.write('{"id": 1, "ok": true, "result": {}}\n')
            stdout.write(json.dumps({"id": request["id"], "ok": True, "result": {}}) + "\n")
            stdout.flush()
        stdout.write('{"event": "stopped", "reason": "stdin closed"}\n')
        return 0

    from linkgrad.protocol.injector import InjectorReady

    client = DaemonClient(ThreadChannel(daemon, "echo"), "echo", InjectorReady)
    client._ids = iter([2, 3])  # as if request 1 had been sent and then given up on
    client.call(StatsRequest())
    with pytest.raises(Exception, match="unexpected answer"):  # {} is no Added
        client.call(Add(link=LinkSpec(dst="10.0.0.2"),
                        schedule=ConstantSchedule(magnitude_ms=5)))
    client.close()
    assert sent[0] == {"id": 2, "cmd": "stats"}  # no "link_id": null
    assert sent[1]["link"] == {"proto": "tcp", "dst": "10.0.0.2"}


def test_a_daemon_that_says_something_else_first_did_not_start():
    def daemon(stdin, stdout):
        stdout.write('{"event": "error", "message": "queue 4200 in use"}\n')
        return 1

    with pytest.raises(DidNotStart, match="queue 4200 in use") as failed:
        DaemonClient(ThreadChannel(daemon, "failing"), "sniffer on x", SnifferReady)
    assert failed.value.said == {"event": "error", "message": "queue 4200 in use"}

"""Property-based tests of both daemons' request loops (issue 13): no request line, however
malformed, kills a daemon or gets anything but one strict-JSON reply; a bad field is named;
the protocol models (which the coordinator uses too) refuse whatever the daemon refuses.

Each request type starts from a valid request, then one field is replaced by a nasty value
(NaN, infinities, huge integers, booleans, non-ASCII digits, wildcard and IPv6 addresses,
nested containers), removed, or joined by a misspelt one. Whole lines are nasty too: not JSON,
not UTF-8, nested 100,000 deep, longer than the line limit.
"""

from __future__ import annotations

import copy
import io
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from injector.daemon import serve as serve_injector
from injector.schedule import Caps
from linkgrad.protocol.fields import valid_id
from linkgrad.protocol.injector import INJECTOR_REQUEST
from linkgrad.protocol.jsonlines import BadLine, request_lines
from linkgrad.protocol.sniffer import SNIFFER_REQUEST
from sniffer.daemon import Service, Sniffer
from sniffer.daemon import run as run_sniffer
from tests.fakes.remote import FakeEngine

FUZZ = settings(max_examples=80, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

NASTY_SCALARS = [
    math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, 10**30, -(10**30), 2**63, -1, 0,
    True, False, None, "", " ", "5", "1e3", "NaN", "Infinity", "٥٤", "10.0.0.2:٥٤",
    "10.0.0.2:５４", "0.0.0.0/0", "0.0.0.0", "0/0", "::/0", "::", "::1", "[::1]:80",
    "fe80::1%eth0", "::ffff:10.0.0.2", "10.0.0.2:70000", "10.0.0.2:-1", "10.0.0.2:",
    "10.0.0.0/0.0.0.0", "10.0.0.2/33", "256.0.0.1", "10.0.0.2\x00", "sctp", "x" * 300,
]
# a field's replacement: a nasty scalar, any JSON-ish value, or a container of them
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8)
VALUES = st.one_of(st.sampled_from(NASTY_SCALARS), JSONISH)

INJECTOR_VALID: list[dict[str, Any]] = [
    {"cmd": "health"},
    {"cmd": "add", "link": {"proto": "udp", "src": "10.0.0.1", "dst": "10.0.0.2:53"},
     "schedule": {"kind": "constant", "magnitude_ms": 5.0, "start": 1000.0, "duration_s": 60.0,
                  "loss_fraction": 0.0}},
    {"cmd": "add", "link": {"proto": "tcp", "dst": "10.0.1.0/24:5432"},
     "schedule": {"kind": "square", "magnitude_ms": 2.0, "start": 1001.0, "period_s": 4.0,
                  "cycles": 6}},
    {"cmd": "schedule", "link_id": 1, "schedule": {"kind": "off"}},
    {"cmd": "remove", "link_id": 1},
    {"cmd": "stats", "link_id": 1},
    {"cmd": "stop"},
]
SNIFFER_VALID: list[dict[str, Any]] = [
    {"cmd": "health"}, {"cmd": "poll", "threshold": 3},
    {"cmd": "watch", "interval_s": 5.0, "threshold": 1}, {"cmd": "unwatch"}, {"cmd": "stop"},
]


def _paths(data: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every field path of a request (nested objects included)."""
    out = []
    for key, value in data.items():
        out.append((*prefix, key))
        if isinstance(value, dict):
            out += _paths(value, (*prefix, key))
    return out


@st.composite
def mutated(draw: st.DrawFn, valid: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """A valid request with one field replaced, removed or misspelt: (request, its path)."""
    request = copy.deepcopy(draw(st.sampled_from(valid)))
    request["id"] = draw(st.integers(1, 10**6))
    path = draw(st.sampled_from(_paths(request)))
    parent = request
    for key in path[:-1]:
        parent = parent[key]
    how = draw(st.sampled_from(["replace", "replace", "replace", "remove", "misspell"]))
    if how == "replace":
        parent[path[-1]] = draw(VALUES)
    elif how == "remove":
        del parent[path[-1]]
    else:
        parent[path[-1] + "x"] = parent.pop(path[-1])
    return request, ".".join(path)


def _strict(text: str) -> Any:
    """JSON as other tools read it: NaN and Infinity are not JSON."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in a daemon's output: not JSON")
    return json.loads(text, parse_constant=refuse)


def _lines(raw: bytes) -> bytes:
    return raw if raw.endswith(b"\n") else raw + b"\n"


def run_injector(*lines: bytes) -> list[dict[str, Any]]:
    out = io.StringIO()
    status = serve_injector(FakeEngine(), Caps(), io.BytesIO(b"".join(map(_lines, lines))), out,
                            reaper=lambda chain: None, clock=lambda: 1000.0)
    assert status == 0
    return [_strict(line) for line in out.getvalue().splitlines()]


def run_sniffer_lines(*lines: bytes) -> list[dict[str, Any]]:
    sniffer = Sniffer(lambda: [], lambda: {}, (32768, 60999), lambda: 100.0)
    out = io.StringIO()
    assert run_sniffer(Service(sniffer, out), io.BytesIO(b"".join(map(_lines, lines)))) == 0
    return [m for m in map(_strict, out.getvalue().splitlines())
            if m.get("event") != "report"]  # a watch's reports come when they come


HEALTH = b'{"id": "last", "cmd": "health"}'


def _check_replies(replies: list[dict[str, Any]], n_requests: int) -> list[dict[str, Any]]:
    """One reply per request line, each well formed; the last (health) answered: alive."""
    ready, *answers, stopped = replies
    assert ready["event"] == "ready"
    assert stopped == {"event": "stopped", "reason": "stdin closed"}
    assert len(answers) == n_requests
    for reply in answers:
        assert set(reply) == {"id", "ok", "result" if reply["ok"] else "error"}
        if not reply["ok"]:
            assert reply["error"]["kind"] in ("input", "runtime")
            assert reply["error"]["message"]
    assert answers[-1]["id"] == "last"
    assert answers[-1]["ok"] is True
    return answers


def _named(message: str, path: str) -> bool:
    """Whether an error message names `path` or the object holding it."""
    parts = path.split(".")
    return any(f"field '{'.'.join(parts[:i])}" in message for i in range(1, len(parts) + 1))


@pytest.mark.parametrize(("valid", "adapter", "run"), [
    (INJECTOR_VALID, INJECTOR_REQUEST, run_injector),
    (SNIFFER_VALID, SNIFFER_REQUEST, run_sniffer_lines)], ids=["injector", "sniffer"])
@FUZZ
@given(data=st.data())
def test_a_mutated_request_gets_one_answer_naming_the_field(valid, adapter, run, data):
    request, path = data.draw(mutated(valid))
    if request.get("cmd") == "stop":
        request["cmd"] = "health"  # a stop would end the loop before the last request
    line = json.dumps(request).encode()  # Python writes NaN and Infinity: the daemon must cope
    reply = _check_replies(run(line, HEALTH), 2)[0]
    sent_id = request.get("id")
    assert reply["id"] == (sent_id if valid_id(sent_id) else None)  # never a NaN echoed
    try:
        adapter.validate_python(request)
        model_accepts = True
    except ValidationError:
        model_accepts = False
    if not model_accepts:  # the coordinator's models refuse it, and so does the daemon
        assert reply["ok"] is False
        assert reply["error"]["kind"] == "input"
        assert _named(reply["error"]["message"], path), (path, reply)


WHOLE_LINES = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=40).map(str.encode),
    st.sampled_from([b"[" * 100_000, b'{"id": 1, "cmd": ' + b"[" * 50_000,
                     b"\xff\xfe{}", b'{"id": 1, "cmd": "health\xc3"}', b"NaN", b"[]", b"null",
                     b'"health"', b'{"id": NaN, "cmd": "health"}', b'{"id": [1], "cmd": 5}',
                     b'{"id": 1, "cmd": "health", "cmd": "stop"}', b"1" * 5000,
                     b'{"id": 1, "cmd": "poll", "threshold": ' + b"9" * 5000 + b"}"]))


def _one_line(raw: bytes) -> bool:
    """One line that is not blank (blank lines get no answer) and does not stop the daemon."""
    return (b"\n" not in raw and b'"stop"' not in raw
            and bool(raw.decode(errors="replace").strip()))


@pytest.mark.parametrize("run", [run_injector, run_sniffer_lines], ids=["injector", "sniffer"])
@FUZZ
@given(lines=st.lists(WHOLE_LINES.filter(_one_line), min_size=1, max_size=4))
def test_garbage_lines_get_an_error_each_and_the_daemon_serves_on(run, lines):
    answers = _check_replies(run(*lines, HEALTH), len(lines) + 1)
    for raw, reply in zip(lines, answers, strict=False):
        if reply["ok"]:  # a garbage line that happens to be a valid request
            assert _strict(raw.decode())["cmd"] in ("health", "poll", "unwatch", "stats")


def test_over_long_lines_are_refused_in_bounded_memory():
    stream = io.BytesIO(b"x" * 25 + b"\n" + b'{"cmd": "health"}\n' + b"y" * 10 + b"\n")
    lines = list(request_lines(stream, max_bytes=16))
    assert lines == [BadLine("a line longer than 16 bytes is no request"),
                     BadLine("a line longer than 16 bytes is no request"), "y" * 10 + "\n"]
    huge = b'{"id": 1, "cmd": "health", "pad": "' + b"z" * (1 << 21) + b'"}'
    answers = _check_replies(run_injector(huge, HEALTH), 2)
    assert answers[0] == {"id": None, "ok": False, "error": {
        "kind": "input", "message": "a line longer than 1048576 bytes is no request"}}


def test_non_utf8_and_nesting_are_said_plainly():
    answers = _check_replies(run_injector(b'{"id": 1, "cmd": "h\xffealth"}', b"[" * 100_000,
                                          HEALTH), 3)
    assert answers[0]["error"]["message"].startswith("not UTF-8: byte 0xff at offset 19")
    assert answers[1]["error"]["message"].startswith("nested too deeply")


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("dst", "10.0.0.2:٥٤", "is not a number 0-65535"),
    ("dst", "0.0.0.0/0", "a link is between hosts"),
    ("src", "0.0.0.0/0.0.0.0", "a link is between hosts"),
    ("dst", "0.0.0.0", "unspecified address"),
    ("dst", "::/0", "a link is between hosts"),
    ("dst", "fe80::1%eth0", "a zone (%...) cannot be matched"),
    ("src", "[::1]x", "written [ADDRESS]:PORT"),
    ("dst", 5, "valid string"),
])
def test_link_addresses_are_refused_with_the_reason(field, value, expected):
    request = {"id": 1, "cmd": "add", "link": {"proto": "tcp", "dst": "10.0.0.9", field: value},
               "schedule": {"kind": "constant", "magnitude_ms": 5}}
    reply = _check_replies(run_injector(json.dumps(request).encode(), HEALTH), 2)[0]
    assert reply["error"]["kind"] == "input"
    assert reply["error"]["message"].startswith(f"field 'link.{field}': ")
    assert expected in reply["error"]["message"]


@pytest.mark.parametrize(("schedule", "field", "expected"), [
    ({"kind": "square", "magnitude_ms": 5, "period_s": 1, "cycles": 10**400}, "cycles",
     "less than or equal to 1000000"),
    ({"kind": "square", "magnitude_ms": 5, "period_s": 1, "cycles": 2.0}, "cycles",
     "valid integer"),
    ({"kind": "square", "magnitude_ms": 5, "period_s": 1, "cycles": 2, "start": math.nan},
     "start", "finite number"),
    ({"kind": "constant", "magnitude_ms": math.inf}, "magnitude_ms", "finite number"),
    ({"kind": "constant", "magnitude_ms": 5, "duration_s": 1e308}, "duration_s",
     "less than or equal to 86400"),
    ({"kind": "constant", "magnitude_ms": True}, "magnitude_ms", "valid number"),
    ({"kind": "constant", "magnitude_ms": "5"}, "magnitude_ms", "valid number"),
])
def test_schedule_numbers_are_finite_bounded_and_of_their_type(schedule, field, expected):
    request = {"id": 1, "cmd": "add", "link": {"dst": "10.0.0.9"}, "schedule": schedule}
    reply = _check_replies(run_injector(json.dumps(request).encode(), HEALTH), 2)[0]
    assert reply["error"]["message"].startswith(f"field 'schedule.{field}': ")
    assert expected in reply["error"]["message"]


def test_sniffer_threshold_infinity_and_a_boolean_are_refused():
    answers = _check_replies(run_sniffer_lines(
        b'{"id": 1, "cmd": "poll", "threshold": Infinity}',
        b'{"id": 2, "cmd": "watch", "interval_s": NaN}',
        b'{"id": 3, "cmd": "poll", "threshold": true}', HEALTH), 4)
    assert [a["error"]["message"] for a in answers[:3]] == [
        "field 'threshold': Input should be a valid integer",
        "field 'interval_s': Input should be a finite number",
        "field 'threshold': Input should be a valid integer"]


def test_an_id_that_cannot_be_echoed_is_not():
    replies = _check_replies(run_injector(b'{"id": NaN, "cmd": "health"}',
                                          b'{"id": {"a": 1}, "cmd": "health"}', HEALTH), 3)
    assert [r["id"] for r in replies[:2]] == [None, None]
    assert replies[0]["error"]["message"].startswith("field 'id'")

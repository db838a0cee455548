"""`linkgrad export --perfsonar` against a local receiver standing in for perfSONAR 5's archive
(none is packaged for Debian): it takes what the Apache proxy in front of Logstash and the
pScheduler pipeline need (notes B2/B3: a PUT of JSON, Basic auth, `x-ps-observer`, a
pScheduler record whose hrefs the dissect filter splits) and refuses anything else. Then a
wrong password, an archive that fails, and one nobody listens on."""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from coordinator.cli.main import main
from tests.export_run import make_run

USER, PASSWORD = "pscheduler_logstash", "s3cret"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def shape_problems(record: object) -> list[str]:
    """What a record lacks that the Logstash pipeline reads (02-pscheduler_common.conf and the
    endpoints, duration and output stages), as notes B2/B3 list it."""
    if not isinstance(record, dict):
        return ["not a JSON object"]
    problems = []

    def need(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    test, tool, run, task = (record.get(k, {}) for k in ("test", "tool", "run", "task"))
    need(isinstance(test.get("type"), str) and test["type"].islower(), "test.type")
    spec = test.get("spec", {})
    need(isinstance(spec, dict) and "source" in spec and "dest" in spec, "test.spec source/dest")
    need({"name", "version"} <= set(tool), "tool{name,version}")
    need(isinstance(record.get("participants"), list) and record["participants"],
         "participants")
    for key in ("start-time", "end-time", "added"):
        try:
            need(datetime.fromisoformat(run[key]).tzinfo is not None, f"run.{key} zone")
        except (KeyError, TypeError, ValueError):
            problems.append(f"run.{key} ISO 8601")
    need(re.fullmatch(rf"https?://[^/]+/.*/tasks/{UUID}", task.get("href", "")) is not None,
         "task.href .../tasks/<uuid>")
    need(re.fullmatch(rf"https?://[^/]+/.*/runs/{UUID}", run.get("href", "")) is not None,
         "run.href .../runs/<uuid>")
    need(re.fullmatch(r"PT[0-9]+(\.[0-9]+)?S", task.get("detail", {}).get("duration", ""))
         is not None, "task.detail.duration ISO 8601")
    need("start" in task.get("schedule", {}), "task.schedule")
    need(record.get("result", {}).get("succeeded") is True, "result.succeeded")
    return problems


@dataclass
class Receiver:
    url: str
    status: int = 200  # what it answers a good request with
    received: list[dict[str, object]] = field(default_factory=list)
    observers: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    good = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, status: int, text: str) -> None:
            if status >= 300:
                receiver.refused.append(text)
            self.send_response(status)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            self.wfile.write(text.encode())

        def do_POST(self) -> None:
            self._answer(405, "this archive is written by PUT")

        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.headers.get("authorization") != good:
                return self._answer(401, "Unauthorized")
            if self.headers.get("content-type") != "application/json":
                return self._answer(415, "not application/json")
            if not self.headers.get("x-ps-observer"):
                return self._answer(400, "no x-ps-observer header")
            problems = shape_problems(json.loads(body))
            if problems:
                return self._answer(400, "; ".join(problems))
            if receiver.status != 200:
                return self._answer(receiver.status, "the archive is down")
            receiver.received.append(json.loads(body))
            receiver.observers.append(self.headers["x-ps-observer"])
            return self._answer(200, "ok")

    return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(r := Receiver("")))
    r.url = f"http://127.0.0.1:{server.server_address[1]}/logstash"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield r
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _auth_file(tmp_path: Path, password: str = PASSWORD) -> Path:
    """As perfsonar-archive writes /etc/perfsonar/logstash/proxy_auth.json."""
    path = tmp_path / "proxy_auth.json"
    token = base64.b64encode(f"{USER}:{password}".encode()).decode()
    path.write_text(f'"Authorization":"Basic {token}"\n')
    return path


def _export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["export", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_receivers_check_can_fail() -> None:
    assert shape_problems({"test": {"type": "linkgrad"}}) != []


def test_every_measurement_is_put_as_a_record_the_pipeline_takes(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, receiver: Receiver) -> None:
    run_dir = make_run(tmp_path)
    code, out, err = _export(capsys, str(run_dir), "--perfsonar", receiver.url, "--auth-file",
                             str(_auth_file(tmp_path)), "--observer", "coord.example")
    assert code == 0, err
    assert receiver.refused == []
    assert len(receiver.received) == 3
    assert receiver.observers == ["coord.example"] * 3
    assert {r["test"]["type"] for r in receiver.received} == {"linkgrad"}
    assert "3 records PUT to" in out


def test_a_dry_run_shows_the_records_and_sends_nothing(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, receiver: Receiver) -> None:
    code, out, _ = _export(capsys, str(make_run(tmp_path)), "--perfsonar", receiver.url,
                           "--auth-file", str(_auth_file(tmp_path)), "--dry-run")
    assert code == 0
    said = json.loads(out)
    assert said["method"] == "PUT"
    assert said["headers"]["authorization"] == "Basic (from the auth file)"  # no secret shown
    assert PASSWORD not in out
    assert [shape_problems(r) for r in said["records"]] == [[], [], []]
    assert receiver.received == []


def test_a_wrong_password_is_bad_input_naming_the_auth_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, receiver: Receiver) -> None:
    auth = _auth_file(tmp_path, "wrong")
    code, _, err = _export(capsys, str(make_run(tmp_path)), "--perfsonar", receiver.url,
                           "--auth-file", str(auth))
    assert code == 2
    assert f"the archive at {receiver.url} refused the credentials in {auth}: HTTP 401" in err
    assert receiver.received == []


def test_an_archive_that_fails_is_a_runtime_failure_naming_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, receiver: Receiver) -> None:
    receiver.status = 503
    code, _, err = _export(capsys, str(make_run(tmp_path)), "--perfsonar", receiver.url,
                           "--auth-file", str(_auth_file(tmp_path)))
    assert code == 1
    assert f"the archive at {receiver.url} answered HTTP 503 (the archive is down)" in err
    assert "Traceback" not in err


def test_an_unreachable_archive_is_a_runtime_failure_naming_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/logstash"
    code, _, err = _export(capsys, str(make_run(tmp_path)), "--perfsonar", url,
                           "--auth-file", str(_auth_file(tmp_path)))
    assert code == 1
    assert f"linkgrad: error: cannot reach the archive at {url}: " in err
    assert "Traceback" not in err

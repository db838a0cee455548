"""`linkgrad export --prometheus` read back the way an operator's Prometheus reads it: Debian's
`prometheus-node-exporter` serves the file from its textfile directory (its other collectors
off), a `prometheus` scrapes it every second into a storage of its own, and the gradient, its
labels and a host counter come back over Prometheus's HTTP API. Both servers on free
localhost ports, stopped at the end. Real servers, but no root and no namespace: the tools'
absence is a skip with its reason (scripts/setup installs them, so CI runs this)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from coordinator.cli.main import main
from tests.export_run import EXPERIMENT, LINK_A, make_run
from tests.marks import needs_tool

pytestmark = [needs_tool("prometheus"), needs_tool("prometheus-node-exporter")]

DEADLINE_S = 20.0
T = TypeVar("T")
Servers = tuple[Path, str, list[subprocess.Popen[bytes]], Path]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> str | None:
    """The body, or None while the server is not answering yet."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read().decode()
    except OSError:
        return None


def _logs(procs: list[subprocess.Popen[bytes]], logs: Path) -> str:
    return "\n".join(f"{p.args[0]}: {(logs / f'{p.pid}.log').read_text()[-1500:]}"
                     for p in procs)


def _until(what: str, check: Callable[[], T | None], procs: list[subprocess.Popen[bytes]],
           logs: Path) -> T:
    """Polls `check()` until it gives something; fails saying `what` and the servers' logs."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), f"a server exited: {_logs(procs, logs)}"
        if (found := check()) is not None:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not {what} within {DEADLINE_S:g} s: {_logs(procs, logs)}")


def _start(argv: list[str], procs: list[subprocess.Popen[bytes]], logs: Path) -> None:
    with (logs / "starting.log").open("wb") as log:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    (logs / "starting.log").rename(logs / f"{p.pid}.log")  # the open file follows the rename
    procs.append(p)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    """(the textfile directory, Prometheus's URL, the processes, their logs' directory): both
    servers running."""
    textfiles, logs = tmp_path / "textfiles", tmp_path / "logs"
    textfiles.mkdir()
    logs.mkdir()
    exporter, server = _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: node\n    static_configs: [{{targets: ['127.0.0.1:{exporter}']}}]\n")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _start(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{exporter}",
                "--collector.disable-defaults", "--collector.textfile",
                f"--collector.textfile.directory={textfiles}"], procs, logs)
        _start(["prometheus", f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{server}"], procs, logs)
        yield textfiles, f"http://127.0.0.1:{server}", procs, logs
    finally:
        for p in procs:  # ours alone, by their own handles
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def _query(base: str, promql: str) -> list[dict[str, object]] | None:
    body = _get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    if body is None:
        return None
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    return answer["data"]["result"] or None


def test_prometheus_reads_the_gradient_back_through_node_exporter(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, servers: Servers) -> None:
    textfiles, base, procs, logs = servers
    assert main(["export", str(make_run(tmp_path)), "--prometheus",
                 str(textfiles / "shop.prom")]) == 0
    capsys.readouterr()
    wanted = f'linkgrad_gradient{{link="{LINK_A}",transaction="single"}}'
    (sample,) = _until("scraped the gradient", lambda: _query(base, wanted), procs, logs)
    assert float(sample["value"][1]) == pytest.approx(1.02)
    labels = sample["metric"]
    assert labels["experiment"] == EXPERIMENT
    assert labels["job"] == "node"
    assert set(labels) == {"__name__", "experiment", "transaction", "link", "job", "instance"}
    (cpu,) = _query(base, 'linkgrad_host_cpu_seconds_total{host="app1",mode="user"}') or [None]
    assert float(cpu["value"][1]) == pytest.approx(15.0)
    # node_exporter read the file without complaint (it says so per file)
    (error,) = _query(base, "node_textfile_scrape_error") or [None]
    assert float(error["value"][1]) == 0

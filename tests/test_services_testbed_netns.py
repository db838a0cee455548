"""`linkgrad testbed up --services 10` (root): ten generated services on ten hosts and a
client, each transaction answered through nginx at the front, a run measuring three links at
once against the graph's exact truth, and `down` leaving no namespace or process."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from testbed.lifecycle import status
from testbed.topology import services_topology
from testbed.transactions import transactions_of
from tests.marks import TESTBED
from tests.netns_tools.testbeds import (
    LINKGRAD,
    assert_no_rules,
    linkgrad_run,
    private_testbed,
    unique_tag,
)

pytestmark = TESTBED
TOPOLOGY = services_topology(10, seed=1)
# links with a truth of 3 for one transaction and 0 or 1 for the others (seed 1)
LINKS = ("s6->s7", "s0->s2", "s3->s4")
EXPERIMENT = """
name: generated
testbed: {tag}
workload: {{host: client, rate_per_s: 40}}
transactions: {{t0: ^/t0, t1: ^/t1, t2: ^/t2, t3: ^/t3}}
parameters:
  training_s: 20
  cycles: 6
  magnitude_ms: 1
  max_delay_ms: 1
  adaptive: false
  concurrent: 3
  include: [{include}]
paths: {{enabled: false}}
output: {output}
"""


@pytest.fixture(scope="module")
def testbed():
    tag = unique_tag("g")
    with private_testbed(tag, TOPOLOGY) as (info, root):
        yield tag, info, root


def test_every_service_runs_and_every_transaction_answers_through_the_front(testbed):
    tag, info, root = testbed
    report = status(tag, root)
    assert report.up
    assert sum(key.endswith("/service") for key in report.services or {}) == 10
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    done = subprocess.run([LINKGRAD, "testbed", "load", "--tag", tag, "--rate", "20",
                           "--duration", "3", "--json"], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["errors"] == 0, summary
    log = Path(info.web_log.path).read_text()
    for t in transactions_of(TOPOLOGY):
        assert f'"GET {t.path} HTTP/1.1" 200' in log


def test_three_links_at_once_hold_the_graph_s_truth(testbed):
    """Each (transaction, link)'s 95% interval holds the crossings the graph gives in at least
    9 of 12 (11.4 expected; 9 or fewer by chance alone is about 2%, 8 or fewer 0.2%)."""
    tag, _, root = testbed
    include = ", ".join(f"'^{link}$'" for link in LINKS)
    experiment = root / "generated.yaml"
    experiment.write_text(EXPERIMENT.format(tag=tag, include=include, output=root / "runs"))
    linkgrad_run(experiment, root, timeout_s=600)
    run_dir = next((root / "runs").iterdir())
    measured = json.loads((run_dir / "gradients.json").read_text())["links"]
    truth = {t.name: t.expected for t in transactions_of(TOPOLOGY)}
    inside, judged = 0, []
    for link in measured:
        pair = link["record"]["link"].split()[1].split(":")[0] + "->" + \
            link["record"]["link"].split()[3].split(":")[0]
        for name, g in link["transactions"].items():
            low, high = g["ci95"]
            judged.append((pair, name, truth[name][pair], low, high))
            inside += low <= truth[name][pair] <= high
    assert len(judged) == 12, judged
    assert inside >= 9, judged
    assert_no_rules(tag)


def test_down_leaves_no_namespace_or_process():
    tag = unique_tag("g")
    with private_testbed(tag, services_topology(3, seed=2)):
        pass
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout
    assert f"lgtb-{tag}-" not in namespaces
    left = subprocess.run(["pgrep", "-f", f"linkgrad-testbed-{tag}/"], capture_output=True,
                          text=True, check=False).stdout
    assert left == ""

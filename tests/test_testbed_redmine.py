"""The Redmine testbed for real (root): Debian's Redmine (Rails) on Apache + Passenger and
PostgreSQL in namespaces; its pages, `linkgrad paths` through Passenger's Unix sockets, and
`down` leaving nothing, the machine's own Redmine instance untouched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from linkgrad.weblog import read_log
from testbed.lifecycle import down, status, up
from testbed.redmine import INSTANCE_PATH, PROCESSES, TRUTH_LOG
from testbed.topology import REDMINE
from tests.marks import NETNS, needs_tool
from tests.netns_tools.testbeds import (
    LINKGRAD,
    alive,
    namespace_commands,
    private_root,
    unique_tag,
    wait_until_gone,
)

pytestmark = [*NETNS, needs_tool("apache2"),
              pytest.mark.skipif(not Path("/usr/share/redmine/config.ru").exists(),
                                 reason="Debian's redmine is not installed (scripts/setup)")]
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy from env

# round trips web<->db per page, from a packet capture with the session cookie sent back
# (benchmarks/redmine_truth.py; RESULTS.md, "redmine_truth")
CROSSINGS = {"issues": 31.0, "issue": 48.0, "search": 31.0, "login": 7.0}
MIX = "/projects/demo/issues=2,/issues/42=2,/search?q=river&scope=all=1,/login=1"
EXPERIMENT = """
name: {name}
testbed: {tag}
workload:
  host: client
  rate_per_s: 6
  mix: {mix}
transactions:
  issues: ^/projects/demo/issues$
  issue: ^/issues/\\d+$
  search: ^/search\\?
  login: ^/login$
parameters:
  training_s: 20
  include: ['web->db', 'db->web']
output: {output}
"""


def _instance_files() -> set[str]:
    """What the machine's own default Redmine instance holds (the testbed must not touch)."""
    return {str(p) for p in INSTANCE_PATH.resolve().rglob("*")} | {
        str(p) for d in (Path("/var/log/redmine"), Path("/var/cache/redmine")) if d.exists()
        for p in d.rglob("*")}


@pytest.fixture(scope="module")
def redmine():
    tag, root = unique_tag("m"), private_root()
    before = _instance_files()
    try:
        info = up(REDMINE, tag, root)  # a failed `up` undoes what it made itself
        try:
            yield info, root, tag, before
        finally:
            down(tag, root=root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fetch(url: str) -> tuple[int, str]:
    with DIRECT.open(url, timeout=60) as answer:
        return answer.status, answer.read().decode()


def test_every_page_type_answers_with_redmine(redmine):
    info, _, _, _ = redmine
    names = {t.name for t in info.transactions}
    assert names == {"issues", "issue", "search", "activity", "login"}
    pages = {t.name: fetch(t.url) for t in info.transactions}
    assert all(code == 200 for code, _ in pages.values()), {n: c for n, (c, _) in pages.items()}
    assert all("Redmine" in html for _, html in pages.values())
    assert pages["issues"][1].count('class="hascontextmenu') >= 20  # the seeded issues, listed
    assert "Meter 41: check the meter readings" in pages["issue"][1]
    assert "Results (10)" in pages["search"][1]
    assert 'id="activity"' in pages["activity"][1]
    assert 'name="password"' in pages["login"][1]
    # the path benchmark's truth: each request's Passenger process and database connection
    _, root, tag, _ = redmine
    truth = [json.loads(x) for x in next(root.glob(
        f"*{tag}*/redmine/instance/log/{TRUTH_LOG}")).read_text().splitlines()]
    search = next(r for r in reversed(truth) if r["path"] == "/search")
    assert search["query"].startswith("q=")
    assert search["status"] == 200
    assert len(search["db_ports"]) == 1
    assert 0 < search["t_out"] - search["t_in"] < 60
    assert len({r["pid"] for r in truth}) == PROCESSES  # the warm-up reached every process


def test_status_names_passenger_s_apache_and_postgres(redmine):
    _, root, tag, _ = redmine
    s = status(tag, root)
    assert s.up is True
    assert s.info is not None
    assert s.info.app == "redmine"
    assert {"web/apache2", "db/postgres", "client/sshd", "web/sshd", "db/sshd"} \
        == set(s.services or {})
    assert s.info.web_log.format == "apache"
    log = read_log(s.info.web_log.path, "apache", s.info.web_log.log_format,
                   max_bad_fraction=0.0)
    assert len(log) >= 5
    assert all(t.expected["web->db"] is None for t in s.info.transactions)


def test_paths_reach_postgres_through_passenger_s_workers(redmine, tmp_path):
    """Apache hands each request to a Ruby process over a Unix socket the trace cannot see:
    the Ruby processes are folded into Apache's node, and each page's paths cross web<->db
    as often as a packet capture counts."""
    _, root, tag, _ = redmine
    experiment = tmp_path / "rm-paths.yaml"
    experiment.write_text(EXPERIMENT.format(name="rmpaths", tag=tag, mix=MIX,
                                            output=tmp_path / "runs"))
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    done = subprocess.run([LINKGRAD, "paths", str(experiment), "--duration", "15", "--json"],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    (fold,) = result["folded"]
    assert (fold["worker"], fold["into"]) == ("web/ruby", "web/apache2+ruby")
    assert fold["covered"] >= 0.95
    for name, truth in CROSSINGS.items():
        paths = result["transactions"][name]
        found = sum(p["count"] for p in paths)
        assert found >= 5, (name, paths)
        near = sum(p["count"] for p in paths
                   if abs((p["crossings"].get("web->db") or 0) - truth) <= 1)
        assert near >= 0.6 * found, (name, [(p["count"], p["crossings"]) for p in paths])
        top = paths[0]
        assert top["crossings"]["db->web"] == pytest.approx(truth, abs=1), (name, top)
    labels = {h["label"] for h in result["transactions"]["issue"][0]["hops"]}
    assert labels == {"CLIENT->web/apache2+ruby:80", "web/apache2+ruby:80->CLIENT",
                      "web/apache2+ruby->db/postgres:5432",
                      "db/postgres:5432->web/apache2+ruby"}, labels
    wait_until_gone(tag)


def test_down_stops_passenger_and_postgres_and_leaves_nothing(redmine):
    info, root, tag, before = redmine
    namespaces = [h.namespace for h in info.hosts]
    pids, comms = namespace_commands(namespaces)
    assert {"apache2", "PassengerAgent", "ruby", "postgres"} <= set(comms), comms
    down(tag, root=root)
    assert [p for p in pids if alive(p)] == []
    assert f"lgtb-{tag}-" not in _run("ip", "netns", "list")
    mounts = Path("/proc/mounts").read_text()
    assert f"lgtb-{tag}-" not in mounts
    assert str(INSTANCE_PATH) not in mounts  # the bind lived in Apache's own mount namespace
    assert not (root / f"linkgrad-testbed-{tag}").exists()
    assert _instance_files() == before  # the machine's own instance: nothing written
    assert down(tag, root=root).removed is False  # safe twice


def _run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout

"""passive-first on the fake application: the choice after the passive phase is kept in
strategy.json with each link's reasons, only the chosen links are planned and injected, and
the explanation labels the rest passive-only."""

from __future__ import annotations

import json

from coordinator.config.run_dir import RunDir
from coordinator.explain.run import explain_run
from coordinator.live.run import run_experiment
from tests.fakes.remote import FakeApplication, FakeClock, FakeHosts, fake_experiment

CROSSINGS = {"/two": 2, "/none": 0}


def test_without_paths_every_link_is_injected_and_each_says_why(tmp_path):
    clock = FakeClock()
    hosts = FakeHosts(FakeApplication(clock, CROSSINGS))
    exp = fake_experiment(tmp_path, {"strategy": "passive-first",
                                     "questions": [{"move": {"db": "remote"}}]},
                          paths={"enabled": False})
    run_dir = tmp_path / "run"
    journal = run_experiment(exp, run_dir, lambda _: None, connect=hosts.connect, clock=clock)
    assert journal.status == "completed"
    strategy = json.loads((run_dir / "strategy.json").read_text())
    assert strategy["strategy"] == "passive-first"
    links = {c["link"]: c for c in strategy["links"]}
    assert set(links) == {"tcp app:0 -> db:5432", "tcp db:5432 -> app:0"}
    for c in links.values():
        assert c["inject"]
        assert "question 1 moves db" in c["reasons"]
        assert "no paths: an end was not traced" in c["reasons"]
    assert journal.links_planned == 2
    assert {m.link.label for m in RunDir(run_dir).measurements()} == set(links)
    explained = explain_run(run_dir)
    assert {r.verdict for r in explained.rows} == {"active-only"}  # no paths to compare

"""passive-first on the fake application: the choice after the passive phase is kept in
strategy.json with each link's reasons, only the chosen links are planned and injected, and
the explanation labels the rest passive-only."""

from __future__ import annotations

import json

from coordinator.config.run_dir import RunDir
from coordinator.explain.run import explain_run
from coordinator.live import training
from coordinator.live.run import run_experiment
from linkgrad.explain.passive import PassiveGradient
from linkgrad.explain.strategy import LinkFacts
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


def test_a_link_with_clear_paths_stays_passive_and_only_the_other_is_planned(tmp_path,
                                                                             monkeypatch):
    """The facts the passive phase gave (here set: the fake application is not traced) make
    db->app clear and app->db unknown: the real choice injects app->db only, and only it is
    planned, measured and kept."""
    clear = PassiveGradient(estimate=2.0, ci95=(1.98, 2.02), se=0.01, requests=400,
                            unmatched=0)

    def facts(links, *_):
        return [LinkFacts(label=g.label, pair=f"{g.src_host}->{g.dst_host}",
                          hosts=(g.src_host, g.dst_host), traced=g.src_host == "db",
                          crossings={"two": clear, "none": None},
                          patterns={"two": [(1.0, 2.0)]}) for g in links]

    monkeypatch.setattr(training, "link_facts", facts)
    clock = FakeClock()
    hosts = FakeHosts(FakeApplication(clock, CROSSINGS))
    exp = fake_experiment(tmp_path, {"strategy": "passive-first"}, paths={"enabled": False})
    run_dir = tmp_path / "run"
    journal = run_experiment(exp, run_dir, lambda _: None, connect=hosts.connect, clock=clock)
    assert journal.status == "completed"
    links = {c["link"]: c for c in json.loads((run_dir / "strategy.json").read_text())["links"]}
    assert links["tcp app:0 -> db:5432"]["inject"]
    assert links["tcp app:0 -> db:5432"]["reasons"] == ["no paths: an end was not traced"]
    assert not links["tcp db:5432 -> app:0"]["inject"]
    assert links["tcp db:5432 -> app:0"]["reasons"] == ["its paths are clear and calibrated"]
    assert journal.links_planned == 1
    assert [m.link.label for m in RunDir(run_dir).measurements()] == ["tcp app:0 -> db:5432"]
    rows = explain_run(run_dir).rows  # the fake has no paths.json: no passive row to show
    assert {(r.link, r.verdict) for r in rows} == {("tcp app:0 -> db:5432", "active-only")}

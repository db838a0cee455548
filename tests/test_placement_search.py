"""Placement search: exhaustive, local search and its bound, and `linkgrad place`."""

import json

import numpy as np
import pytest

from coordinator.placement_search import (
    PlacementProblem,
    exhaustive,
    local_search,
    lower_bound,
)


def random_problem(hosts: int, sites: int, seed: int, density: float = 0.3) -> PlacementProblem:
    rng = np.random.default_rng(seed)
    points = rng.uniform(0, 50, (sites, 2))  # sites on a map: latency ~ distance
    lat = np.linalg.norm(points[:, None] - points[None], axis=2) + 0.05
    weight = np.where(rng.random((hosts, hosts)) < density, rng.uniform(0, 3, (hosts, hosts)), 0)
    np.fill_diagonal(weight, 0)
    allowed = rng.random((hosts, sites)) < 0.5
    current = rng.integers(0, sites, hosts)
    allowed[np.arange(hosts), current] = True
    return PlacementProblem(tuple(f"h{i}" for i in range(hosts)),
                            tuple(f"s{j}" for j in range(sites)), lat, weight, allowed, current)


def test_exhaustive_finds_the_placement_that_brings_talkers_together():
    lat = np.array([[0.1, 20.0], [20.0, 0.1]])
    weight = np.array([[0, 2.0, 0], [2.0, 0, 0.5], [0, 0.5, 0]])  # a-b talk most, b-c less
    allowed = np.array([[True, False], [True, True], [False, True]])  # a at 0, c at 1 fixed
    problem = PlacementProblem(("a", "b", "c"), ("s0", "s1"), lat, weight, allowed,
                               np.array([0, 1, 1]))
    result = exhaustive(problem)
    assert result.ranked[0][1] == (0, 0, 1)  # b joins a
    assert result.ranked[0][0] == pytest.approx(2 * 2 * 0.1 + 2 * 0.5 * 20)
    assert result.evaluated == 2
    assert lower_bound(problem) <= result.ranked[0][0]


@pytest.mark.parametrize("seed", range(5))
def test_local_search_meets_the_optimum_or_says_how_far_it_may_be(seed):
    problem = random_problem(7, 4, seed)
    best = exhaustive(problem, top=1).ranked[0][0]
    found = local_search(problem, starts=8, seed=seed)
    assert found.ranked[0][0] >= best - 1e-9  # never better than the optimum
    assert found.lower_bound <= best + 1e-9  # the bound holds
    assert found.ranked[0][0] - found.lower_bound == pytest.approx(found.gap_ms)
    assert found.ranked[0][0] <= best * 1.05  # and on these, close to it


def test_local_search_scales_to_a_thousand_components():
    problem = random_problem(1000, 50, seed=1, density=0.005)
    found = local_search(problem, starts=2)
    assert found.ranked[0][0] <= problem.cost(problem.current)
    assert found.lower_bound <= found.ranked[0][0]


def test_place_ranks_moving_the_database_next_to_its_app_server(tmp_path, capsys):
    from coordinator.cli import main
    from tests.test_prediction import _run_dir

    d = _run_dir(tmp_path)
    (d / "sites.yaml").write_text("sites: {web: edge, app1: edge, db: core}\n"
                                  "latency_ms: {edge<->edge: 0.1, core<->core: 0.1,"
                                  " edge<->core: 20.1}\n")
    (d / "candidates.yaml").write_text("candidates: {db: [core, edge]}\n")
    code = main(["place", "--app", str(d / "gradients.json"), "--latencies",
                 str(d / "sites.yaml"), "--candidates", str(d / "candidates.yaml"), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "exhaustive"
    best, stay = out["ranked"]
    assert best["move"] == {"db": "edge"}
    # ViewItem is 3/4 of the requests: 2 crossings each way, 20 ms less each
    assert best["weighted_change_ms"] == pytest.approx(-0.75 * 4 * 20 - 0.25 * 0.02 * 20,
                                                       abs=0.01)
    assert stay["move"] == {}
    (d / "candidates.yaml").write_text("candidates: {app1: [core]}\n")  # web<->app1 unmeasured
    assert main(["place", "--app", str(d / "gradients.json"), "--latencies",
                 str(d / "sites.yaml"), "--candidates", str(d / "candidates.yaml")]) == 2
    assert "no measured gradient: app1->web, web->app1" in capsys.readouterr().err


def test_routing_sends_each_transaction_to_its_better_copy():
    from coordinator.routing import advise

    advice = advise({"db_heavy": 0.6, "web_heavy": 0.4},
                    ({"db_heavy": 100.0, "web_heavy": 20.0},  # copy near the web server
                     {"db_heavy": 30.0, "web_heavy": 60.0}))  # copy near the database
    assert [r.copy for r in advice.routes] == [1, 0]
    assert advice.per_transaction_ms == pytest.approx(0.6 * 30 + 0.4 * 20)
    ratio, fixed = advice.best_fixed
    assert (ratio, fixed) == (0.0, pytest.approx(0.6 * 30 + 0.4 * 60))
    for r in np.linspace(0, 1, 11):  # no fixed ratio does as well
        assert advice.fixed_ratio_ms(r) >= advice.per_transaction_ms


def test_route_command_on_a_run(tmp_path, capsys):
    from coordinator.cli import main
    from tests.test_prediction import _run_dir

    d = _run_dir(tmp_path)
    (d / "sites.yaml").write_text("sites: {web: edge, app1: edge, db: core}\n"
                                  "latency_ms: {edge<->edge: 0.1, core<->core: 0.1,"
                                  " edge<->core: 20.1}\n")
    code = main(["route", "--gradients", str(d / "gradients.json"), "--latencies",
                 str(d / "sites.yaml"), "--component", "db", "--copies", "edge", "core",
                 "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["transactions"]["ViewItem"]["to"] == "edge"  # next to app1
    assert out["gain_ms"] >= 0
    # from a deployment where everything is at the edge: app1's copy at the core only helps
    # once the database has moved there (the base placement)
    (d / "edge.yaml").write_text("sites: {web: edge, app1: edge, db: edge}\n"
                                 "latency_ms: {edge<->edge: 0.1, core<->core: 0.1,"
                                 " edge<->core: 20.1}\n")
    (d / "db-core.yaml").write_text("move: {db: core}\n")
    code = main(["route", "--gradients", str(d / "gradients.json"), "--latencies",
                 str(d / "edge.yaml"), "--placement", str(d / "db-core.yaml"),
                 "--component", "db", "--copies", "edge", "core", "--json"])
    assert code == 0
    moved = json.loads(capsys.readouterr().out)["transactions"]["ViewItem"]
    assert moved["predicted_ms"]["edge"] == pytest.approx(8.0)  # the db copy beside app1: as now
    assert moved["predicted_ms"]["core"] == pytest.approx(8.0 + 4 * 20, abs=0.01)

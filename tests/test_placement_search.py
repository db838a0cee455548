"""Placement search: exhaustive, local search and its bound, and `linkgrad place`."""

import json
import math
import subprocess

import numpy as np
import pytest

from linkgrad.placement import (
    PlacementProblem,
    exhaustive,
    local_search,
    lower_bound,
)
from tests.marks import needs_tool


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


def _pair_by_pair_bound(problem: PlacementProblem) -> float:
    total = 0.0
    for a, b in zip(*np.nonzero(problem.weight), strict=True):
        sa, sb = np.flatnonzero(problem.allowed[a]), np.flatnonzero(problem.allowed[b])
        total += float(np.min(sum(w[a, b] * m[np.ix_(sa, sb)] for w, m in problem.terms())))
    return total


def curved_problem(hosts: int, sites: int, seed: int) -> PlacementProblem:
    """Random gradients with curvatures of either sign (saturating and accelerating links)."""
    flat = random_problem(hosts, sites, seed)
    rng = np.random.default_rng(seed + 100)
    curvature = np.where(flat.weight != 0, rng.uniform(-0.02, 0.05, flat.weight.shape), 0)
    curvature[0, 0] = 0.01  # a host with itself: its same-site latency counts too
    return PlacementProblem.from_curves(flat.hosts, flat.sites, flat.latency_ms, flat.weight,
                                        curvature, flat.allowed, flat.current)


@pytest.mark.parametrize("seed", range(4))
def test_curvature_enters_the_search_and_its_bound(seed):
    problem = curved_problem(7, 4, seed)
    assert problem.curvature is not None
    best_cost, best = exhaustive(problem, top=1).ranked[0]
    # cost differences are the predicted change Σ g·Δ + c·Δ² around the current latencies
    lat, now, new = problem.latency_ms, problem.current, np.array(best)
    delta = lat[np.ix_(new, new)] - lat[np.ix_(now, now)]
    gradient = problem.weight + 2 * problem.curvature * lat[np.ix_(now, now)]
    change = np.sum(gradient * delta + problem.curvature * delta**2)
    assert best_cost - problem.cost(now) == pytest.approx(change)
    found = local_search(problem, starts=8, seed=seed)
    assert best_cost - 1e-9 <= found.ranked[0][0] <= best_cost + 0.05 * abs(best_cost)
    assert _pair_by_pair_bound(problem) - 1e-9 <= found.lower_bound <= best_cost + 1e-9


def test_the_bound_is_tighter_than_pair_by_pair_where_partners_pull_apart():
    lat = np.array([[0.0, 10.0], [10.0, 0.0]])
    weight = np.zeros((3, 3))
    weight[0, 1] = weight[0, 2] = 1.0  # a talks to b (fixed at 0) and c (fixed at 1)
    allowed = np.array([[True, True], [True, False], [False, True]])
    problem = PlacementProblem(("a", "b", "c"), ("s0", "s1"), lat, weight, allowed,
                               np.array([0, 0, 1]))
    assert _pair_by_pair_bound(problem) == 0  # each pair alone could be together
    assert lower_bound(problem) == pytest.approx(10.0)  # a cannot be with both: exact here
    assert exhaustive(problem).ranked[0][0] == pytest.approx(10.0)


def test_local_search_scales_to_a_thousand_components():
    problem = random_problem(1000, 50, seed=1, density=0.005)
    found = local_search(problem, starts=2)
    assert found.ranked[0][0] <= problem.cost(problem.current)
    assert found.lower_bound <= found.ranked[0][0]


def test_place_ranks_moving_the_database_next_to_its_app_server(tmp_path, capsys):
    from coordinator.cli.main import main
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


def test_place_uses_the_curvature_of_links_measured_at_two_delays(tmp_path, capsys):
    from coordinator.cli.main import main
    from tests.test_prediction import _run_dir

    d = _run_dir(tmp_path)
    runs = json.loads((d / "gradients.json").read_text())
    at_5 = json.loads(json.dumps(runs["links"]))
    for link in at_5:  # ViewItem: effect 10 ms at 5 ms, 25 ms at 10 ms: 1.5·d + 0.1·d²
        link["record"]["magnitude_ms"] = 5.0
        link["transactions"]["ViewItem"]["gradient"] = 2.0
    for link in runs["links"]:
        link["transactions"]["ViewItem"]["gradient"] = 2.5
    (d / "gradients.json").write_text(json.dumps({"links": runs["links"] + at_5}))
    (d / "sites.yaml").write_text("sites: {web: edge, app1: edge, db: core}\n"
                                  "latency_ms: {edge<->edge: 0.1, core<->core: 0.1,"
                                  " edge<->core: 8.1, far<->far: 0.1, edge<->far: 30,"
                                  " core<->far: 30}\n")
    (d / "candidates.yaml").write_text("candidates: {db: [core, edge, far]}\n")
    args = ["place", "--app", str(d / "gradients.json"), "--latencies", str(d / "sites.yaml"),
            "--candidates", str(d / "candidates.yaml"), "--json"]
    assert main(args) == 0
    ranked = json.loads(capsys.readouterr().out)["ranked"]
    best = ranked[0]
    assert best["move"] == {"db": "edge"}
    # ViewItem (3/4 of the requests), both directions: 1.5·(−8) + 0.1·64 each
    assert best["weighted_change_ms"] == pytest.approx(0.75 * 2 * (-12 + 6.4)
                                                       + 0.25 * 2 * 0.01 * -8, abs=0.01)
    assert best["notes"] == []  # 8 ms: inside the measured 10 ms
    far = next(r for r in ranked if r["move"] == {"db": "far"})
    assert any("app1->db changes by +21.9 ms, beyond the 10 ms" in n for n in far["notes"])


def test_routing_sends_each_transaction_to_its_better_copy():
    from linkgrad.routing import advise

    advice = advise({"db_heavy": 0.6, "web_heavy": 0.4},
                    ({"db_heavy": 100.0, "web_heavy": 20.0},  # copy near the web server
                     {"db_heavy": 30.0, "web_heavy": 60.0}))  # copy near the database
    assert [r.copy for r in advice.routes] == [1, 0]
    assert advice.per_transaction_ms == pytest.approx(0.6 * 30 + 0.4 * 20)
    ratio, fixed = advice.best_fixed
    assert (ratio, fixed) == (0.0, pytest.approx(0.6 * 30 + 0.4 * 60))
    for r in np.linspace(0, 1, 11):  # no fixed ratio does as well
        assert advice.fixed_ratio_ms(r) >= advice.per_transaction_ms


@needs_tool("nginx")
def test_routing_advice_and_fixed_ratios_become_nginx_config_nginx_accepts(tmp_path):
    from linkgrad.routing import advise, nginx_fixed_ratio, nginx_map

    advice = advise({"db_heavy": 0.6, "web_heavy": 0.4},
                    ({"db_heavy": 100.0, "web_heavy": 20.0}, {"db_heavy": 30.0, "web_heavy": 60.0}))
    patterns = {"db_heavy": r"^/rubis/(Store|Put)Bid\?id=\d+", "web_heavy": '^/static/"x"'}
    routes = nginx_map(advice, patterns, ("edge", "core"))
    assert "    default core;" in routes  # the best fixed choice: all to the second copy
    assert '"~^/static/\\"x\\"" edge;' in routes
    assert routes.index("db_heavy") < routes.index("web_heavy")  # in the patterns' order
    assert "50% edge; * core;" in nginx_fixed_ratio(0.5, ("edge", "core"))
    assert "default core;" in nginx_fixed_ratio(0.0, ("edge", "core"))
    for i, snippet in enumerate([routes, nginx_fixed_ratio(0.25, ("edge", "core"))]):
        (tmp_path / f"routes{i}.conf").write_text(snippet)
        (tmp_path / f"nginx{i}.conf").write_text(f"""
pid {tmp_path}/nginx.pid;
error_log {tmp_path}/error.log;
events {{}}
http {{
    access_log off;
    upstream edge {{ server 127.0.0.1:9; }}
    upstream core {{ server 127.0.0.1:10; }}
    include {tmp_path}/routes{i}.conf;
    server {{ listen 127.0.0.1:8; location / {{ proxy_pass http://$linkgrad_upstream; }} }}
}}
""")
        check = subprocess.run(["nginx", "-t", "-q", "-c", str(tmp_path / f"nginx{i}.conf"),
                                "-p", str(tmp_path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    with pytest.raises(ValueError, match="no URL pattern"):
        nginx_map(advice, {}, ("edge", "core"))


def test_route_command_on_a_run(tmp_path, capsys):
    from coordinator.cli.main import main
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
    assert out["current"] == "core"
    view = out["transactions"]["ViewItem"]
    assert not view["within_noise"]
    # two pairs, each 2.0 ± 0.02 per ms (0.2 ms over the 10 ms injected) times 20 ms: the
    # current mean cancels in the difference, the latencies are exact here
    half = 1.959964 * math.sqrt(2 * (20 * 0.02) ** 2)
    assert view["difference_ci95"] == pytest.approx([80 - half, 80 + half], abs=2e-3)
    # async: 0.01 ± 0.01 per ms on app1<->db, 0.4 ms less at the edge, ± 0.55: it stays
    # where the database is now, and the routing is that much worse than the best fixed
    # ratio (all to the edge) for a difference the run cannot tell from none
    quiet = out["transactions"]["async"]
    assert quiet["within_noise"]
    assert quiet["to"] == "core"
    assert quiet["difference_ci95"][0] < 0 < quiet["difference_ci95"][1]
    assert out["gain_ms"] == pytest.approx(-0.25 * 0.4, abs=1e-3)
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
    nginx = ["route", "--gradients", str(d / "gradients.json"), "--latencies",
             str(d / "sites.yaml"), "--component", "db", "--copies", "edge", "core",
             "--nginx", "db_edge", "db_core"]
    assert main(nginx) == 2  # this run's experiment names no URL patterns
    assert "no URL pattern for transaction 'ViewItem'" in capsys.readouterr().err
    experiment = json.loads((d / "experiment.json").read_text())
    experiment["transactions"] = {"ViewItem": "^/rubis/ViewItem", "async": "^/pattern/async"}
    (d / "experiment.json").write_text(json.dumps(experiment))
    assert main(nginx) == 0
    routes = capsys.readouterr().out
    assert '"~^/rubis/ViewItem" db_edge;' in routes
    assert "default db_edge;" in routes

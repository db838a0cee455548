"""`predict`, `place` and `route` with passive gradients from explain.json (labelled, with
their wider intervals), latencies from the causal paths when no file is given, and the
choices of `route` and `place` said to be within noise where their difference's interval
holds 0."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from coordinator.cli.main import main
from coordinator.config.path_latencies import link_delays, path_latencies
from coordinator.config.run_inputs import load_run
from linkgrad.paths.result import HopResult, PathsResult, PatternResult
from linkgrad.paths.wap5 import LinkingSettings
from linkgrad.placement import Compared, PlacementProblem, difference, placement_latency
from linkgrad.prediction import Z95, Curve, Estimate
from linkgrad.routing import advise
from tests.test_prediction import _run_dir


def _row(transaction: str, pair: str, verdict: str, passive: float | None,
         ci: tuple[float, float] | None, gradient: float | None = None) -> dict:
    """An explain.json row with the fields `linkgrad explain` writes (most ignored here)."""
    return {"transaction": transaction, "link": f"tcp {pair}", "pair": pair,
            "gradient": gradient, "ci95": None, "passive_gradient": passive,
            "passive_ci95": list(ci) if ci else None, "passive_requests": 300, "snap": None,
            "hosts": None, "verdict": verdict, "cause": None, "causes": [], "notes": []}


def _explained(d: Path) -> Path:
    """The run of `_run_dir` (app1<->db measured, web<->app1 not) with an explain.json:
    web<->app1 passive-only, and a passive gradient on app1->db that the measured one beats."""
    rows = [_row("ViewItem", "web->app1", "passive-only", 1.0, (0.9, 1.2)),
            _row("ViewItem", "app1->web", "passive-only", 1.0, (0.9, 1.2)),
            _row("async", "web->app1", "passive-only", 0.5, (0.1, 0.9)),
            _row("ViewItem", "app1->db", "passive-only", 7.0, (6.0, 8.0)),
            _row("async", "app1->web", "agree", 3.0, (2.0, 4.0), gradient=3.0)]
    (d / "explain.json").write_text(json.dumps({"summary": {"experiment": "x"},
                                                "rows": rows}))
    return d


def test_passive_only_rows_stand_in_where_nothing_was_measured(tmp_path):
    run = load_run(_explained(_run_dir(tmp_path)) / "gradients.json")
    view = run.gradients["ViewItem"]
    assert view[("web", "app1")].gradient == Estimate(1.0, pytest.approx(0.3 / 3.919928))
    assert view[("app1", "db")].gradient.mean == pytest.approx(2.0)  # measured wins over 7.0
    assert run.gradients["async"][("web", "app1")].gradient.se == pytest.approx(0.8 / 3.919928)
    assert ("app1", "web") not in run.gradients["async"]  # "agree": not passive-only
    assert run.passive == {"ViewItem": {("web", "app1"), ("app1", "web")},
                           "async": {("web", "app1")}}


def test_a_run_without_explain_json_reads_as_before(tmp_path):
    run = load_run(_run_dir(tmp_path) / "gradients.json")
    assert run.passive == {}
    assert set(run.gradients["ViewItem"]) == {("app1", "db"), ("db", "app1")}


@pytest.mark.parametrize(("rows", "field", "said"), [
    ([{**_row("V", "web->app1", "passive-only", 1.0, None)}], "rows.0",
     "a passive_gradient needs its passive_ci95"),
    ([_row("V", "web->app1", "passive-only", 1.0, (2.0, 1.0))], "rows.0", "is not [low, high]"),
    ([_row("V", "web app1", "passive-only", 1.0, (0.5, 1.5))], "rows.0.pair",
     "is not a host pair 'src->dst'"),
    ([{**_row("V", "web->app1", "passive-only", 1.0, (0.5, 1.5)), "passive_gradient": "1"}],
     "rows.0.passive_gradient", "valid number"),
    ("many", "rows", "valid list"),
])
def test_a_broken_explain_json_is_named_by_file_and_field(tmp_path, capsys, rows, field, said):
    d = _run_dir(tmp_path)
    (d / "explain.json").write_text(json.dumps({"rows": rows}))
    code = main(["predict", "--gradients", str(d / "gradients.json"), "--latencies",
                 str(d / "now.yaml"), "--placement", str(d / "app-east.yaml")])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    assert f"{d / 'explain.json'}: field {field!r}" in err
    assert said in err


def test_a_host_explain_json_names_that_the_run_has_not_is_an_error_there(tmp_path, capsys):
    d = _run_dir(tmp_path)
    (d / "explain.json").write_text(json.dumps(
        {"rows": [_row("V", "web->cache", "passive-only", 1.0, (0.5, 1.5))]}))
    assert main(["predict", "--gradients", str(d / "gradients.json"), "--latencies",
                 str(d / "now.yaml"), "--placement", str(d / "app-east.yaml")]) == 2
    assert "field 'rows.0.pair' host 'cache' is not one of" in capsys.readouterr().err


def test_predict_uses_and_labels_passive_gradients(tmp_path, capsys):
    d = _explained(_run_dir(tmp_path))
    argv = ["predict", "--gradients", str(d / "gradients.json"), "--latencies",
            str(d / "now.yaml"), "--placement", str(d / "app-east.yaml")]
    assert main([*argv, "--json"]) == 0
    placement = json.loads(capsys.readouterr().out)["placements"][0]
    assert placement["passive_pairs"] == ["app1<->web"]
    view = placement["transactions"]["ViewItem"]
    # app1 to the east: app1<->db measured (2.0 each way), web<->app1 passive (1.0 each way)
    assert view["predicted_ms"] == pytest.approx(8.0 + 2 * 2.0 * 20 + 2 * 1.0 * 20)
    passive = [t for t in view["terms"] if t.get("passive")]
    assert sorted(t["link"] for t in passive) == ["app1->web", "web->app1"]
    assert passive[0]["gradient_se"] == pytest.approx(0.3 / 3.919928, abs=1e-4)
    assert "uses passive gradients for app1<->web" in " ".join(view["notes"])
    only_one = placement["transactions"]["async"]
    assert "uses passive gradients for web->app1" in " ".join(only_one["notes"])
    assert main(argv) == 0  # without the explanation the same placement is refused
    assert "passive gradients (explain.json, not measured) for app1<->web" in \
        capsys.readouterr().out
    (d / "explain.json").unlink()
    assert main(argv) == 2
    assert "web->app1 carry traffic" in capsys.readouterr().err


# ------------------------------------------------------------------ latencies from the paths


def _pattern(count: int, hops: list[tuple[str, float | None]]) -> PatternResult:
    return PatternResult(key=f"k{count}", count=count, score=1.0, max_probability=1.0,
                         response_s=0.01, crossings={},
                         hops=tuple(HopResult(label=f"h{i}", parent=i - 1, link=link,
                                              node_delay_s=0.0, network_delay_s=delay,
                                              critical=1.0)
                                    for i, (link, delay) in enumerate(hops)))


def _paths(patterns: list[PatternResult]) -> PathsResult:
    return PathsResult(linker="wap5", settings=LinkingSettings(), messages=10, nil_send=0,
                       nil_receive=0, roots=4, hosts={}, patterns=tuple(patterns),
                       patterns_left_out=0)


def test_link_delays_are_count_weighted_with_the_spread_as_their_error():
    paths = _paths([_pattern(3, [("web->app1", 0.001), ("app1->web", 0.003)]),
                    _pattern(1, [("web->app1", 0.002), ("app1->app1", 0.5),
                                 ("app1->db", None)])])
    delays = link_delays([paths])
    there = delays[("web", "app1")]
    assert there.mean == pytest.approx(0.75 * 1.0 + 0.25 * 2.0)  # ms
    # weights 3/4, 1/4; k = 2: se² = 2·(0.75²·0.25² + 0.25²·0.75²)
    assert there.se == pytest.approx(math.sqrt(2 * 2 * 0.75**2 * 0.25**2))
    assert delays[("app1", "web")] == Estimate(pytest.approx(3.0), pytest.approx(3.0))
    assert ("app1", "app1") not in delays  # a host with itself, and no delay: left out
    assert ("app1", "db") not in delays
    found = path_latencies(delays, ["web", "app1", "db"])
    both = found.latencies.latency_ms["app1<->web"]
    assert both.mean == pytest.approx((1.25 + 3.0) / 2)  # clock offsets cancel in the mean
    assert both.se == pytest.approx(math.hypot(there.se, 3.0) / 2)
    assert found.both_ways == ["app1<->web"]
    assert found.one_way == []
    itself = found.latencies.latency_ms["db<->db"]
    assert (itself.mean, itself.se) == (0.0, pytest.approx(1.25 / 2))


def _with_paths(d: Path) -> Path:
    """paths.json: app1->db and back 0.19 and 0.21 ms in two patterns of 10 (0.2 ± 0.01
    each way), web<->app1 0.2 ms."""
    paths = _paths([_pattern(10, [("web->app1", 0.0002), ("app1->db", 0.00019),
                                  ("db->app1", 0.00021), ("app1->web", 0.0002)]),
                    _pattern(10, [("web->app1", 0.0002), ("app1->db", 0.00021),
                                  ("db->app1", 0.00019), ("app1->web", 0.0002)])])
    (d / "paths.json").write_text(json.dumps(paths.as_json(), default=list))
    return d


def test_predict_without_latencies_takes_them_from_the_paths_and_says_so(tmp_path, capsys):
    d = _with_paths(_run_dir(tmp_path))
    (d / "db-app1.yaml").write_text("move: {db: app1}\n")
    argv = ["predict", "--gradients", str(d / "gradients.json"), "--placement",
            str(d / "db-app1.yaml")]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "app1<->db" in out["latencies_note"]
    assert str(d / "paths.json") in out["latencies_note"]
    placement = out["placements"][0]
    # db beside app1: its 0.2 ms (both ways' mean) becomes a host with itself, 0 ms
    assert placement["latency_changes_ms"]["app1->db"]["mean"] == pytest.approx(-0.2)
    assert placement["transactions"]["ViewItem"]["predicted_ms"] == pytest.approx(
        8.0 - 2 * 2.0 * 0.2)
    assert main(argv) == 0
    assert "latencies from the causal paths' network delays" in capsys.readouterr().err


def test_without_latencies_or_paths_the_error_says_what_to_give(tmp_path, capsys):
    d = _run_dir(tmp_path)
    for argv in (["predict", "--gradients", str(d / "gradients.json"), "--placement",
                  str(d / "db-east.yaml")],
                 ["route", "--gradients", str(d / "gradients.json"), "--component", "db",
                  "--copies", "db", "app1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{d / 'paths.json'}: field '--latencies' no paths.json" in err
        assert "give --latencies FILE" in err
        assert "linkgrad latency" in err


# ------------------------------------------------------------------------- within noise


def test_route_keeps_the_current_copy_when_the_difference_is_within_noise():
    advice = advise({"close": 0.5, "clear": 0.5},
                    ({"close": 10.00, "clear": 30.0}, {"close": 9.98, "clear": 20.0}),
                    ({"close": 1.0, "clear": 1.0}, {"close": 1.0, "clear": 1.0}),
                    {"close": 0.016, "clear": 0.5}, current=0)
    close, clear = advice.routes[1], advice.routes[0]
    assert close.transaction == "close"
    assert close.better == 1
    assert close.within_noise  # 0.02 ± 1.96·0.016 holds 0
    assert close.difference_ci95 == pytest.approx((0.02 - Z95 * 0.016, 0.02 + Z95 * 0.016))
    assert close.copy == 0  # stays
    assert not clear.within_noise
    assert clear.copy == 1
    assert advice.per_transaction_ms == pytest.approx(0.5 * 10.0 + 0.5 * 20.0)
    moved = advise({"close": 1.0}, ({"close": 10.0}, {"close": 9.98}), None, {"close": 0.016})
    assert moved.routes[0].copy == 1  # nowhere now: the lower, said to be within noise
    assert moved.routes[0].within_noise


def test_route_on_a_run_says_within_noise_and_stays(tmp_path, capsys, monkeypatch):
    d = _with_paths(_run_dir(tmp_path))
    argv = ["route", "--gradients", str(d / "gradients.json"), "--component", "db",
            "--copies", "db", "app1"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["current"] == "db"
    view, quiet = out["transactions"]["ViewItem"], out["transactions"]["async"]
    # ViewItem: 2.0 ± 0.02 per ms each way, 0.2 ± 0.007 ms (both ways' mean) less beside
    # app1, where app1 with itself is 0 ± 0.1 (half the least latency): each latency once,
    # its coefficient summed over both directions (4)
    dd_var = 0.1**2 + (math.hypot(0.01, 0.01) / 2) ** 2
    se = math.sqrt(2 * 0.2**2 * 0.02**2 + (4 * 0.1) ** 2 + (4 * math.hypot(0.01, 0.01) / 2) ** 2
                   + 2 * 0.02**2 * dd_var)
    assert view["difference_ci95"] == pytest.approx([0.8 - Z95 * se, 0.8 + Z95 * se], abs=2e-3)
    assert view["to"] == "app1"
    assert not view["within_noise"]
    # async: 0.01 ± 0.01 per ms: 0.004 ms less, within noise: stays at db
    assert quiet["within_noise"]
    assert quiet["to"] == "db"
    assert quiet["ci95"]["db"] == pytest.approx([3.0 - Z95 * 0.05, 3.0 + Z95 * 0.05], abs=1e-3)
    monkeypatch.setenv("COLUMNS", "200")  # rows unbroken
    assert main(argv) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if "async" in line)
    assert "0.0040 ± 0.0073" in row  # the difference, to the digits that matter
    assert "either (stays at db)" in row
    assert "either: the two copies' difference is within its 95% interval" in text


def test_a_latency_serving_several_pairs_counts_once_in_the_difference():
    latency = {("x", "x"): Estimate(0.0), ("x", "y"): Estimate(10.0, 1.0),
               ("y", "x"): Estimate(10.0, 1.0), ("y", "y"): Estimate(0.0)}
    g = Curve(Estimate(2.0, 0.0))
    terms = [Compared(1.0, g, ("x", "x"), ("x", "y"), ("x", "x")),
             Compared(1.0, g, ("x", "x"), ("y", "x"), ("x", "x"))]
    d = difference(terms, latency)
    assert d.mean == pytest.approx(40.0)
    assert d.se == pytest.approx(4.0)  # one "x<->y" measurement: 2·(2·1.0), not √2·2
    apart = dict(latency)
    apart[("y", "x")] = Estimate(10.0, 2.0)  # two measurements: independent
    assert difference(terms, apart).se == pytest.approx(math.hypot(2.0, 4.0))


def test_place_marks_the_placements_within_noise_of_the_best(tmp_path, capsys):
    d = _run_dir(tmp_path)
    (d / "sites.yaml").write_text("sites: {web: edge, app1: edge, db: core}\n"
                                  "latency_ms: {edge<->edge: 0.1, core<->core: 0.1,"
                                  " edge<->core: 20.1, near<->near: 0.1,"
                                  " edge<->near: {mean: 0.15, se: 0.2},"
                                  " core<->near: 20.1}\n")
    (d / "candidates.yaml").write_text("candidates: {db: [core, edge, near]}\n")
    assert main(["place", "--app", str(d / "gradients.json"), "--latencies",
                 str(d / "sites.yaml"), "--candidates", str(d / "candidates.yaml"),
                 "--json"]) == 0
    ranked = json.loads(capsys.readouterr().out)["ranked"]
    assert [r["move"] for r in ranked] == [{"db": "edge"}, {"db": "near"}, {}]
    best, near, stay = ranked
    assert not best["within_noise"]  # the reference
    assert near["within_noise"]  # 0.05 ms further, ± 0.2 ms
    assert not stay["within_noise"]
    # the best: ViewItem (3/4) 2.0 ± 0.02 each way, async (1/4) 0.01 ± 0.01, 20 ms less
    se = math.sqrt(2 * (0.75 * 20 * 0.02) ** 2 + 2 * (0.25 * 20 * 0.01) ** 2)
    change = -0.75 * 4 * 20 - 0.25 * 2 * 0.01 * 20
    assert best["weighted_change_ci95"] == pytest.approx([change - Z95 * se,
                                                          change + Z95 * se], abs=2e-3)
    view_now = math.sqrt((0.75 * 0.1) ** 2 + (0.25 * 0.05) ** 2)
    assert best["apps_mean_ci95"][d.name][1] - best["apps_mean_ms"][d.name] == \
        pytest.approx(Z95 * math.hypot(view_now, se), abs=2e-3)


def test_the_placement_difference_matches_the_problems_own_cost():
    rng = np.random.default_rng(5)
    lat = rng.uniform(0.1, 30, (3, 3))
    problem = PlacementProblem(("a", "b"), ("s0", "s1", "s2"), lat, np.zeros((2, 2)),
                               np.ones((2, 3), dtype=bool), np.array([0, 1]))
    curve = Curve(Estimate(1.5, 0.1), Estimate(0.02, 0.001))
    terms = [Compared(0.7, curve, (0, 1), (2, 2), (1, 0))]
    d = difference(terms, placement_latency(problem))
    d1, d2 = lat[2, 2] - lat[0, 1], lat[1, 0] - lat[0, 1]
    assert d.mean == pytest.approx(0.7 * ((1.5 * d1 + 0.02 * d1**2) - (1.5 * d2 + 0.02 * d2**2)))
    assert asdict(curve)  # a plain dataclass, as the placement reads it


def test_place_moves_a_host_on_passive_gradients_and_names_them(tmp_path, capsys):
    d = _explained(_run_dir(tmp_path))
    (d / "sites.yaml").write_text("sites: {web: edge, app1: core, db: core}\n"
                                  "latency_ms: {edge<->edge: 0.1, core<->core: 0.1,"
                                  " edge<->core: 20.1}\n")
    (d / "candidates.yaml").write_text("candidates: {app1: [core, edge]}\n")
    argv = ["place", "--app", str(d / "gradients.json"), "--latencies", str(d / "sites.yaml"),
            "--candidates", str(d / "candidates.yaml"), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passive_pairs"] == {d.name: ["app1<->web"]}
    stay, edge = out["ranked"]  # beside the web server: 20 ms less on web<->app1 (passive),
    assert edge["move"] == {"app1": "edge"}  # 20 ms more on app1<->db (measured): worse
    # ViewItem (3/4): 2·1.0·(−20) + 2·2.0·20; async (1/4): 0.5·(−20) + 2·0.01·20
    assert edge["weighted_change_ms"] == pytest.approx(
        0.75 * (-40 + 80) + 0.25 * (-10 + 0.4), abs=1e-3)
    assert f"{d.name}: uses passive gradients for app1<->web" in " ".join(edge["notes"])
    assert stay["notes"] == []
    (d / "explain.json").unlink()  # without it the move cannot be predicted
    assert main(argv) == 2

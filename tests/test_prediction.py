"""What-if prediction, latency changes of a placement, and the inputs taken from a run."""

import math

import numpy as np
import pytest

from coordinator.config.latencies import Latencies, Placement, latency_changes, one_way
from coordinator.config.run_inputs import RunInputs, pair_gradients, unmeasured
from coordinator.config.run_records import LinkMeasurement
from linkgrad.errors import InputError
from linkgrad.prediction import Curve, Estimate, batch_mean, predict

HOSTS = ["web", "app1", "db"]
NOW = Latencies.model_validate({
    "sites": {"web": "here", "app1": "here", "db": "here"},
    "latency_ms": {"here<->here": 0.1, "here<->east": {"mean": 10.0, "se": 0.2},
                   "east<->east": 0.1, "here->east": {"mean": 12.0, "se": 0.3}}})


def test_one_way_latencies_fill_both_directions_and_a_one_way_entry_overrides():
    table = one_way(NOW)
    assert table[("east", "here")] == Estimate(10.0, 0.2)
    assert table[("here", "east")] == Estimate(12.0, 0.3)  # "->" wins over "<->"


def test_moving_the_database_changes_only_the_pairs_it_is_in():
    changes = latency_changes(HOSTS, NOW, Placement(move={"db": "east"}))
    assert set(changes) == {("web", "db"), ("db", "web"), ("app1", "db"), ("db", "app1")}
    assert changes[("app1", "db")].mean == pytest.approx(12.0 - 0.1)
    assert changes[("db", "app1")].mean == pytest.approx(10.0 - 0.1)
    assert changes[("app1", "db")].se == pytest.approx(0.3)  # 0.1 was exact: se 0
    together = latency_changes(HOSTS, NOW, Placement(move={"app1": "east", "db": "east"}))
    assert ("app1", "db") in together  # here->here to east->east: another measurement
    assert together[("app1", "db")].mean == pytest.approx(0.0)


def test_unknown_hosts_and_missing_site_pairs_are_named(tmp_path):
    placement = tmp_path / "new.yaml"
    placement.write_text("move:\n  dbx: east\n")
    with pytest.raises(InputError, match=r"new.yaml:2: field 'move.dbx' 'dbx' is not a host"):
        latency_changes(HOSTS, NOW, Placement(move={"dbx": "east"}), placement_file=placement)
    with pytest.raises(InputError, match=r"now.yaml: field 'latency_ms' no latency for here->west"):
        latency_changes(HOSTS, NOW, Placement(move={"db": "west"}), "now.yaml")
    with pytest.raises(ValueError, match="is not 'a->b' or 'a<->b'"):
        Latencies.model_validate({"latency_ms": {"here=east": 1.0}})


def test_prediction_adds_gradient_times_change_and_every_variance():
    current = {"ViewItem": Estimate(20.0, 0.5), "async": Estimate(5.0, 0.1)}
    gradients = {"ViewItem": {("app1", "db"): Curve(Estimate(2.0, 0.05)),
                              ("db", "app1"): Curve(Estimate(2.0, 0.05))},
                 "async": {("app1", "db"): Curve(Estimate(0.0, 0.02))}}
    delta = {("app1", "db"): Estimate(10.0, 0.3), ("db", "app1"): Estimate(10.0, 0.3),
             ("web", "app1"): Estimate(0.0)}
    out = predict(current, gradients, delta)
    view = out["ViewItem"]
    assert view.predicted_ms == pytest.approx(20.0 + 2 * 10 + 2 * 10)
    per_term = 2.0**2 * 0.3**2 + 10.0**2 * 0.05**2 + 0.05**2 * 0.3**2
    assert view.se_ms == pytest.approx(math.sqrt(0.5**2 + 2 * per_term))
    lo, hi = view.ci95
    assert hi - view.predicted_ms == pytest.approx(1.959964 * view.se_ms)
    assert lo == pytest.approx(2 * view.predicted_ms - hi)
    # a gradient of 0 still carries its own uncertainty: 10 ms x 0.02
    assert out["async"].predicted_ms == pytest.approx(5.0)
    assert out["async"].se_ms == pytest.approx(math.sqrt(0.1**2 + 0.2**2 + 0.02**2 * 0.3**2))


def test_batch_means_see_autocorrelation_that_a_plain_standard_error_misses():
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 600, 6000))
    slow = np.repeat(rng.normal(0, 5, 60), 100)  # the load drifts in 10 s spells
    y = 50 + slow + rng.normal(0, 1, 6000)
    plain = y.std(ddof=1) / math.sqrt(len(y))
    batched = batch_mean(t, y)
    assert batched.mean == pytest.approx(y.mean(), abs=0.05)
    assert batched.se > 3 * plain
    white = 50 + rng.normal(0, 1, 6000)  # independent: the two agree
    assert batch_mean(t, white).se == pytest.approx(white.std(ddof=1) / math.sqrt(6000), rel=0.5)


def measurement(src: str, dst: str, label: str, magnitude_ms: float,
                transactions: dict) -> dict:
    """A `gradients.json` entry as `linkgrad run` writes it: `link` from the graph, the
    injection record at `magnitude_ms`, and `transactions` (name -> gradient, se_ms)."""
    return LinkMeasurement.model_validate({
        "link": {"proto": "tcp", "src_host": src, "src_addr": f"10.0.0.{len(src)}",
                 "src_port": 0, "dst_host": dst, "dst_addr": f"10.0.1.{len(dst)}",
                 "dst_port": 0, "messages": 100, "label": label},
        "record": {"start": 1.7e9, "period_s": 4.0, "cycles": 8, "magnitude_ms": magnitude_ms,
                   "link": label},
        "requested_ms": magnitude_ms, "packets_delayed": 500,
        "perturbation": {"throughput_per_s": 50.0, "throughput_change": -0.01,
                         "mean_response_ms": 12.0, "mean_response_change_ms": 1.0},
        "transactions": transactions}).model_dump(mode="json")


def test_links_between_the_same_hosts_add_and_unmeasured_traffic_is_found():
    links = [LinkMeasurement.model_validate(m) for m in (
        measurement("app1", "db", "tcp app1:0 -> db:5432", 10.0,
                    {"V": {"gradient": 1.5, "se_ms": 0.3}, "A": {"gradient": None}}),
        measurement("app1", "db", "tcp app1:0 -> db:6379", 20.0,
                    {"V": {"gradient": 0.5, "se_ms": 0.8}}))]
    g = pair_gradients(links)
    assert g["V"][("app1", "db")].gradient.mean == pytest.approx(2.0)
    assert g["V"][("app1", "db")].gradient.se == pytest.approx(math.hypot(0.03, 0.04))
    assert g["V"][("app1", "db")].curvature.mean == 0  # each link at one delay
    assert "A" not in g
    run = RunInputs(None, HOSTS, g, {("app1", "db"): {"tcp"}, ("web", "app1"): {"tcp"}},
                    {}, {})  # type: ignore[arg-type]
    assert unmeasured(run, {("app1", "db"), ("web", "app1"), ("web", "db")}) == [
        ("web", "app1")]  # web->db carried nothing: its gradient is 0, not unknown


def _run_dir(tmp_path):
    """A run's files as `linkgrad run` writes them: app1<->db measured, web->app1 seen."""
    links = [measurement(a, b, f"tcp {a} -> {b}", 10.0,
                         {"ViewItem": {"gradient": 2.0, "se_ms": 0.2},
                          "async": {"gradient": 0.01, "se_ms": 0.1}})
             for a, b in (("app1", "db"), ("db", "app1"))]
    graph = [{"src_host": a, "dst_host": b, "proto": "tcp"}
             for a, b in (("app1", "db"), ("db", "app1"), ("web", "app1"), ("app1", "web"))]
    files = {"gradients.json": {"links": links}, "graph.json": graph,
             "baseline.json": {"transactions": {
                 "ViewItem": {"mean_ms": 8.0, "se_ms": 0.1, "requests": 300},
                 "async": {"mean_ms": 3.0, "se_ms": 0.05, "requests": 100}}},
             "experiment.json": {"hosts": [{"name": h} for h in HOSTS]}}
    for name, data in files.items():
        (tmp_path / name).write_text(__import__("json").dumps(data))
    (tmp_path / "now.yaml").write_text(
        "sites: {web: here, app1: here, db: here}\n"
        "latency_ms: {here<->here: 0.1, here<->east: {mean: 20.1, se: 0.1}}\n")
    (tmp_path / "db-east.yaml").write_text("move: {db: east}\n")
    (tmp_path / "app-east.yaml").write_text("move: {app1: east}\n")
    return tmp_path


def test_predict_command_prints_every_placement_as_json(tmp_path, capsys):
    from coordinator.cli.main import main

    d = _run_dir(tmp_path)
    code = main(["predict", "--gradients", str(d / "gradients.json"), "--latencies",
                 str(d / "now.yaml"), "--placement", str(d / "db-east.yaml"), "--json"])
    assert code == 0
    out = __import__("json").loads(capsys.readouterr().out)
    view = out["placements"][0]["transactions"]["ViewItem"]
    assert view["predicted_ms"] == pytest.approx(8.0 + 2.0 * 20 + 2.0 * 20)
    assert view["ci95"][0] < 88.0 < view["ci95"][1]
    assert {t["link"] for t in view["terms"]} == {"app1->db", "db->app1"}
    assert out["placements"][0]["latency_changes_ms"]["web->db"]["mean"] == pytest.approx(20.0)
    # measured with 10 ms, asked about +20 ms: said, not extrapolated silently
    assert any("beyond the 10 ms its gradient was measured with" in n for n in view["notes"])
    # moving app1 changes web<->app1, which carried traffic but was never measured: refused
    code = main(["predict", "--gradients", str(d / "gradients.json"), "--latencies",
                 str(d / "now.yaml"), "--placement", str(d / "app-east.yaml")])
    assert code == 2
    assert "app1->web, web->app1 carry traffic and change latency" in capsys.readouterr().err


def test_a_gradients_file_that_is_not_one_is_named_with_its_field(tmp_path, capsys):
    from coordinator.cli.main import main

    d = _run_dir(tmp_path)
    argv = ["predict", "--gradients", str(d / "other.json"), "--latencies",
            str(d / "now.yaml"), "--placement", str(d / "db-east.yaml")]
    assert main(argv) == 2
    assert "other.json: no other.json (the link gradients)" in capsys.readouterr().err
    entries = __import__("json").loads((d / "gradients.json").read_text())["links"]
    del entries[1]["record"]["magnitude_ms"]
    (d / "other.json").write_text(__import__("json").dumps({"links": entries}))
    assert main(argv) == 2
    assert "other.json: field 'links.1.record.magnitude_ms' Field required" in (
        capsys.readouterr().err)
    (d / "other.json").write_text('{"links": [')
    assert main(argv) == 2
    assert "other.json:1: not valid JSON" in capsys.readouterr().err


def test_measured_round_trips_become_a_latencies_file_predict_reads(tmp_path):
    from coordinator.cli.latency import latencies_yaml, one_way_ms
    from coordinator.config.latencies import load_latencies

    e = one_way_ms([0.010, 0.012, 0.011, 0.011])
    assert e.mean == pytest.approx(5.5)  # ms, one way
    assert e.se == pytest.approx(np.std([10, 12, 11, 11], ddof=1) / 2 / 2)
    with pytest.raises(ValueError, match="need 2"):
        one_way_ms([0.01])
    path = tmp_path / "now.yaml"
    path.write_text(latencies_yaml({("app1", "db"): e, ("app1", "app1"): Estimate(0.02, 0.001)},
                                   "test"))
    table = one_way(load_latencies(path))
    assert table[("db", "app1")].mean == pytest.approx(5.5)
    changes = latency_changes(["app1", "db"], load_latencies(path),
                              Placement(move={"db": "app1"}))  # db onto app1's host
    assert changes[("app1", "db")].mean == pytest.approx(0.02 - 5.5)


def test_the_shipped_placement_examples_load_and_predict(tmp_path, capsys):
    from pathlib import Path

    from coordinator.cli.main import main

    d = _run_dir(tmp_path)
    examples = Path(__file__).parent.parent / "experiments" / "placement"
    code = main(["predict", "--gradients", str(d / "gradients.json"), "--latencies",
                 str(examples / "now.yaml"), "--placement", str(examples / "db-east.yaml"),
                 "--json"])
    assert code == 0
    out = __import__("json").loads(capsys.readouterr().out)["placements"][0]
    assert out["transactions"]["ViewItem"]["change_ms"] == pytest.approx(2 * 2 * 10.0, abs=0.01)


def test_a_link_measured_at_two_delays_gives_its_curvature_and_the_prediction_uses_it():
    from linkgrad.prediction import fit_curve

    # queueing: 1 ms per ms at small delays, growing: effect = d + 0.02 d^2
    points = [(m, (m + 0.02 * m * m) / m, 0.001) for m in (5.0, 20.0)]
    curve = fit_curve(points)
    assert curve.gradient.mean == pytest.approx(1.0, abs=1e-6)
    assert curve.curvature.mean == pytest.approx(0.02, abs=1e-6)
    out = predict({"t": Estimate(50.0)}, {"t": {("a", "b"): curve}},
                  {("a", "b"): Estimate(30.0)})
    assert out["t"].predicted_ms == pytest.approx(50 + 30 + 0.02 * 900)  # not 50 + 30 x 1.0
    assert fit_curve([(10.0, 1.5, 0.1)]).curvature.mean == 0  # one delay: linear
    noisy = fit_curve([(5.0, 1.0, 0.2), (20.0, 1.0, 0.05)])  # linear, with its uncertainty
    assert abs(noisy.curvature.mean) < 1e-9
    assert noisy.curvature.se > 0


def test_a_batch_mean_of_requests_all_at_one_instant_has_a_finite_error():
    t = np.full(60, 1.7e9)
    y = np.linspace(10.0, 20.0, 60)
    mean = batch_mean(t, y)
    assert mean.mean == pytest.approx(15.0)
    assert np.isfinite(mean.se)

"""The passive side's calibration (DerSimonian–Laird over residuals), the calibrated passive
gradient, both halves combined, and passive-first's choice of links."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from coordinator.explain.calibration_points import SHIPPED, points_of_rows, shipped_points
from linkgrad.explain.calibration import (
    MIN_POINTS,
    CalibrationPoint,
    calibrate,
    combine,
    fit_calibration,
)
from linkgrad.explain.passive import PassiveGradient, PatternCrossings, passive_gradient
from linkgrad.explain.strategy import LinkFacts, Reach, choose_links
from linkgrad.spectral.wave_plan import Precision, WavePlan


def _points(bias: float, spread: float, se: float, n: int, seed: int = 1
            ) -> list[CalibrationPoint]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        passive = float(rng.choice([0.0, 1.0, 2.0, 8.0, 40.0]))
        scale = max(passive, 1.0)
        truth = passive + scale * (bias + spread * rng.standard_normal())
        out.append(CalibrationPoint(passive=passive, passive_se=0.0,
                                    gradient=truth + se * scale * rng.standard_normal(),
                                    gradient_se=se * scale, source=f"p{i}"))
    return out


def test_the_fit_recovers_a_known_bias_and_a_spread_beyond_the_points_own_errors():
    cal = fit_calibration(_points(bias=0.05, spread=0.04, se=0.03, n=400), "sim")
    assert cal is not None
    assert cal.relative is not None
    assert cal.absolute is not None
    assert cal.relative.bias == pytest.approx(0.05, abs=0.01)
    assert cal.relative.spread == pytest.approx(0.04, abs=0.01)
    assert cal.absolute.bias == pytest.approx(0.05, abs=0.02)  # the same, on a scale of 1
    assert cal.points == 400


def test_points_whose_own_errors_explain_them_give_no_spread():
    cal = fit_calibration(_points(bias=0.0, spread=0.0, se=0.05, n=300), "sim")
    assert cal is not None
    assert cal.relative is not None
    assert cal.relative.spread < 0.01
    assert abs(cal.relative.bias) < 3 * cal.relative.bias_se


def _grouped(group: str, bias: float, seed: int) -> list[CalibrationPoint]:
    return [CalibrationPoint(p.passive, p.passive_se, p.gradient, p.gradient_se, p.source,
                             group) for p in _points(bias, 0.02, 0.01, 200, seed)]


def test_applications_apart_give_a_new_one_their_spread_and_an_own_one_its_own_fit():
    points = [*_grouped("a", 0.0, 1), *_grouped("b", 0.10, 2), *_grouped("c", 0.05, 3)]
    new = fit_calibration(points, "sim", own="unknown")
    assert new is not None
    assert new.relative is not None
    assert new.relative.bias == pytest.approx(0.05, abs=0.01)
    assert new.relative.spread > 0.04  # the applications' biases lie ±0.05 apart
    own = fit_calibration(points, "sim", own="b")
    assert own is not None
    assert own.relative is not None
    assert own.relative.bias == pytest.approx(0.10, abs=0.01)
    assert own.relative.spread == pytest.approx(0.02, abs=0.01)
    assert "relative from its own points" in own.described


def test_too_few_points_are_no_calibration():
    assert fit_calibration(_points(0.0, 0.0, 0.1, MIN_POINTS - 1), "sim") is None


def test_a_link_no_path_crosses_is_calibrated_in_absolute_crossings_not_shifted_by_a_ratio():
    points = [CalibrationPoint(p.passive, p.passive_se, p.gradient, p.gradient_se, p.source)
              for p in _points(bias=0.10, spread=0.02, se=0.01, n=300)
              if p.passive >= 1.0]
    points += [CalibrationPoint(0.0, 0.0, 0.003 * (-1) ** i, 0.01, f"z{i}") for i in range(60)]
    cal = fit_calibration(points, "sim")
    assert cal is not None
    zero = calibrate(PassiveGradient(0.0, (0.0, 0.0), 0.0, 500, 0), cal)
    assert abs(zero.estimate) < 0.01  # not 0.10 of a scale of 1
    assert zero.ci95[1] - zero.ci95[0] < 0.05


def test_the_calibrated_passive_gradient_is_shifted_and_wider_than_its_count():
    cal = fit_calibration(_points(bias=0.05, spread=0.04, se=0.03, n=400), "sim")
    assert cal is not None
    count = passive_gradient([PatternCrossings(1000, {"a->b": 40.0})], "a->b")
    assert count is not None
    c = calibrate(count, cal)
    assert cal.relative is not None
    assert cal.absolute is not None
    shift, sd = cal.error(40.0)
    assert shift == pytest.approx(40 * cal.relative.bias + cal.absolute.bias)
    assert sd == pytest.approx(math.sqrt(
        (cal.relative.spread ** 2 + cal.relative.bias_se ** 2) * 40 ** 2
        + cal.absolute.spread ** 2 + cal.absolute.bias_se ** 2))
    assert c.estimate == pytest.approx(40 + shift)
    assert c.ci95 == pytest.approx((count.ci95[0] + shift - 1.959964 * sd,
                                    count.ci95[1] + shift + 1.959964 * sd))
    assert c.se == pytest.approx((c.ci95[1] - c.ci95[0]) / (2 * 1.959964))  # one reading
    # continuous across the families' boundary: a count of 0.49 and one of 0.51 alike
    assert cal.error(0.49)[1] == pytest.approx(cal.error(0.51)[1], rel=0.1)


def test_rows_of_one_run_moving_together_widen_the_bias_not_the_spread():
    rng = np.random.default_rng(5)
    points = []
    for run in range(4):  # each run's rows share an offset: 40 rows are 4 pieces of evidence
        offset = 0.05 * rng.standard_normal()
        points += [CalibrationPoint(2.0, 0.0, 2.0 * (1 + offset + 0.01 * rng.standard_normal()),
                                    0.02, f"r{run} t{i}", "app", f"r{run}") for i in range(40)]
    alone = [CalibrationPoint(p.passive, p.passive_se, p.gradient, p.gradient_se, p.source,
                              p.group) for p in points]  # the runs not said
    clustered = fit_calibration(points, "sim")
    naive = fit_calibration(alone, "sim")
    assert clustered is not None
    assert naive is not None
    assert clustered.relative is not None
    assert naive.relative is not None
    assert clustered.relative.bias_se > 2 * naive.relative.bias_se


def test_the_measurements_se_is_read_with_its_t_quantile():
    from linkgrad.explain.calibration import measured_se

    assert measured_se((0.0, 2 * 2.570582), 5) == pytest.approx(1.0, rel=1e-5)
    assert measured_se((0.0, 2 * 1.959964), None) == pytest.approx(1.0, rel=1e-5)


def test_combining_weighs_each_half_by_its_precision():
    prior = calibrate(PassiveGradient(2.0, (2.0, 2.0), 0.0, 1000, 0),
                      fit_calibration(_points(0.0, 0.05, 0.01, 200), "sim"))
    wide = combine(2.6, (1.4, 3.8), prior)  # a measurement of ±1.2 hardly moves it
    assert wide.estimate == pytest.approx(prior.estimate, abs=0.02)
    assert wide.ci95[1] - wide.ci95[0] <= prior.ci95[1] - prior.ci95[0]
    sharp = combine(2.3, (2.29, 2.31), prior)  # ±0.01 all but decides it
    assert sharp.estimate == pytest.approx(2.3, abs=0.005)


def test_the_shipped_points_read_and_fit():
    shipped = shipped_points(SHIPPED)
    assert shipped.runs
    assert len(shipped.points) >= MIN_POINTS
    assert fit_calibration([CalibrationPoint(**p.model_dump()) for p in shipped.points],
                           "shipped") is not None


def test_an_explain_json_row_is_a_point_only_where_both_halves_measured():
    rows = [{"transaction": "t", "pair": "a->b", "gradient": 2.1, "ci95": [1.9, 2.3],
             "crossings": 2.0, "crossings_ci95": [1.98, 2.0], "verdict": "agree"},
            {"transaction": "t", "pair": "b->c", "gradient": None, "ci95": None,
             "crossings": 1.0, "crossings_ci95": [0.99, 1.0]}]
    (p,) = points_of_rows(rows, "run", "shop")
    assert p.gradient == 2.1
    assert p.passive == 2.0
    assert p.gradient_se == pytest.approx(0.4 / 3.919928)
    assert p.source == "run t a->b"
    assert p.group == "shop"


# -- passive first ----------------------------------------------------------------------------

def _facts(label: str, crossings: float = 1.0, **kw: object) -> LinkFacts:
    src, dst = label.split("->")
    g = passive_gradient([PatternCrossings(500, {label: crossings})], label)
    return LinkFacts(label=label, pair=label, hosts=(src, dst), traced=kw.get("traced", True),
                     crossings={"t": g}, patterns=kw.get("patterns", {"t": [(1.0, crossings)]}),
                     snap=kw.get("snap", {}))  # type: ignore[arg-type]


def test_clear_calibrated_paths_stay_passive_and_each_ambiguity_is_injected():
    links = [_facts("web->app"),
             _facts("app->cache", 0.3, patterns={"t": [(0.7, 0.0), (0.3, 1.0)]}),
             _facts("app->db", snap={"receiver_window": 2.0}),
             _facts("app->log", 0.0),
             _facts("app->peer", traced=False)]
    chosen = {c.label: c for c in choose_links(links, [], calibrated=True)}
    assert not chosen["web->app"].inject
    assert chosen["app->cache"].reasons == ("mixed paths (t)",)
    assert chosen["app->db"].reasons == ("TCP problems (receiver window 2.0 s)",)
    assert chosen["app->log"].reasons == ("no paths cross it",)
    assert chosen["app->peer"].reasons == ("no paths: an end was not traced",)


def test_a_question_moving_a_host_injects_its_links_and_no_calibration_injects_all():
    links = [_facts("web->app"), _facts("app->db")]
    by_question = choose_links(links, [frozenset({"db"})], calibrated=True)
    assert [(c.label, c.inject) for c in by_question] == [("web->app", False),
                                                          ("app->db", True)]
    assert by_question[1].reasons == ("question 1 moves db",)
    assert all(c.inject for c in choose_links(links, [], calibrated=False))


def test_rare_patterns_are_not_mixed_paths():
    rare = _facts("app->db", 2.0, patterns={"t": [(0.97, 2.0), (0.03, 1.0)]})
    assert not choose_links([rare], [], calibrated=True)[0].inject


def test_the_clients_link_stays_passive_and_one_habit_of_many_queries_is_not_mixed():
    client = LinkFacts(label="client->web", pair="client->web", hosts=("client", "web"),
                       traced=True, crossings={"t": None}, outside=True)
    wiki = _facts("web->db", 42.0, patterns={"t": [(0.84, 42.0), (0.07, 41.0)]})
    chosen = {c.label: c for c in choose_links([client, wiki], [], calibrated=True)}
    assert not chosen["client->web"].inject
    assert "outside the response time" in chosen["client->web"].reasons[0]
    assert not chosen["web->db"].inject
    moved = choose_links([client], [frozenset({"client"})], calibrated=True)
    assert moved[0].inject  # a question moving it still asks for it


def _neighbour(root, name: str, started: float, application: str = "shop", n: int = 6,
               bias: float = 0.0) -> None:
    import json

    run = root / name
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"status": "completed", "started": started,
                                              "links_done": 1}))
    rows = [{"transaction": f"t{i}", "pair": "a->b", "gradient": 2.0 * (1 + bias) + 0.01 * i,
             "ci95": [1.9, 2.1], "gradient_se": 0.05, "crossings": 2.0,
             "crossings_ci95": [1.99, 2.0]} for i in range(n)]
    (run / "explain.json").write_text(json.dumps({
        "summary": {"experiment": name, "application": application}, "rows": rows}))


def test_a_run_is_calibrated_by_the_runs_of_its_application_before_it_never_itself(tmp_path):
    from coordinator.explain.calibration_points import calibration_for

    _neighbour(tmp_path, "early", 100.0, bias=0.10)
    _neighbour(tmp_path, "later", 300.0, bias=-0.5)  # after the run: not its prior
    _neighbour(tmp_path, "other-app", 150.0, application="blog", bias=0.9)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text('{"started": 50}')
    (tmp_path / "broken" / "explain.json").write_text("{")
    _neighbour(tmp_path, "me", 200.0, bias=-0.9)  # the run itself
    cal = calibration_for(tmp_path / "me", "shop", before=200.0)
    assert cal is not None
    assert cal.relative is not None
    assert "relative from its own points" in cal.described
    assert cal.relative.bias == pytest.approx(0.10 + 0.0125, abs=0.01)  # early's rows only
    assert "from 2 of your runs" in cal.described  # early and other-app, not later nor me
    assert "1 unreadable explain.json left out" in cal.described


def test_ambiguous_paths_are_no_prior_however_well_the_wide_measurement_agrees():
    from linkgrad.explain.explained import explain

    cal = fit_calibration(_points(0.0, 0.02, 0.01, 200), "sim")
    passive = passive_gradient([PatternCrossings(800, {"a->b": 1.0}),
                                PatternCrossings(200, {"a->b": 0.0})], "a->b")
    wide = (-0.2, 1.8)  # agrees with anything
    clear = explain("t", "l", "a->b", 0.8, wide, passive, None, calibration=cal)
    mixed = explain("t", "l", "a->b", 0.8, wide, passive, None, calibration=cal, clear=False)
    assert clear.verdict == mixed.verdict == "agree"
    assert clear.combined is not None
    assert mixed.combined is None  # the measurement alone answers


def test_a_mix_is_named_parallel_branches_or_a_choice_by_the_calls_its_patterns_make():
    fanout = ("app->db", "app->peer", "db->app", "peer->app")
    parallel = _facts("app->peer", 0.9, patterns={"t": [(0.9, 1.0), (0.1, 0.0)]})
    parallel = replace(parallel, calls={"t": [fanout, fanout]})
    balanced = _facts("web->app1", 0.5, patterns={"t": [(0.5, 1.0), (0.5, 0.0)]})
    balanced = replace(balanced, calls={"t": [("app1->web", "web->app1"),
                                              ("app2->web", "web->app2")]})
    unknown = _facts("app->cache", 0.3, patterns={"t": [(0.7, 0.0), (0.3, 1.0)]})
    chosen = {c.label: c.reasons for c in choose_links([parallel, balanced, unknown], [],
                                                       calibrated=True)}
    assert chosen["app->peer"] == (
        "mixed paths (t: parallel branches take turns on the critical path)",)
    assert chosen["web->app1"] == ("mixed paths (t: a choice between paths)",)
    assert chosen["app->cache"] == ("mixed paths (t)",)  # calls not known


def _plan(noise_ms: float, cap_ms: float) -> WavePlan:
    return WavePlan(period_s=8.0, cycles=4, magnitude_s=0.001, n_bins=32,
                    noise_s={"t": noise_ms / 1e3}, effect_cap_s={"t": cap_ms / 1e3})


def test_an_ambiguity_the_measurement_cannot_tell_apart_stays_passive_and_says_so():
    mix = _facts("web->app1", 0.5, patterns={"t": [(0.5, 1.0), (0.5, 0.0)]})
    noisy = Reach(_plan(20.0, 30.0), Precision(0.1), 0.1, fixed_s=0.010)  # ±2 against 1
    [left] = choose_links([mix], [], calibrated=True, reach=noisy)
    assert not left.inject
    assert left.reasons == ("ambiguous, but this run's measurement would not settle it: t "
                            "(mixed), expected ±2 against a span of 1; more cycles or a "
                            "larger magnitude_ms would",)
    quiet = Reach(_plan(2.0, 30.0), Precision(0.1), 0.1, fixed_s=0.010)  # ±0.2
    assert choose_links([mix], [], calibrated=True, reach=quiet)[0].inject
    # adaptive: the delay grows to the cap over the passive count's upper end (30 ms / 0.55)
    adaptive = Reach(_plan(20.0, 30.0), Precision(0.1), 0.1)
    g = mix.crossings["t"]
    assert g is not None
    upper = g.estimate + (g.ci95[1] - g.ci95[0]) / 2
    assert adaptive.half_widths(mix)["t"] == pytest.approx(0.020 / (0.030 / upper))
    assert choose_links([mix], [], calibrated=True, reach=adaptive)[0].inject
    # a question still measures it, whatever the noise
    assert choose_links([mix], [frozenset({"app1"})], calibrated=True, reach=noisy)[0].inject
    # a transaction the plan has no noise for: the measurement is assumed to settle it
    other = Reach(replace(_plan(20.0, 30.0), noise_s={"u": 0.02}), Precision(0.1), 0.1,
                  fixed_s=0.010)
    assert choose_links([mix], [], calibrated=True, reach=other)[0].inject


def test_an_unstable_count_is_sized_as_the_adaptive_cycles_would_leave_it():
    """A wide count (few requests) caps the delay no lower than the adaptive cycles' own
    stopping point (a rough gradient within a factor 2), so a measurement that would settle
    it is made."""
    few = PassiveGradient(1.0, (0.0, 3.0), 0.5, 20, 0)
    link = replace(_facts("app->db"), crossings={"t": few})
    reach = Reach(_plan(20.0, 30.0), Precision(0.1), 0.1)
    assert reach.half_widths(link)["t"] == pytest.approx(0.020 / 0.020)  # 30 ms / 1.5
    [chosen] = choose_links([link], [], calibrated=True, reach=reach)
    assert chosen.inject
    assert chosen.reasons == ("unstable paths (t)",)
    both = replace(link, patterns={"t": [(0.5, 1.0), (0.5, 0.0)]})  # and mixed: said once
    noisy = Reach(_plan(200.0, 30.0), Precision(0.1), 0.1, fixed_s=0.010)
    [left] = choose_links([both], [], calibrated=True, reach=noisy)
    assert left.reasons[0].count("t (") == 1
    assert "t (unstable), expected ±20 against a span of 3" in left.reasons[0]


def test_the_reach_follows_the_experiments_delay():
    from coordinator.config.experiment import Parameters
    from coordinator.live.training import reach_of

    plan = replace(_plan(20.0, 30.0), magnitude_s=0.007)
    adaptive = reach_of(plan, Parameters(max_delay_ms=50.0))
    assert adaptive.fixed_s is None
    assert adaptive.max_delay_s == pytest.approx(0.05)
    # a fixed delay (magnitude_ms; without adaptive cycles, the first one) is the plan's
    assert reach_of(plan, Parameters(magnitude_ms=7.0)).fixed_s == 0.007
    assert reach_of(plan, Parameters(adaptive=False)).fixed_s == 0.007
    assert reach_of(plan, Parameters(magnitudes_ms=(5.0, 20.0))).fixed_s == pytest.approx(0.02)

"""Numbers too large to be real (issue 13): every number a run directory's files give the
arithmetic and every time option is bounded, the limit named in the message, exit 2; inside
the bounds prediction, placement, routing and the report give finite results without a numpy
warning (pytest makes every warning an error) or an internal error."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from coordinator.cli.main import main
from coordinator.config.bounds import MAX_EFFECT_MS, MAX_GRADIENT
from coordinator.config.experiment import MAX_K, MAX_SCALE_D, Parameters
from coordinator.config.run_dir import RunDir
from coordinator.config.run_records import LinkMeasurement
from coordinator.live.wave_estimate import _estimate
from linkgrad.graph import GraphLink
from linkgrad.linearity import DelayPoint, fit
from linkgrad.prediction import Estimate, fit_curve, predict
from linkgrad.protocol.injector import Calipers, Caps
from linkgrad.protocol.record import InjectionRecord, recorded_delay_ms
from linkgrad.protocol.sniffer import Report
from linkgrad.spectral import estimate
from linkgrad.spectral.binning import bin_series
from linkgrad.spectral.estimate import log_gradients, settings_for_log
from linkgrad.spectral.result import GradientResult
from linkgrad.square_wave import SquareWave
from linkgrad.watch import Baseline
from linkgrad.weblog.model import RequestLog
from tests.test_input_fuzz import link_entry, strict_loads, write_experiment, write_run


def commands(run: Path, latencies: Path | None = None) -> dict[str, list[str]]:
    """Each reader of a run directory, over `run` (and a latencies file)."""
    lat = str(latencies or run / "now.yaml")
    grads = str(run / "gradients.json")
    return {"predict": ["predict", "--gradients", grads, "--latencies", lat, "--placement",
                        str(run / "move.yaml")],
            "place": ["place", "--app", grads, "--latencies", lat, "--candidates",
                      str(run / "candidates.yaml")],
            "route": ["route", "--gradients", grads, "--latencies", lat, "--component", "db",
                      "--copies", "app", "db"],
            "report": ["report", str(run)]}


def edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The error message of a command that must be exit 2 with one strict JSON error."""
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert strict_loads(out)["error"]["kind"] == "input"
    return err


# --- gradients.json, baseline.json, run.json read back -------------------------------------

@pytest.mark.parametrize(("key", "value", "message"), [
    ("gradient", 1e300, "' gradient 1e+300 is above 2.592e+15 (no measurement gives it: an "
                        "effect of at most 2.592e+12 ms over a delay of at least 0.001 ms)"),
    ("gradient", -1e300, "' gradient -1e+300 is below -2.592e+15"),
    ("gradient", 10**400, ".gradient' a number of 401 digits, too large for a float"),
    ("thesis_gradient", 1e16, "' thesis_gradient 1e+16 is above 2.592e+15"),
    ("effect_ms", -1e300, "' effect_ms -1e+300 is below -2.592e+12 (no fit of response times"),
    ("se_ms", 1e300, "' se_ms 1e+300 is above 2.592e+12")], ids=lambda v: str(v)[:16])
def test_a_huge_number_in_gradients_json_is_exit_2_naming_the_limit(key, value, message,
                                                                     tmp_path, capsys):
    """gradient 1e300 reached prediction and was an OverflowError (internal error)."""
    run = write_run(tmp_path / "run")
    edit(run / "gradients.json",
         lambda d: d["links"][0]["transactions"]["two"].update({key: value}))
    for name, argv in commands(run).items():
        err = refused(argv, capsys)
        assert f"gradients.json: field 'links.0.transactions.two{message}" in err, name


@pytest.mark.parametrize("ci", [[1.8, 1e300], [-1e300, 2.2], [2.2, 1.8]])
def test_an_interval_beyond_the_limit_or_upside_down_is_refused(ci, tmp_path, capsys):
    run = write_run(tmp_path / "run")
    edit(run / "gradients.json", lambda d: d["links"][0]["transactions"]["two"].update(ci95=ci))
    err = refused(commands(run)["report"], capsys)
    assert "ci95" in err
    assert ("2.592e+15 (an interval too wide to be a measurement" in err) \
        if abs(max(ci, key=abs)) > 1e6 else ("no interval" in err)


@pytest.mark.parametrize(("field", "value", "limit"), [
    ("throughput_per_s", 1e300, "1e+09"), ("throughput_change", -2.0, "-1"),
    ("mean_response_ms", 1e300, "2.592e+09"), ("mean_response_change_ms", -1e300, "2.592e+09")])
def test_a_perturbation_no_log_gives_is_refused(field, value, limit, tmp_path, capsys):
    run = write_run(tmp_path / "run")
    edit(run / "gradients.json", lambda d: d["links"][0]["perturbation"].update({field: value}))
    err = refused(commands(run)["report"], capsys)
    assert f"field 'links.0.perturbation' {field}" in err
    assert limit in err


@pytest.mark.parametrize(("field", "value"), [("mean_ms", 1e300), ("se_ms", 1e300),
                                         ("requests", 0), ("requests", 2**60)])
def test_a_baseline_out_of_range_is_refused(field, value, tmp_path, capsys):
    """requests 0 for every transaction divided by zero in route."""
    run = write_run(tmp_path / "run")
    edit(run / "baseline.json", lambda d: d["transactions"]["two"].update({field: value}))
    for name, argv in commands(run).items():
        if name != "report":
            assert f"baseline.json: field 'transactions.two.{field}'" in refused(argv, capsys)


def test_a_run_journal_time_after_2286_is_refused(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    edit(run / "run.json", lambda d: d.update(started=1e300))
    assert "run.json: field 'started'" in refused(["report", str(run)], capsys)


def wide_at_a_microsecond() -> dict[str, Any]:
    """A link as a run measures it at the record's smallest delay (1 us): an effect of 1.5 ms
    with a standard error of 1 s is a gradient of 1.5e6, its interval ±2.2e6 (t = 2.228 at 10
    degrees of freedom) and eq. 2.6's gradient alike."""
    entry = link_entry()
    entry["record"]["magnitude_ms"] = entry["requested_ms"] = 0.001
    entry["transactions"]["two"].update(gradient=1.5e6, ci95=[-728100.0, 3728100.0],
                                        effect_ms=1.5, se_ms=1000.0, thesis_gradient=1.4e6)
    return entry


def test_a_wide_interval_at_a_microsecond_is_read_back(tmp_path, capsys):
    """A run's own measurement is within the bounds: ci95 and gradient past ±1e6 were refused
    ('crossings per request'), so resume refused the run forever, report skipped it and
    predict, place and route refused the whole run for one transaction on one link."""
    run = write_run(tmp_path / "run")
    entry = LinkMeasurement.model_validate(wide_at_a_microsecond())  # as the run builds it
    RunDir(run).write_measurements("fake", [entry])
    assert RunDir(run).measurements() == [entry]
    for name, argv in commands(run).items():
        code = main([*argv, "--json"])
        out, err = capsys.readouterr()
        assert code == 0, (name, err)
        strict_loads(out)
    # run --resume reads the directory whole before anything else: it gets past it to the
    # experiment's missing known_hosts
    experiment = write_experiment(tmp_path / "x.yaml")
    code = main(["run", str(experiment), "--resume", str(run), "--json"])
    _, err = capsys.readouterr()
    assert code == 2
    assert "gradients.json" not in err
    assert "known_hosts" in err


def test_a_number_past_the_bounds_is_built_and_refused_read_back(tmp_path, capsys):
    """The bounds hold for files read back: the same entry validates as the run builds it."""
    entry = wide_at_a_microsecond()
    entry["transactions"]["two"].update(gradient=3e15, ci95=[0.0, 4e15])
    LinkMeasurement.model_validate(entry)  # as the run builds it
    run = write_run(tmp_path / "run")
    edit(run / "gradients.json", lambda d: d.update(links=[entry]))
    err = refused(commands(run)["predict"], capsys)
    assert "gradient 3e+15 is above 2.592e+15" in err
    assert "ci95[1] 4e+15 is above 2.592e+15 (an interval too wide to be a measurement" in err


def test_a_fit_past_the_effect_limit_is_no_estimate(monkeypatch):
    """What the run writes is what reading it back accepts: a lockin fit whose effect or
    interval is past MAX_EFFECT_S (a near-singular fit) is dropped with its reason."""
    t = 1.7e9 + np.arange(4000) * 0.05
    wave = SquareWave(1.7e9 + 100.0, 8.0, 8, 0.001)
    y = 0.005 + 0.002 * wave.is_on(t) + 0.0001 * np.sin(np.arange(len(t)))
    groups = {"two": np.arange(len(t))}
    settings = settings_for_log(0.0)
    kept = log_gradients(t, y, groups, wave, settings, baseline_end_s=wave.start_s)["two"]
    assert kept.lockin is not None
    monkeypatch.setattr(estimate, "MAX_EFFECT_S", abs(kept.lockin.effect_s) / 2)
    dropped = log_gradients(t, y, groups, wave, settings, baseline_end_s=wave.start_s)["two"]
    assert dropped.lockin is None
    assert any("past" in note and "collinear" in note for note in dropped.notes)
    assert GradientResult.of(dropped).model_dump(mode="json")["gradient"] is None


# --- inside the bounds: finite answers, no warning -----------------------------------------

def extreme_run(d: Path, gradient: float, se_ms: float, delays: tuple[float, ...]) -> Path:
    """app->db measured at `delays` (ms), every number at its limit."""
    run = write_run(d)
    links = []
    for i, m in enumerate(delays):
        entry = link_entry()
        entry["record"]["magnitude_ms"] = entry["requested_ms"] = m
        if i:
            entry["planned_ms"] = m
        g = gradient * (-1) ** i
        entry["transactions"]["two"].update(gradient=g, ci95=[g, g], se_ms=se_ms,
                                            effect_ms=MAX_EFFECT_MS, thesis_gradient=-g)
        links.append(entry)
    edit(run / "gradients.json", lambda data: data.update(links=links))
    edit(run / "baseline.json", lambda data: data["transactions"]["two"].update(
        mean_ms=2.592e9, se_ms=2.592e9))
    return run


@pytest.mark.parametrize(("gradient", "se_ms", "delays"), [
    (MAX_GRADIENT, 0.0, (1e-3, 1e4)), (MAX_GRADIENT, MAX_EFFECT_MS, (1e-3, 1.5e-3)),
    (-MAX_GRADIENT, 0.0, (1e-3, 1.5e-3, 1e4)), (1e-300, 1e-300, (10.0, 10.0 + 1e-12)),
    (0.0, 0.0, (10.0,)), (MAX_GRADIENT, MAX_EFFECT_MS, (1e4,)),
    (MAX_GRADIENT, MAX_EFFECT_MS, (1e-3, 1.5e-3, 1e4))])
@pytest.mark.parametrize("latency", [0.0, 60000.0])
def test_numbers_at_their_limits_give_finite_answers(gradient, se_ms, delays, latency,
                                                    tmp_path, capsys):
    """All-zero, tiny and largest gradients, delays at both ends and a hair apart, standard
    errors 0 and largest, latencies 0 (all equal) and largest: exit 0 and strict JSON."""
    run = extreme_run(tmp_path / "run", gradient, se_ms, delays)
    sites = tmp_path / "sites.yaml"
    sites.write_text(f"sites: {{web: a, app: a, db: a}}\nlatency_ms: {{a<->a: 0.0, "
                     f"a<->b: {{mean: {latency!r}, se: 60000.0}}, b<->b: 0.0}}\n")
    (run / "candidates.yaml").write_text("candidates: {db: [a, b]}\n")
    (run / "move.yaml").write_text("move: {db: b}\n")
    for name, argv in commands(run, sites).items():
        if name == "route":
            argv = [*argv[:-2], "a", "b"]
        code = main([*argv, "--json"])
        out, err = capsys.readouterr()
        assert code == 0, (name, err)
        strict_loads(out)


def test_a_curve_from_delays_too_close_or_without_errors_is_the_largest_delays_gradient():
    """Two delays a hair apart, or without standard errors, made a singular matrix
    (LinAlgError: an internal error); they say nothing of a curvature."""
    for points in ([(10.0, 1e6, 0.0), (float(np.nextafter(10.0, 11.0)), -1e6, 0.0)],
                   [(5.0, 1.0, math.inf), (20.0, 2.0, math.inf)],
                   [(10.0, 1.0, 0.1), (12.0, 2.0, 0.1)]):
        curve = fit_curve(points)
        assert curve.curvature == Estimate(0.0)
        assert curve.gradient.mean == max(points)[1]


def test_a_curve_stays_exact_when_the_standard_errors_are_far_apart():
    """Weights 1e36 apart made the normal equations singular; two delays are interpolated
    exactly whatever their weights, and the standard errors stay finite."""
    for se in ([0.0, 1e8], [2.6e12, 0.0], [0.0, 2.6e12]):
        curve = fit_curve([(5.0, 1.0 + 0.02 * 5, se[0]), (20.0, 1.0 + 0.02 * 20, se[1])])
        assert curve.gradient.mean == pytest.approx(1.0, rel=1e-6)
        assert curve.curvature.mean == pytest.approx(0.02, rel=1e-6)
        assert math.isfinite(curve.gradient.se)
        assert math.isfinite(curve.curvature.se)
    g, se = MAX_GRADIENT, MAX_EFFECT_MS / 1e-3  # the limits, 1.5x apart
    worst = fit_curve([(1e-3, g, se), (1.5e-3, -g, se / 1.5)])
    change = predict({"t": Estimate(2.592e9, 2.592e9)}, {"t": {("a", "b"): worst}},
                     {("a", "b"): Estimate(-6e4, 8.5e4)})["t"]
    assert all(map(math.isfinite, (change.predicted_ms, change.se_ms, *change.ci95)))


def test_linearity_with_an_interval_of_no_width_is_finite():
    """A half-width of 1e-300 overflowed its weight (the report printed numpy warnings)."""
    line = fit("l", "t", [DelayPoint(10.0, 1e-300, 1e-300, "measurement"),
                          DelayPoint(30.0, 2.0, 1e-300, "measurement")])
    assert line is not None
    assert math.isfinite(line.change_per_ms)


def test_requests_far_from_the_bins_are_left_out_without_a_cast_warning():
    """plan --before 1e20 cast a bin 1e23 away to int64 ('invalid value encountered in
    cast')."""
    means, counts = bin_series(np.array([1e20, -1e20, 9.0]), np.ones(3), 0.0, 1e-3, 8)
    assert counts.sum() == 0
    assert np.isnan(means).all()


# --- options ---------------------------------------------------------------------------------

def log(tmp_path: Path) -> list[str]:
    path = tmp_path / "log.csv"
    path.write_text("".join(f"{1.7e9 + i / 10},{5 + i % 3},/two\n" for i in range(400)))
    record = tmp_path / "record.json"
    record.write_text(json.dumps(link_entry()["record"]))
    return ["--log", str(path), "--format", "csv"]


@pytest.mark.parametrize(("option", "value", "limit"), [
    ("--before", "1e300", "253402300799 (9999)"), ("--before", "-1", "0 (1970)"),
    ("--half-width", "1e300", "at most 100 (as in an experiment file)"),
    ("--magnitude-ms", "1e6", "at most 10000"), ("--scale-d", "1e6", "at most 1000 "),
    ("-k", "100000", "at most 10000")])
def test_plan_options_have_the_experiment_files_bounds(option, value, limit, tmp_path, capsys):
    """plan --before 1e300 printed numpy's cast warnings before its error."""
    err = refused(["plan", *log(tmp_path), f"{option}={value}"], capsys)
    assert f"field '{option}'" in err
    assert limit in err


@pytest.mark.parametrize(("option", "field", "limit"), [("-k", "k", MAX_K),
                                                      ("--scale-d", "scale_d", MAX_SCALE_D)])
def test_plan_options_limits_are_the_experiment_files_named_once(option, field, limit,
                                                                 tmp_path, capsys):
    """The option's limit was dug out of the pydantic field's metadata; it is the constant
    the experiment's parameters are declared with."""
    Parameters(**{field: limit})
    with pytest.raises(ValidationError):
        Parameters(**{field: limit + 1})
    err = refused(["plan", *log(tmp_path), f"{option}={limit * 2:g}"], capsys)
    assert f"at most {limit:g} (as in an experiment file)" in err


@pytest.mark.parametrize("value", ["1e300", "-1e300", "-1"])
def test_gradient_baseline_end_is_a_time_a_log_can_hold(value, tmp_path, capsys):
    """--baseline-end -1e300 was taken: training data from before 1970."""
    argv = ["gradient", *log(tmp_path), "--injection", str(tmp_path / "record.json")]
    err = refused([*argv, f"--baseline-end={value}"], capsys)
    assert "field '--baseline-end'" in err
    assert "253402300799 (9999)" in err


@pytest.mark.parametrize("weight", ["1e-300", "5e-324", "1e7"])
def test_place_importance_is_a_relative_weight_within_1e6(weight, tmp_path, capsys):
    run = write_run(tmp_path / "run")
    argv = commands(run)["place"]
    argv[2] += f"={weight}"
    assert "importance must be 1e-06 to 1e+06" in refused(argv, capsys)


# --- the daemons' replies ------------------------------------------------------------------

def test_daemon_replies_are_bounded_as_requests_are():
    """A reply is input too: a mean delay of 1e300 ms became the run's injection record."""
    for bad in ({"mean_ms": 1e300}, {"std_ms": -1.0}, {"count": -1}):
        with pytest.raises(ValidationError):
            Calipers.model_validate(bad)
    Calipers.model_validate({"count": 3, "min_ms": -0.5, "mean_ms": 20.0, "std_ms": 0.1})
    with pytest.raises(ValidationError):
        Caps.model_validate({"max_magnitude_ms": 1e300, "max_duration_s": 60.0})
    with pytest.raises(ValidationError):
        Report.model_validate({"from": 0.0, "to": 1e300})


# --- the injector's mean delay becomes the injection record ---------------------------------

@pytest.mark.parametrize(("applied", "packets", "recorded", "noted"), [
    (10_000.4, 900, 10_000.0, False), (10_150.0, 900, 10_000.0, True), (5.2, 900, 5.2, False),
    (None, 0, 5.0, False), (0.0, 0, 5.0, False), (4e-4, 900, 5.0, True), (-1.0, 900, 5.0, True)])
def test_the_recorded_delay_is_one_a_record_holds(applied, packets, recorded, noted):
    asked = 10_000.0 if applied and applied > 1e4 else 5.0
    ms, note = recorded_delay_ms(applied, packets, asked)
    assert ms == recorded
    assert (note is not None) == noted
    InjectionRecord.of(SquareWave(1.7e9, 8.0, 4, ms / 1e3), ms)


@pytest.mark.parametrize(("applied", "recorded", "note"), [
    (10_000.4, 10_000.0, None),  # at the cap, packets released a little late
    (10_500.0, 10_000.0, "held packets 10500 ms on average, above the injection record's "
                         "10000 ms (released 5% late): recorded as 10000 ms"),
    (2e-4, 10_000.0, "reports a mean delay of 0.0002 ms, below the 0.001 ms")])
def test_a_run_records_a_mean_delay_past_the_records_limits_with_a_note(applied, recorded,
                                                                        note):
    """A run at the 10 s cap got a mean of ~10000.x ms (no packet leaves early), and
    InjectionRecord.of raised ValidationError: an internal error on its own measurement."""
    t = 1.7e9 + np.arange(3000) * 0.1
    wave = SquareWave(1.7e9 + 100.0, 40.0, 4, 10.0)
    y = 0.005 + 10.0 * wave.is_on(t)
    snap = RequestLog(t, y, np.array(["/two"] * len(t), dtype=object))
    link = GraphLink("tcp", "app", "10.0.0.1", 0, "db", "10.0.0.2", 5432, 100)
    result = _estimate(snap, {"two": np.arange(len(t))}, link, wave, applied, 900,
                       Baseline(wave.start_s, 10.0, 5.0), Parameters())
    assert result.record.magnitude_ms == recorded
    notes = result.transactions["two"].notes
    assert any(note in n for n in notes) if note else not any("injector" in n for n in notes)


def test_an_experiment_delay_below_a_microsecond_is_refused():
    """A run asked for less than a record holds failed on its first wave with no packet."""
    for bad in ({"magnitude_ms": 1e-4}, {"max_delay_ms": 1e-4}, {"magnitudes_ms": (1e-4, 1.0)}):
        with pytest.raises(ValidationError, match=r"0\.001"):
            Parameters(**bad)
    Parameters(magnitude_ms=1e-3, max_delay_ms=1e-3)

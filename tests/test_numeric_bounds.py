"""Numbers too large to be real (issue 13): every number a run directory's files give the
arithmetic and every time option is bounded, the limit named in the message, exit 2; inside
the bounds prediction, placement, routing and the report give finite results without a numpy
warning (pytest makes every warning an error) or an internal error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli.main import main
from coordinator.config.run_dir import LinkMeasurement
from tests.test_input_fuzz import link_entry, strict_loads, write_run


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
    ("gradient", 1e300, "gradient 1e+300 is above 1e+06 (a gradient counts crossings"),
    ("gradient", -1e300, "gradient -1e+300 is below -1e+06"),
    ("gradient", 10**400, "gradient a number of 401 digits is above 1e+06"),
    ("thesis_gradient", 1e7, "thesis_gradient 1e+07 is above 1e+06"),
    ("effect_ms", -1e300, "effect_ms -1e+300 is below -2.592e+09 (a change of mean response"),
    ("se_ms", 1e300, "se_ms 1e+300 is above 2.592e+09")], ids=lambda v: str(v)[:16])
def test_a_huge_number_in_gradients_json_is_exit_2_naming_the_limit(key, value, message,
                                                                     tmp_path, capsys):
    """gradient 1e300 reached prediction and was an OverflowError (internal error)."""
    run = write_run(tmp_path / "run")
    edit(run / "gradients.json",
         lambda d: d["links"][0]["transactions"]["two"].update({key: value}))
    for name, argv in commands(run).items():
        err = refused(argv, capsys)
        assert f"gradients.json: field 'links.0.transactions.two' {message}" in err, name


@pytest.mark.parametrize("ci", [[1.8, 1e300], [-1e300, 2.2], [2.2, 1.8]])
def test_an_interval_beyond_the_limit_or_upside_down_is_refused(ci, tmp_path, capsys):
    run = write_run(tmp_path / "run")
    edit(run / "gradients.json", lambda d: d["links"][0]["transactions"]["two"].update(ci95=ci))
    err = refused(commands(run)["report"], capsys)
    assert "ci95" in err
    assert ("1e+06" in err) if abs(max(ci, key=abs)) > 1e6 else ("no interval" in err)


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


def test_a_run_writes_a_freak_estimate_and_its_readers_refuse_it(tmp_path, capsys):
    """The bounds hold for files read back: the run that measured a gradient of 2e6 (a delay
    of a microsecond, say) writes it rather than failing, and the readers name it."""
    entry = link_entry()
    entry["transactions"]["two"].update(gradient=2e6, ci95=[0.0, 4e6])
    LinkMeasurement.model_validate(entry)  # as the run builds it
    run = write_run(tmp_path / "run")
    edit(run / "gradients.json", lambda d: d.update(links=[entry]))
    err = refused(commands(run)["predict"], capsys)
    assert "gradient 2e+06 is above 1e+06" in err
    assert "ci95[1] 4e+06 is above 1e+06" in err

"""`linkgrad regress --night`, end to end through the command line, on nights whose runs the
fake remote made (real run directories: the real run loop, daemons' handlers and estimator, in
virtual time, no root): a night like the baseline's passes, a night whose application makes
one more database round trip fails naming that transaction and link, and the files it keeps
say so."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from coordinator.cli.main import main
from coordinator.live.run import run_experiment
from tests.fakes.remote import (
    NIGHT_EXPERIMENT,
    NIGHT_SUITE,
    FakeApplication,
    FakeClock,
    FakeHosts,
    fake_experiment,
)


def _night(tmp_path: Path, name: str, crossings: dict[str, int], seed: int) -> Path:
    """A night directory holding the experiment `fake`'s run on an application whose
    transactions make `crossings` database round trips."""
    experiment = fake_experiment(tmp_path, paths={"enabled": False})
    clock = FakeClock()
    hosts = FakeHosts(FakeApplication(clock, crossings, seed=seed))
    night = tmp_path / "nights" / name
    journal = run_experiment(experiment, night / "fake", lambda _: None,
                             connect=hosts.connect, clock=clock)
    assert journal.succeeded
    return night


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("nights")
    return {"accepted": _night(tmp, "accepted", {"/two": 2, "/none": 0}, seed=1),
            "same": _night(tmp, "same", {"/two": 2, "/none": 0}, seed=2),
            "extra": _night(tmp, "extra", {"/two": 3, "/none": 0}, seed=3)}


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "fake.yaml").write_text(NIGHT_EXPERIMENT)
    path = tmp_path / "suite.yaml"
    path.write_text(NIGHT_SUITE)
    return path


def _regress(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["regress", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_without_a_baseline_it_asks_for_one(suite: Path, nights: dict[str, Path],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["regress", str(suite), "--night", str(nights["same"])])
    assert code == 2
    err = capsys.readouterr().err
    assert "no baseline at" in err
    assert "--accept" in err


def test_a_night_like_the_baseline_passes_and_one_more_round_trip_fails(
        suite: Path, nights: dict[str, Path], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    code, accepted = _regress(capsys, str(suite), "--night", str(nights["accepted"]),
                              "--accept")
    assert (code, accepted["status"], accepted["accepted"]) == (0, "accepted", True)
    baseline = Path(accepted["baseline"])
    assert baseline == tmp_path / "fake-nights.baseline.json"
    assert json.loads(baseline.read_text())["suite"] == "fake-nights"

    code, same = _regress(capsys, str(suite), "--night", str(nights["same"]))
    assert (code, same["status"], same["regressions"]) == (0, "pass", [])
    gradients = [c for c in same["checks"] if c["kind"] == "gradient"]
    assert len(gradients) == 4  # two transactions, two links
    assert all(c["verdict"] == "pass" for c in gradients)
    assert same["baseline"] == str(baseline)

    junit = tmp_path / "junit.xml"
    code, extra = _regress(capsys, str(suite), "--night", str(nights["extra"]), "--junit",
                           str(junit))
    assert (code, extra["status"]) == (1, "regression")
    assert set(extra["regressions"]) == {"two on tcp app:0 -> db:5432 (experiment fake)",
                                         "two on tcp db:5432 -> app:0 (experiment fake)"}
    two = next(c for c in extra["checks"] if c["name"] == extra["regressions"][0])
    assert two["current"]["gradient"] - two["baseline"]["gradient"] == pytest.approx(1, abs=0.3)
    failures = ET.parse(junit).getroot().findall(".//failure")
    assert len(failures) == 2
    # a night compared again is not a night run: the history holds none of them
    assert "history" not in extra
    assert not (tmp_path / "out" / "history.jsonl").exists()
    assert not (nights["extra"] / "regress.json").exists()  # a night's own is its run's


def test_a_night_whose_run_did_not_complete_is_failed_and_never_accepted(
        suite: Path, nights: dict[str, Path], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(nights["same"], broken)
    journal = json.loads((broken / "fake" / "run.json").read_text())
    (broken / "fake" / "run.json").write_text(json.dumps({**journal, "status": "interrupted"}))
    junit = tmp_path / "junit.xml"
    code, result = _regress(capsys, str(suite), "--night", str(broken), "--accept",
                            "--junit", str(junit))
    assert (code, result["status"], result["accepted"]) == (3, "failed", False)
    assert "experiment fake interrupted" in result["reason"]
    assert not (tmp_path / "fake-nights.baseline.json").exists()
    error = ET.parse(junit).getroot().find(".//error")
    assert error is not None
    assert "interrupted" in (error.get("message") or "")


def test_an_accepted_night_s_changes_are_no_junit_failures(
        suite: Path, nights: dict[str, Path], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    assert _regress(capsys, str(suite), "--night", str(nights["accepted"]), "--accept")[0] == 0
    junit = tmp_path / "junit.xml"
    code, result = _regress(capsys, str(suite), "--night", str(nights["extra"]), "--accept",
                            "--junit", str(junit))
    assert (code, result["status"]) == (0, "accepted")
    assert len(result["regressions"]) == 2  # said, and accepted
    assert ET.parse(junit).getroot().findall(".//failure") == []


def test_a_night_missing_an_experiment_is_bad_input(
        suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty-night"
    empty.mkdir()
    code = main(["regress", str(suite), "--night", str(empty), "--accept"])
    assert code == 2
    assert "no run of experiment 'fake' in this night" in capsys.readouterr().err


def test_a_night_not_kept_accepts_nothing(suite: Path, nights: dict[str, Path],
                                          capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    code, result = _regress(capsys, str(suite), "--night", str(nights["same"]), "--accept",
                            "--junit", str(blocked / "junit.xml"))
    assert (code, result["status"]) == (3, "failed")
    assert "verdict was 'accepted', but it could not be kept" in result["reason"]
    assert not (tmp_path / "fake-nights.baseline.json").exists()


def test_a_night_that_failed_when_it_ran_is_not_accepted_later(
        suite: Path, nights: dict[str, Path], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    night = tmp_path / "failed-night"
    shutil.copytree(nights["same"], night)
    (night / "regress.json").write_text(json.dumps({"status": "failed",
                                                    "reason": "testbed nt down: ..."}))
    code, result = _regress(capsys, str(suite), "--night", str(night), "--accept")
    assert (code, result["status"]) == (3, "failed")
    assert "was 'failed' when it ran" in result["reason"]
    assert not (tmp_path / "fake-nights.baseline.json").exists()


@pytest.mark.parametrize("edit", ["dof", "ci95", "twice"])
def test_a_night_s_broken_run_files_are_bad_input_naming_them(
        edit: str, suite: Path, nights: dict[str, Path], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    night = tmp_path / "broken"
    shutil.copytree(nights["same"], night)
    path = night / "fake" / "gradients.json"
    data = json.loads(path.read_text())
    two = data["links"][0]["transactions"]["two"]
    if edit == "dof":
        two["dof"] = "x"
    elif edit == "ci95":
        two["ci95"] = None
    else:
        data["links"].append(data["links"][0])
    path.write_text(json.dumps(data))
    code = main(["regress", str(suite), "--night", str(night), "--accept"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert str(night / "fake") in err
    assert "internal error" not in err

"""benchmarks/coverage.py's truth under background load: each kind of work's steady-state
slope, mixed in the shares of time each kind ran in a cell's own injection window."""

import pytest

from benchmarks.background_load import busy_fractions
from benchmarks.coverage import mixed, with_shares

STEADY = {"none": (40.0, 1.0), "cpu": (80.0, 4.0), "disk": (50.0, 3.0), "both": (100.0, 5.0)}


def test_the_mixture_weights_each_kind_by_its_share_and_the_rest_by_none() -> None:
    value, se = mixed(STEADY, {"cpu": 0.1, "disk": 0.2, "both": 0.1})
    assert value == pytest.approx(0.6 * 40 + 0.1 * 80 + 0.2 * 50 + 0.1 * 100)
    assert se == pytest.approx(((0.6 * 1) ** 2 + (0.1 * 4) ** 2 + (0.2 * 3) ** 2
                                + (0.1 * 5) ** 2) ** 0.5)


def test_a_truth_measured_only_idle_is_that_truth_whatever_the_shares() -> None:
    assert mixed({"none": (7.0, 0.5)}, {"cpu": 0.9}) == (7.0, 0.5)


def test_no_share_is_the_idle_truth() -> None:
    assert mixed(STEADY, {}) == pytest.approx((40.0, 1.0))


def test_shares_are_of_the_window_not_of_the_whole_episode() -> None:
    episodes = [{"at": 100.0, "kind": "cpu", "length_s": 20.0},
                {"at": 130.0, "kind": "both", "length_s": 40.0}]
    shares = busy_fractions(episodes, 110.0, 160.0)
    assert shares == pytest.approx({"cpu": 10 / 50, "disk": 0.0, "both": 30 / 50})


def test_a_cell_takes_its_window_and_an_old_cell_the_whole_run() -> None:
    run = {"seconds": 200.0, "episodes": [{"at": 100.0, "kind": "disk", "length_s": 50.0}]}
    windowed = with_shares({"window": [50.0, 150.0]}, run)
    assert windowed["busy_by_kind"]["disk"] == pytest.approx(0.5)
    old = with_shares({}, run)
    assert old["busy_by_kind"]["disk"] == pytest.approx(0.25)
    assert old["busy_from"] == "whole run"
    assert with_shares({"window": [0.0, 1.0]}, {"seconds": 1.0, "episodes": []}) == {
        "window": [0.0, 1.0]}

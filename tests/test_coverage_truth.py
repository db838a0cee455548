"""benchmarks/coverage.py's truth under background load: each kind of work's steady-state
slope, mixed in the shares of time each kind ran in a cell's own injection window."""

import pytest

from benchmarks.background_load import busy_fractions
from benchmarks.coverage import departing, mixed, nearest, with_shares

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


def test_a_kind_of_work_the_truth_lacks_is_an_error_not_idle_time() -> None:
    with pytest.raises(SystemExit, match="disk"):
        mixed({"none": (40.0, 1.0), "cpu": (80.0, 4.0)}, {"cpu": 0.2, "disk": 0.5})


def test_the_nearest_delay_by_ratio_and_a_delay_free_truth_only_alone() -> None:
    measured = [(1.0, {"none": (1.8, 0.05)}), (4.0, {"none": (2.0, 0.02)})]
    assert nearest(measured, 1.3)[0] == 1.0
    assert nearest(measured, 2.5)[0] == 4.0
    assert nearest([(None, {"none": (2.0, 0.0)}), *measured], 0.9)[0] == 1.0
    assert nearest([(None, {"none": (2.0, 0.0)})], 0.9)[0] is None


def test_a_slope_replaces_the_count_only_where_it_departs_beyond_its_error() -> None:
    counts = {("ViewItem", "a->db"): [(None, {"none": (2.0, 0.0)})],
              ("single", "a->db"): [(None, {"none": (1.0, 0.0)})]}
    slopes = {("ViewItem", "a->db"): [(1.06, {"none": (1.81, 0.047)}),
                                      (4.1, {"none": (1.99, 0.02)})],
              ("single", "a->db"): [(1.06, {"none": (3.5, 1.1)})]}  # 2.3 se < z 2.39 (3 tests)
    truth = departing(counts, slopes)
    assert truth[("ViewItem", "a->db")] == [(1.06, {"none": (1.81, 0.047)}),
                                            (4.1, {"none": (2.0, 0.0)})]
    assert truth[("single", "a->db")] == [(1.06, {"none": (1.0, 0.0)})]

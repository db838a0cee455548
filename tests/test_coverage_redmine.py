"""benchmarks/coverage.py --app redmine: the truth is redmine_truth.json's slopes, idle only,
and a missing truth stops the benchmark with what to run, before any testbed comes up."""

import json
import re
from pathlib import Path

import pytest

from benchmarks import coverage


def _slopes(link: str, requested_ms: float, applied_ms: float, issue: float) -> dict:
    return {"link": link, "requested_ms": requested_ms, "applied_ms": applied_ms,
            "pages": {"issue": {"slope": issue, "se": 1.5}, "login": {"slope": 7.2, "se": 0.4}}}


@pytest.fixture
def out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(coverage, "OUT", tmp_path)
    return tmp_path


def test_the_truth_is_each_cell_s_slope_at_every_delay_measured(out: Path) -> None:
    slopes = [_slopes("web->db", 1.0, 1.04, 50.0), _slopes("db->web", 1.0, 1.02, 49.0),
              _slopes("web->db", 2.0, 2.06, 51.0), _slopes("db->web", 2.0, 2.02, 48.5)]
    (out / "redmine_truth.json").write_text(json.dumps({"crossings": {}, "slopes": slopes}))
    truth = coverage.truth("redmine", load=False)
    assert truth[("issue", "web->db")] == [(1.04, {"none": (50.0, 1.5)}),
                                           (2.06, {"none": (51.0, 1.5)})]
    assert set(truth) == {(p, link) for p in ("issue", "login")
                          for link in ("web->db", "db->web")}
    assert coverage.nearest(truth[("issue", "db->web")], 0.6)[0] == 1.02


def test_under_load_it_stops_saying_there_is_no_such_truth(out: Path) -> None:
    with pytest.raises(SystemExit, match="no truth under background load"):
        coverage.truth("redmine", load=True)


def test_a_missing_file_or_one_without_slopes_says_what_to_run(out: Path) -> None:
    with pytest.raises(SystemExit, match=r"run benchmarks/redmine_truth\.py first"):
        coverage.truth("redmine", load=False)
    (out / "redmine_truth.json").write_text(json.dumps({"crossings": {}}))
    with pytest.raises(SystemExit, match="has no slopes"):
        coverage.truth("redmine", load=False)


def test_the_experiment_is_both_directions_of_web_db_over_every_page(tmp_path: Path) -> None:
    text = coverage.experiment_yaml("redmine", tmp_path, coverage.RATES["redmine"], 1) \
        .read_text()
    assert "include: ['web->db', 'db->web']" in text
    assert "rate_per_s: 10.0" in text
    for name in ("issues", "issue", "search", "activity", "login"):
        assert f"  {name}: " in text
    search = next(line for line in text.splitlines() if line.startswith("  search: "))
    pattern = json.loads(search.split(": ", 1)[1])  # the access log's path and query
    assert re.match(pattern, "/search?q=river&scope=all")
    assert not re.match(pattern, "/searchXq=river&scope=all")


def test_the_other_apps_keep_their_pairs_and_rates() -> None:
    assert coverage.PAIRS["rubis"] == ("app1", "db")
    assert coverage.PAIRS["mediawiki"] == coverage.PAIRS["redmine"] == ("web", "db")
    assert (coverage.RATES["rubis"], coverage.RATES["mediawiki"]) == (40.0, 12.0)

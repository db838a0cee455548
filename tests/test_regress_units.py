"""`linkgrad regress`'s pure parts: the tests, the comparison of a night with its baseline,
the baseline and history files, JUnit and the trend page, the suite's validation."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from coordinator.cli.regress_junit import junit_xml
from coordinator.cli.regress_trend import trend_html
from coordinator.config.suite import Checks, GradientCheck, load_suite
from coordinator.regress.compare import compare
from coordinator.regress.files import (
    append_history,
    night_record,
    read_baseline,
    read_history,
    write_baseline,
)
from coordinator.regress.measures import (
    GradientMeasure,
    LinkMeasure,
    NightMeasures,
    PathMeasure,
    PatternCount,
    PredictionMeasure,
    SnapMeasure,
)
from coordinator.regress.stats import drop_p, holm, se_from_ci95, welch_p
from linkgrad.errors import InputError

LINK = "tcp app1:0 -> db:5432"
BACK = "tcp db:5432 -> app1:0"


def gradient(transaction: str, g: float | None, half: float = 0.05, link: str = LINK,
             dof: float | None = 30.0) -> GradientMeasure:
    ci = (g - half, g + half) if g is not None else None
    return GradientMeasure(experiment="db", transaction=transaction, link=link, gradient=g,
                           ci95=ci, dof=dof, magnitude_ms=10.0)


def pattern(key: str, count: int, db: float) -> PatternCount:
    return PatternCount(key=key, count=count, crossings={"app1->db": db, "db->app1": db})


def night(put_bid: float = 3.0, calls: int = 3, extra_link: bool = False,
          delayed_ack_s: float = 0.0) -> NightMeasures:
    """A night of the testbed as the suite measures it; `put_bid` PutBid's gradient, `calls`
    the database calls on its dominant path."""
    links = [LinkMeasure(experiment="db", link=LINK, messages=5000),
             LinkMeasure(experiment="db", link=BACK, messages=5000)]
    if extra_link:
        links.append(LinkMeasure(experiment="db", link="tcp app1:0 -> cache:11211",
                                 messages=800))
    seconds = {"app_limited": 40.0, **({"delayed_ack": delayed_ack_s} if delayed_ack_s else {})}
    return NightMeasures(
        gradients=(gradient("ViewItem", 2.0), gradient("PutBid", put_bid),
                   gradient("single", 1.0, half=0.6), gradient("ViewItem", 2.0, link=BACK)),
        predictions=(PredictionMeasure(experiment="db", placement="db-east",
                                       transaction="PutBid", predicted_ms=5 + 20 * put_bid,
                                       se_ms=0.5, current_ms=5.0),),
        links=tuple(links),
        paths=(PathMeasure(experiment="db", transaction="PutBid", requests=200,
                           patterns=(pattern(f"calls{calls}", 190, calls),
                                     pattern("other", 10, calls))),),
        snap=(SnapMeasure(experiment="db", link=LINK, window_s=30.0, seconds=seconds),))


def verdicts(checks: list) -> dict[str, str]:
    return {f"{c.kind}: {c.name}": c.verdict for c in checks}


def regressions(checks: list) -> list[str]:
    return [f"{c.kind}: {c.name}" for c in checks if c.verdict == "regression"]


# --- the tests ---

def test_welch_p_is_the_normal_test_without_degrees_of_freedom() -> None:
    se = 1.0
    assert welch_p(0.0, se, None, 1.959964 * math.sqrt(2), se, None) == pytest.approx(0.05,
                                                                                     rel=1e-4)
    assert welch_p(1.0, 0.1, 20, 1.0, 0.1, 20) == 1.0
    # with few degrees of freedom the same difference is less significant
    assert welch_p(0.0, 1.0, 3, 3.0, 1.0, 3) > welch_p(0.0, 1.0, None, 3.0, 1.0, None)


def test_se_from_the_interval_inverts_the_t_interval() -> None:
    assert se_from_ci95((-1.96, 1.96), None) == pytest.approx(1.0, rel=1e-3)
    assert se_from_ci95((-2.228, 2.228), 10) == pytest.approx(1.0, rel=1e-3)


def test_holm_steps_down() -> None:
    # alpha 0.05 over 4: 0.01 <= 0.0125 rejected, 0.02 <= 0.0167 no: stops there
    assert holm([0.01, 0.02, 0.03, 0.5], 0.05) == [True, False, False, False]
    assert holm([0.001, 0.01, 0.02, 0.5], 0.05) == [True, True, True, False]
    assert holm([], 0.05) == []


def test_drop_p_is_one_sided() -> None:
    assert drop_p(190, 200, 0, 200) < 1e-10
    assert drop_p(0, 200, 190, 200) > 0.99
    assert drop_p(100, 200, 100, 200) == pytest.approx(0.5)


# --- the comparison ---

def test_the_same_night_passes_every_check() -> None:
    checks = compare(night(), night(), Checks())
    assert not regressions(checks)
    assert {c.kind for c in checks} == {"gradient", "prediction", "link", "path", "snap"}


def test_an_extra_database_round_trip_is_caught_by_gradient_prediction_and_path() -> None:
    checks = compare(night(), night(put_bid=4.0, calls=4), Checks())
    found = regressions(checks)
    assert f"gradient: PutBid on {LINK} (experiment db)" in found
    assert "prediction: PutBid on placement db-east (experiment db)" in found
    assert "path: PutBid (experiment db)" in found
    assert len(found) == 3  # ViewItem, single, the links and SNAP did not move
    path = next(c for c in checks if c.kind == "path")
    assert "app1->db 3 -> 4" in path.reason


def test_a_small_significant_change_is_under_the_tolerance() -> None:
    checks = compare(night(), night(put_bid=3.15), Checks())
    put_bid = next(c for c in checks if c.kind == "gradient" and "PutBid" in c.name)
    assert put_bid.verdict == "pass"
    assert put_bid.p_value is not None
    assert put_bid.p_value < 1e-3
    assert "under the suite's tolerance" in put_bid.reason
    strict = Checks(gradients=GradientCheck(min_change=0.1))
    assert f"gradient: PutBid on {LINK} (experiment db)" in regressions(
        compare(night(), night(put_bid=3.15), strict))


def test_a_change_inside_wide_intervals_is_noise() -> None:
    before, now = night(), night()
    wide = now.model_copy(update={"gradients": tuple(
        gradient("single", 1.5, half=0.6) if g.transaction == "single" else g
        for g in now.gradients)})
    single = next(c for c in compare(before, wide, Checks())
                  if c.kind == "gradient" and "single" in c.name)
    assert single.verdict == "pass"
    assert "within the noise" in single.reason


def test_holm_keeps_many_marginal_differences_from_failing_the_night() -> None:
    """Forty gradients each 2.6 se apart (p ~ 0.01 alone): per-test alpha would fail the night,
    the night's family-wise alpha does not."""
    half = 0.5
    se = se_from_ci95((-half, half), 30.0)
    diff = 2.6 * se * math.sqrt(2)
    before = NightMeasures(gradients=tuple(gradient(f"t{i}", 1.0, half) for i in range(40)))
    now = NightMeasures(gradients=tuple(gradient(f"t{i}", 1.0 + diff, half) for i in range(40)))
    checks = compare(before, now, Checks(gradients=GradientCheck(min_change=0.0)))
    assert all(c.p_value is not None and c.p_value < 0.02 for c in checks)
    assert not regressions(checks)


def test_a_gradient_missing_tonight_is_a_regression_and_a_new_one_is_not() -> None:
    before, now = night(), night()
    kept = tuple(g for g in now.gradients if g.transaction != "PutBid")
    missing = now.model_copy(update={"gradients": (*kept, gradient("PutBid", None),
                                                   gradient("StoreBid", 4.0))})
    checks = compare(before, missing, Checks())
    found = verdicts(checks)
    assert found[f"gradient: PutBid on {LINK} (experiment db)"] == "regression"
    assert found[f"gradient: StoreBid on {LINK} (experiment db)"] == "new"


def test_a_new_link_and_a_vanished_one_are_regressions_a_faint_one_is_not() -> None:
    found = regressions(compare(night(), night(extra_link=True), Checks()))
    assert found == ["link: link on tcp app1:0 -> cache:11211 (experiment db)"]
    assert regressions(compare(night(extra_link=True), night(), Checks())) == found
    cache = LinkMeasure(experiment="db", link="tcp app1:0 -> cache:11211", messages=40)
    faint = night().model_copy(update={"links": (*night().links, cache)})
    assert not regressions(compare(night(), faint, Checks()))


def test_a_new_snap_class_is_a_regression_a_vanished_one_is_not() -> None:
    found = regressions(compare(night(), night(delayed_ack_s=6.0), Checks()))
    assert found == [f"snap: delayed_ack on {LINK} (experiment db)"]
    assert not regressions(compare(night(delayed_ack_s=6.0), night(), Checks()))
    # under the threshold's tenth both nights: no check at all
    assert not [c for c in compare(night(), night(delayed_ack_s=0.1), Checks())
                if c.subject.get("class") == "delayed_ack"]


def test_two_paths_trading_places_within_the_noise_are_no_regression() -> None:
    even = PathMeasure(experiment="db", transaction="cache", requests=100,
                       patterns=(pattern("hit", 52, 0), pattern("miss", 48, 1)))
    flipped = PathMeasure(experiment="db", transaction="cache", requests=100,
                          patterns=(pattern("miss", 51, 1), pattern("hit", 49, 0)))
    checks = compare(NightMeasures(paths=(even,)), NightMeasures(paths=(flipped,)), Checks())
    assert [c.verdict for c in checks] == ["pass"]


def test_a_transaction_with_few_traced_requests_is_not_judged() -> None:
    few = PathMeasure(experiment="db", transaction="PutBid", requests=5,
                      patterns=(pattern("calls4", 5, 4),))
    checks = compare(night(), night().model_copy(update={"paths": (few,)}), Checks())
    path = next(c for c in checks if c.kind == "path")
    assert path.verdict == "skipped"
    assert "too few traced requests" in path.reason


def test_paths_lost_tonight_are_a_regression_paths_never_taken_a_skip() -> None:
    none = night(put_bid=4.0, calls=4).model_copy(update={"paths": (),
                                                          "without_paths": ("db",)})
    checks = [c for c in compare(night(), none, Checks()) if c.kind == "path"]
    assert [c.verdict for c in checks] == ["regression"]
    assert "the capture failed or was turned off" in checks[0].reason
    never = [c for c in compare(none, none, Checks()) if c.kind == "path"]
    assert [c.verdict for c in never] == ["skipped"]


def test_a_prediction_tonight_s_traffic_does_not_allow_says_why() -> None:
    why = "no prediction of placement db-east (experiment db): app2->db carry traffic"
    now = night().model_copy(update={"predictions": (), "problems": (why,)})
    check = next(c for c in compare(night(), now, Checks()) if c.kind == "prediction")
    assert check.verdict == "regression"
    assert check.reason == why


def test_malformed_measures_are_refused() -> None:
    with pytest.raises(ValueError, match="dof"):
        gradient("PutBid", 3.0, dof=0.0)
    with pytest.raises(ValueError, match="not \\[low, high\\]"):
        GradientMeasure(experiment="db", transaction="t", link=LINK, gradient=1.0,
                        ci95=(2.0, 0.0), magnitude_ms=10.0)
    with pytest.raises(ValueError, match="counts more than"):
        PathMeasure(experiment="db", transaction="t", requests=5,
                    patterns=(pattern("k", 9, 1),))
    with pytest.raises(ValueError, match="there twice"):
        NightMeasures(links=night().links * 2)


# --- files ---

def test_the_baseline_round_trips_and_is_the_suite_s_own(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    write_baseline(path, "nightly", tmp_path / "night1", night(), now_s=1.7e9)
    back = read_baseline(path, "nightly")
    assert back.measures == night()
    assert back.accepted_unix == 1.7e9
    with pytest.raises(InputError, match="the baseline of suite 'nightly', not of 'other'"):
        read_baseline(path, "other")
    path.write_text(path.read_text().replace('"gradient": 3.0', '"gradient": "x"'))
    with pytest.raises(InputError, match=r"b\.json.*gradient"):
        read_baseline(path, "nightly")


def test_the_history_appends_whole_lines_and_names_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    checks = compare(night(), night(put_bid=4.0, calls=4), Checks())
    for status in ("pass", "regression"):
        append_history(path, night_record("nightly", tmp_path / f"n-{status}", 1.7e9, status,
                                          checks, night().gradients, tmp_path / "b.json",
                                          1.6e9))
    nights = read_history(path)
    assert [n.status for n in nights] == ["pass", "regression"]
    assert nights[1].checks[0].verdict in ("pass", "regression")
    with path.open("a") as f:
        f.write('{"suite": "nightly", "night": "cut\n')
    with pytest.raises(InputError, match=r"history\.jsonl:3"):
        read_history(path)


def test_junit_counts_failures_and_a_failed_night_is_an_error() -> None:
    checks = compare(night(), night(put_bid=4.0, calls=4), Checks())
    root = ET.fromstring(junit_xml("nightly", checks, None, 12.0))
    failures = sum(int(s.get("failures", 0)) for s in root.iter("testsuite"))
    assert failures == 3
    assert sum(int(s.get("tests", 0)) for s in root.iter("testsuite")) == len(checks)
    failed = ET.fromstring(junit_xml("nightly", [], "testbed nt up: no root", 1.0))
    error = failed.find(".//error")
    assert error is not None
    assert error.get("message") == "testbed nt up: no root"


def test_the_trend_page_draws_each_gradient_and_lists_the_nights(tmp_path: Path) -> None:
    checks = compare(night(), night(put_bid=4.0, calls=4), Checks())
    records = [night_record("nightly", tmp_path / f"n{i}", 1.7e9 + 86400 * i,
                            "regression" if i == 2 else "pass", checks if i == 2 else [],
                            night(put_bid=4.0 if i == 2 else 3.0).gradients, None, None)
               for i in range(3)]
    records.append(night_record("nightly", tmp_path / "n3", 1.7e9 + 86400 * 3, "failed", [],
                                [], None, None, reason="testbed nt up: <no root>"))
    page = trend_html("nightly", records)
    assert page.count("<figure>") == 4  # ViewItem, PutBid, single on app1->db; ViewItem back
    assert page.count("<tr class=") == 4
    assert "testbed nt up: &lt;no root&gt;" in page


# --- the suite ---

def _suite(tmp_path: Path, suite: str, experiment: str = "testbed: nt") -> Path:
    (tmp_path / "e.yaml").write_text(f"name: e1\n{experiment}\ntransactions: {{a: ^/a}}\n")
    path = tmp_path / "suite.yaml"
    path.write_text(suite)
    return path


def test_a_suite_names_its_files_and_defaults(tmp_path: Path) -> None:
    path = _suite(tmp_path, "name: n1\nexperiments:\n  - experiment: e.yaml\n")
    suite = load_suite(path)
    assert suite.tag == "nt"
    assert suite.suite.testbed.network == "mininet"
    assert suite.baseline == tmp_path / "n1.baseline.json"
    assert [e.name for e in suite.experiments] == ["e1"]


def test_an_experiment_on_other_hosts_is_an_error_at_its_line(tmp_path: Path) -> None:
    path = _suite(tmp_path, "name: n1\nexperiments:\n  - experiment: e.yaml\n",
                  experiment="testbed: tb")
    with pytest.raises(InputError, match=r"suite\.yaml:3: field 'experiments\.0\.experiment'"
                       r".*testbed 'tb'.*testbed: nt"):
        load_suite(path)


def test_bad_tolerances_and_missing_files_are_each_named(tmp_path: Path) -> None:
    path = _suite(tmp_path, "name: n1\nexperiments:\n  - experiment: e.yaml\n"
                  "    predict: {latencies: nope.yaml, placements: [p.yaml]}\n"
                  "checks:\n  gradients: {alpha: 2}\n")
    with pytest.raises(InputError) as e:
        load_suite(path)
    text = str(e.value)
    assert "suite.yaml:6: field 'checks.gradients.alpha'" in text
    with pytest.raises(InputError, match=r"nope\.yaml"):
        load_suite(_suite(tmp_path, "name: n1\nexperiments:\n  - experiment: e.yaml\n"
                          "    predict: {latencies: nope.yaml, placements: [p.yaml]}\n"))


def test_an_experiment_the_suite_gained_is_new_not_a_flood_of_new_links() -> None:
    gained = night().model_copy(update={"links": (*night().links, LinkMeasure(
        experiment="front", link="tcp web:0 -> app1:8000", messages=5000))})
    checks = compare(night(), gained, Checks())
    assert not regressions(checks)
    assert verdicts(checks)["experiment: experiment (experiment front)"] == "new"
    lost = compare(gained, night(), Checks())
    assert verdicts(lost)["experiment: experiment (experiment front)"] == "skipped"
    assert not regressions(lost)


def test_the_shipped_suite_loads_and_documents_every_field() -> None:
    from coordinator.config.suite import Checks, Predict, Suite, SuiteExperiment, TestbedSpec

    path = Path(__file__).resolve().parent.parent / "experiments" / "nightly.yaml"
    suite = load_suite(path)
    assert [e.name for e in suite.experiments] == ["db"]
    assert suite.baseline.exists()  # the shipped baseline, accepted on a night of the testbed
    text = path.read_text()
    fields = {*Suite.model_fields, *TestbedSpec.model_fields, *SuiteExperiment.model_fields,
              *Predict.model_fields, *Checks.model_fields}
    for kind in Checks.model_fields.values():
        fields |= set(kind.annotation.model_fields)  # type: ignore[union-attr]
    assert not [f for f in sorted(fields) if f"{f}:" not in text]


def test_a_suite_on_its_experiments_own_hosts_needs_no_testbed_tag(tmp_path: Path) -> None:
    path = _suite(tmp_path, "name: n1\ntestbed: {network: none}\nexperiments:\n"
                  "  - experiment: e.yaml\n",
                  experiment="hosts: [{name: web, address: 192.0.2.1}]\n"
                  "ssh: {known_hosts: known_hosts}\nweb_log: {host: web, path: /var/log/a.log}")
    assert load_suite(path).suite.testbed.network == "none"


def test_two_placements_of_one_name_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for p in ("now.yaml", "a/east.yaml", "b/east.yaml"):
        (tmp_path / p).write_text("move: {db: east}\n" if "east" in p else "sites: {}\n")
    path = _suite(tmp_path, "name: n1\nexperiments:\n  - experiment: e.yaml\n    predict: "
                  "{latencies: now.yaml, placements: [a/east.yaml, b/east.yaml]}\n")
    with pytest.raises(InputError, match="two placements named 'east'"):
        load_suite(path)


def test_a_second_night_on_the_same_lock_fails_at_once(tmp_path: Path) -> None:
    from coordinator.live.night import _lock
    from linkgrad.errors import RuntimeFailure

    with _lock(tmp_path / "x.lock", "suite n1's output"), \
            pytest.raises(RuntimeFailure, match="another night is running on suite n1"), \
            _lock(tmp_path / "x.lock", "suite n1's output"):
        pass
    with _lock(tmp_path / "x.lock", "suite n1's output"):  # released after the first
        pass

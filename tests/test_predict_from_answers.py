"""`predict`, `place` and `route` read what `linkgrad gradient --json` prints: the shipped
example's answer (app1->db, from experiments/example) with the latencies of
experiments/placement, as a user without a run directory would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.cli.main import main
from coordinator.config.gradient_answers import parse_pair

ROOT = Path(__file__).resolve().parent.parent
ANSWER = ROOT / "tests" / "data" / "example-gradient.json"
PLACES = ROOT / "experiments" / "placement"
NOW = str(PLACES / "now.yaml")


def _predict(capsys, *extra: str) -> dict:
    code = main(["predict", "--latencies", NOW, "--placement", str(PLACES / "db-east.yaml"),
                 "--json", *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)["placements"][0]


def test_an_answer_predicts_from_its_own_baseline_and_gradient(capsys):
    answer = json.loads(ANSWER.read_text())
    got = _predict(capsys, "--gradients", str(ANSWER))
    assert got["latency_changes_ms"]["app1->db"]["mean"] == pytest.approx(10.0)
    for name, t in got["transactions"].items():
        assert t["current_ms"] == pytest.approx(answer["baseline"]["transactions"][name]
                                                ["mean_ms"], abs=1e-3)
        g = answer["transactions"][name]["gradient"]
        assert t["change_ms"] == pytest.approx(10.0 * g, abs=1e-3)  # only app1->db measured
        assert [term["link"] for term in t["terms"]] == ["app1->db"]


def test_answers_for_two_links_add_up(tmp_path, capsys):
    answer = json.loads(ANSWER.read_text())
    back = tmp_path / "db-app1.json"
    back.write_text(json.dumps({**answer, "injection": {**answer["injection"],
                                                         "link": "db->app1"}}))
    one = _predict(capsys, "--gradients", str(ANSWER))
    both = _predict(capsys, "--gradients", str(ANSWER), "--gradients", str(back))
    for name, t in both["transactions"].items():
        assert {term["link"] for term in t["terms"]} == {"app1->db", "db->app1"}
        assert t["change_ms"] == pytest.approx(2 * one["transactions"][name]["change_ms"],
                                               abs=2e-3)


def test_a_record_without_hosts_takes_them_from_link(tmp_path, capsys):
    answer = json.loads(ANSWER.read_text())
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({**answer, "injection": {k: v for k, v in
                                                        answer["injection"].items()
                                                        if k != "link"}}))
    assert main(["predict", "--gradients", str(bare), "--latencies", NOW, "--placement",
                 str(PLACES / "db-east.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{bare}: field 'injection.link'" in err
    assert "--link SRC->DST" in err
    named = _predict(capsys, "--gradients", str(bare), "--link", "app1->db")
    assert named == _predict(capsys, "--gradients", str(ANSWER))


def test_place_and_route_take_an_answer(capsys):
    assert main(["route", "--gradients", str(ANSWER), "--latencies", NOW, "--component",
                 "db", "--copies", "here", "east", "--json"]) == 0
    routed = json.loads(capsys.readouterr().out)
    assert set(routed["transactions"]) == set(json.loads(ANSWER.read_text())["transactions"])
    assert main(["place", "--app", str(ANSWER), "--latencies", NOW, "--candidates",
                 str(PLACES / "candidates.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranked"]


def test_place_takes_an_app_s_answers_for_several_links(tmp_path, capsys):
    """One application measured on app1->db and db->app1 by two `gradient --json` runs:
    `--app A.json,B.json` is one app with both links, each moved link weighed by both."""
    answer = json.loads(ANSWER.read_text())
    back = tmp_path / "db-app1.json"
    back.write_text(json.dumps({**answer, "injection": {**answer["injection"],
                                                         "link": "db->app1"}}))

    def change_if_db_goes_west(app: str) -> float:
        assert main(["place", "--app", app, "--latencies", NOW, "--candidates",
                     str(PLACES / "candidates.yaml"), "--json", "--top", "10"]) == 0
        ranked = json.loads(capsys.readouterr().out)["ranked"]
        [west] = [r for r in ranked if r["move"] == {"db": "west"}]
        return west["weighted_change_ms"]
    one = change_if_db_goes_west(str(ANSWER))
    assert one > 0
    assert change_if_db_goes_west(f"{ANSWER},{back}=1") == pytest.approx(2 * one, rel=1e-3)
    assert main(["place", "--app", f"{ANSWER},", "--latencies", NOW, "--candidates",
                 str(PLACES / "candidates.yaml")]) == 2
    assert "expected FILE[,FILE...][=W]" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "said"), [
    (["--link", "app1->db", "--gradients", "tests/data/runs/testbed-quick/gradients.json"],
     "field '--link': only with what `linkgrad gradient --json` prints"),
    (["--gradients", str(ANSWER), "--gradients",
      "tests/data/runs/testbed-quick/gradients.json"], "a run's gradients.json is given alone"),
    (["--gradients", str(ANSWER), "--gradients", str(ANSWER), "--link", "app1->db"],
     "names the link of one answer"),
    (["--gradients", str(ANSWER), "--validate"], "field '--validate': needs a run directory"),
])
def test_what_an_answer_cannot_do_is_bad_input(extra, said, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["predict", "--latencies", NOW, "--placement", str(PLACES / "db-east.yaml"),
                 *extra]) == 2
    assert said in capsys.readouterr().err


def test_an_answer_without_a_baseline_says_how_to_get_one(tmp_path, capsys):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in json.loads(ANSWER.read_text()).items()
                               if k != "baseline"}))
    assert main(["predict", "--gradients", str(old), "--latencies", NOW, "--placement",
                 str(PLACES / "db-east.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{old}: field 'baseline'" in err
    assert "run `linkgrad gradient ... --json` again" in " ".join(err.split())


@pytest.mark.parametrize(("text", "pair"), [
    ("app1->db", ("app1", "db")), ("tcp app1:0 -> db:5432", ("app1", "db")),
    ("tcp6 web:0 -> app-1.example:8000", ("web", "app-1.example")),
    (" a -> b ", ("a", "b")), ("db", None), ("a->a", None), ("->b", None), ("a->", None),
])
def test_a_link_s_hosts_are_read_from_its_label(text, pair):
    assert parse_pair(text) == pair

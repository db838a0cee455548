"""`linkgrad explain` on a run directory: every measured (transaction, link) beside its causal
paths, the JSON the issue promises, and clear errors for what is not a run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from coordinator.cli.main import main

DATA = Path(__file__).parent / "data" / "runs" / "testbed-quick"
TRANSACTIONS = {"single": "^/pattern/single", "sequential": "^/pattern/sequential",
                "ViewItem": "^/rubis/ViewItem", "async": "^/pattern/async"}


def _run_dir(tmp_path: Path, paths: bool = True) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(DATA / "gradients.json", run)
    if paths:
        shutil.copy(DATA / "paths.json", run)
    (run / "experiment.json").write_text(json.dumps({
        "name": "testbed-quick", "hosts": [{"name": h} for h in
                                           ("client", "web", "app1", "app2", "db", "cache")],
        "transactions": TRANSACTIONS}))
    (run / "run.json").write_text(json.dumps({"status": "completed", "started": 1.7e9,
                                              "ended": 1.7e9 + 96, "links_done": 2}))
    return run


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["explain", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_measured_gradient_of_the_testbed_agrees_with_its_paths(tmp_path, capsys):
    out = _json(capsys, str(_run_dir(tmp_path)))
    rows = out["rows"]
    assert {(r["transaction"], r["pair"]) for r in rows} == {
        (t, p) for t in TRANSACTIONS for p in ("app1->db", "db->app1")}
    assert {r["verdict"] for r in rows} == {"agree"}
    truth = {"single": 1, "sequential": 2, "ViewItem": 2, "async": 0}
    for r in rows:
        assert set(r) >= {"transaction", "link", "gradient", "ci95", "passive_gradient",
                          "passive_ci95", "snap", "hosts", "verdict", "cause"}
        assert r["link"] in ("tcp app1:0 -> db:5432", "tcp db:5432 -> app1:0")
        # the paths' count, and the calibrated estimate around it, wider
        assert r["crossings"] == pytest.approx(truth[r["transaction"]], abs=0.06)
        lo, hi = r["crossings_ci95"]
        assert lo <= r["crossings"] <= hi
        plo, phi = r["passive_ci95"]
        assert plo < lo
        assert phi > hi
        assert plo <= r["passive_gradient"] <= phi
        # both halves agree: one estimate, no wider than the measurement
        clo, chi = r["combined_ci95"]
        assert clo <= r["combined"] <= chi
        assert chi - clo <= r["ci95"][1] - r["ci95"][0] + 1e-4  # 4 decimals kept
        assert r["cause"] is None
    summary = out["summary"]
    assert summary["injected_links"] == 2
    assert summary["verdicts"] == {"agree": 8}
    assert summary["calibration"].startswith("shipped (")
    assert summary["traced_requests"]["ViewItem"] == 292
    assert any(f.startswith("async: no link matters") for f in summary["findings"])
    assert "linkgrad predict" in summary["next_step"]


def test_the_text_ends_with_the_next_step_and_fits_80_columns(tmp_path, capsys):
    assert main(["explain", str(_run_dir(tmp_path))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 80
    assert lines[0].startswith("testbed-quick: completed in 96 s on 6 hosts; 2 of 2 links")
    assert any(line.split()[:2] == ["app1->db", "2.01"] for line in lines)  # ViewItem
    assert any(line.startswith("next: predict a move") for line in lines)


def test_without_paths_every_gradient_is_active_only_and_the_summary_says_so(tmp_path,
                                                                            capsys):
    out = _json(capsys, str(_run_dir(tmp_path, paths=False)))
    assert {r["verdict"] for r in out["rows"]} == {"active-only"}
    assert all(r["passive_gradient"] is None for r in out["rows"])
    assert "no causal paths: each gradient stands without a passive check" in (
        out["summary"]["findings"])


def test_a_paths_file_that_cannot_be_read_is_left_out_and_named(tmp_path, capsys):
    run = _run_dir(tmp_path)
    (run / "paths.json").write_text('{"linker": "context"')
    out = _json(capsys, str(run))
    assert {r["verdict"] for r in out["rows"]} == {"active-only"}
    assert any(f.startswith("left out: ") and "paths.json" in f
               for f in out["summary"]["findings"])


def test_a_directory_that_is_no_run_is_refused_naming_what_is_missing(tmp_path, capsys):
    assert main(["explain", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no experiment.json: not a linkgrad run directory" in err
    assert str(tmp_path) in err

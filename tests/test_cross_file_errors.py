"""A mistake found by comparing two inputs is reported where it is, naming the other input
(issue 13's fuzz campaign: `exit2_unnamed` named only the file it was found in); and
`route --nginx --json` prints strict JSON carrying the map."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.cli.main import main
from tests.test_prediction import _run_dir

SITES = ("sites: {web: here, app1: here, db: here}\n"
         "latency_ms: {here<->here: 0.1, here<->east: 20.1, east<->east: 0.1,"
         " here<->west: 30.0}\n")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = _run_dir(tmp_path)
    (d / "sites.yaml").write_text(SITES)
    return d


def _route(d: Path, *extra: str) -> list[str]:
    return ["route", "--gradients", str(d / "gradients.json"), "--latencies",
            str(d / "sites.yaml"), "--component", "db", *extra]


# --------------------------------------------------------------------------- route --nginx


def test_route_nginx_with_json_is_the_json_with_the_map_as_a_string(run_dir, capsys):
    experiment = json.loads((run_dir / "experiment.json").read_text())
    experiment["transactions"] = {"ViewItem": "^/view", "async": "^/async"}
    (run_dir / "experiment.json").write_text(json.dumps(experiment))
    code, plain, _ = _run(capsys, *_route(run_dir, "--copies", "here", "east", "--json"))
    assert code == 0
    code, out, _ = _run(capsys, *_route(run_dir, "--copies", "here", "east", "--json",
                                        "--nginx", "db_here", "db_east"))
    assert code == 0
    data = json.loads(out)  # one strict JSON value, no nginx text around it
    assert data.pop("nginx_map").startswith("# linkgrad route")
    assert data == json.loads(plain)
    code, text, _ = _run(capsys, *_route(run_dir, "--copies", "here", "east",
                                         "--nginx", "db_here", "db_east"))
    assert code == 0
    assert text == json.loads(out)["nginx_map"]  # without --json: the map alone, as before
    assert '"~^/view" db_here;' in text

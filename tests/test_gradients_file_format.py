"""`gradients.json` is read and written by one typed model and stays byte-compatible: each
stored file (a real testbed run, and fake runs with adaptive cycles, several delays and a
load-level split) read back and written again is the same bytes. A change that adds a field
updates these files on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.cli.main import main
from coordinator.config.run_dir import RunDir, read_measurements

STORED = sorted((Path(__file__).parent / "data" / "runs").glob("*/gradients.json"))


def test_the_stored_files_cover_every_shape() -> None:
    text = "\n".join(p.read_text() for p in STORED)
    for shape in ('"adaptive": {', '"planned_ms"', '"level_ratio"', '"snap": {',
                  '"linearity": [\n    {'):
        assert shape in text, shape


@pytest.mark.parametrize("stored", STORED, ids=lambda p: p.parent.name)
def test_read_and_written_again_it_is_the_same_bytes(stored: Path, tmp_path: Path) -> None:
    links = read_measurements(stored)
    RunDir(tmp_path).write_measurements(json.loads(stored.read_text())["experiment"], links)
    assert (tmp_path / "gradients.json").read_bytes() == stored.read_bytes()


def test_the_offline_estimate_prints_the_same_json(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`linkgrad gradient --json` on the shipped example prints the bytes stored before the
    typed model replaced the dicts (the command's other fields included)."""
    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    log_format = (root / "experiments" / "example" / "log_format.txt").read_text().strip()
    code = main(["gradient", "--log", "experiments/example/access.log.gz", "--log-format",
                 log_format, "--injection", "experiments/example/injection.json", "--json"])
    assert code == 0
    stored = Path(__file__).parent / "data" / "example-gradient.json"
    assert capsys.readouterr().out == stored.read_text()

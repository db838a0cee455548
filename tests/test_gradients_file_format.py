"""`gradients.json` is read and written by one typed model and stays byte-compatible: each
stored file (a real testbed run, and fake runs with adaptive cycles, several delays and a
load-level split) read back and written again is the same bytes. A change that adds a field
updates these files on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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

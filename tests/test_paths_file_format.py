"""`paths.json` and `linkgrad paths --json` are written from one typed value (`PathsResult`)
and read back into it, byte-compatible: each stored file (a real testbed run's; a synthetic
server with a hidden worker, linked over its budget, its client untraced; `linkgrad paths` on
a cut of the testbed's trace), all written before the typed model, read back and written again
is the same bytes. A change that adds a field updates these files on purpose."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest

import linkgrad.paths.analysis
from coordinator.cli.main import main
from coordinator.cli.paths_report import html_section, read_paths
from coordinator.config.paths_file import read_paths_file
from coordinator.config.run_dir import RunDir
from linkgrad.errors import InputError
from linkgrad.paths.budget import Budget

DATA = Path(__file__).parent / "data"
STORED = sorted([*(DATA / "runs").glob("*/paths.json"), DATA / "paths" / "hidden-worker.json"])
PRINTED = DATA / "paths" / "trace-paths.json"  # `linkgrad paths --json`: its JSON, a newline


def test_the_stored_files_cover_every_shape() -> None:
    text = "\n".join(p.read_text() for p in [*STORED, PRINTED])
    for shape in ('"fallbacks": [\n    {', '"folded": [\n    {', '"clock_offset_s": null',
                  '"response_s": null', '"node_delay_s": null', '"transactions": {\n    "',
                  '"window": [', '"client_requests": ', '"problems": [\n    "', '"at": '):
        assert shape in text, shape


@pytest.mark.parametrize("stored", STORED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_read_and_written_again_it_is_the_same_bytes(stored: Path, tmp_path: Path) -> None:
    RunDir(tmp_path).write("paths.json", read_paths_file(stored).as_json())
    assert (tmp_path / "paths.json").read_bytes() == stored.read_bytes()


def test_linkgrad_paths_prints_and_saves_the_same_json(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """`linkgrad paths --trace --json` prints the bytes stored before the typed model replaced
    the dicts, and --output writes them too; linking's clock stands still (no time spent,
    nothing cut) and the command ends at a fixed time, as when they were stored."""
    monkeypatch.setattr(linkgrad.paths.analysis, "Budget",
                        functools.partial(Budget, clock=lambda: 0.0))
    monkeypatch.setattr(time, "time", lambda: 1795906500.25)
    assert main(["paths", "--trace", str(DATA / "paths" / "trace.jsonl"), "--json",
                 "--output", str(tmp_path / "paths.json")]) == 0
    assert capsys.readouterr().out == PRINTED.read_text()
    assert (tmp_path / "paths.json").read_text() + "\n" == PRINTED.read_text()
    assert read_paths_file(tmp_path / "paths.json") == read_paths_file(PRINTED)


def test_the_report_reads_a_run_s_paths(tmp_path: Path) -> None:
    paths = read_paths(DATA / "runs" / "testbed-quick")
    assert paths is not None
    assert paths.matched_requests == 1158
    section = "\n".join(html_section(paths, []))
    assert "8207 messages in the passive phase, linked by context; 1158 of 1178" in section
    assert section.count("<svg") == len(paths.transactions)
    assert read_paths(tmp_path) is None


def test_a_wrong_field_is_named(tmp_path: Path) -> None:
    text = (DATA / "paths" / "hidden-worker.json").read_text()
    (tmp_path / "paths.json").write_text(text.replace('"roots": 69', '"roots": "many"', 1))
    with pytest.raises(InputError, match=r"paths.json: field 'roots'"):
        read_paths(tmp_path)


def test_a_run_s_older_paths_json_still_reads(tmp_path: Path) -> None:
    """Before the budget (11-27) and the transactions' request counts (11-24), paths.json had
    neither, nor its hops' reply (12-05): the report still shows its paths."""
    import json

    data = json.loads((DATA / "runs" / "testbed-quick" / "paths.json").read_text())
    for later in ("transaction_requests", "duration_s", "budget", "fallbacks", "folded"):
        data.pop(later)
    for pattern in [*data["patterns"], *(p for ps in data["transactions"].values() for p in ps)]:
        for hop in pattern["hops"]:
            hop.pop("reply")  # (12-05)
    (tmp_path / "paths.json").write_text(json.dumps(data))
    paths = read_paths(tmp_path)
    assert paths is not None
    assert paths.budget is None
    assert "linked by context" in "\n".join(html_section(paths, []))
    assert {h.reply for p in paths.patterns for h in p.hops} == {None}

"""A saved trace (`paths --output-trace`, a run's paths-trace.jsonl) is a file a user hands
back: each value is checked, and a wrong one is said with its line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.config.trace_file import read_trace
from linkgrad.errors import InputError

GOOD = ["10.0.0.1", 40000, "10.0.0.2", 80, True, 100, 118, 1795000000.0, 1795000000.0,
        False, "python", 7]


def _trace(tmp_path: Path, host_line: str | bytes) -> Path:
    path = tmp_path / "t.jsonl"
    head = b'{"format": "linkgrad-trace/1"}\n'
    body = host_line if isinstance(host_line, bytes) else host_line.encode()
    path.write_bytes(head + body + b"\n")
    return path


def _host(record: list) -> str:
    return json.dumps({"host": "a", "addresses": ["10.0.0.1"], "listening": [],
                       "records": [record]})


def test_a_good_line_reads_back(tmp_path):
    (host,) = read_trace(_trace(tmp_path, _host(GOOD)))
    assert host.records[0].thread == 7
    assert host.records[0].remote == ("10.0.0.2", 80)


@pytest.mark.parametrize(("line", "said"), [
    ('{"host": "a", "host": "b", "addresses": [], "listening": [], "records": []}',
     "key 'host' is given twice"),
    (b'{"host": "\xff"}', "not UTF-8 text"),
    ('{"host": "a", "addresses": [], "listening": [], "records": [[' + "9" * 5000 + "]]}",
     "not valid JSON"),
    (_host([0.0, *GOOD[1:]]), "field 'records.0'"),
    (_host([*GOOD[:7], 1e308, *GOOD[8:]]), "expected unix seconds"),
    (_host(GOOD[:5]), "5 fields"),
    (_host([GOOD[0], 70000, *GOOD[2:]]), "port 70000"),
    (_host([*GOOD[:4], 1, *GOOD[5:]]), "expected true or false"),
    (_host([*GOOD[:5], -1, *GOOD[6:]]), "sequence number -1"),
    ('{"host": 5, "addresses": [], "listening": [], "records": []}', "field 'host'"),
    ('{"host": "a", "addresses": "x", "listening": [], "records": []}', "field 'addresses'"),
    ("[1, 2]", "expected a JSON object"),
])
def test_a_wrong_value_is_said_with_its_line(tmp_path, line, said):
    path = _trace(tmp_path, line)
    with pytest.raises(InputError) as e:
        list(read_trace(path))
    assert said in str(e.value)
    assert f"{path}" in str(e.value)
    assert ":2" in str(e.value) or "UTF-8" in str(e.value)


def test_a_trace_longer_than_linking_takes_is_said(tmp_path, capsys):
    """One host's clock hours off (or a day of tcpdump): exit 2 naming the trace, not an
    internal error from the linking's index."""
    from coordinator.cli.main import main

    lines = (Path(__file__).parent / "data" / "paths" / "trace.jsonl").read_text().splitlines()
    host = json.loads(lines[2])
    for r in host["records"]:
        r[7], r[8] = r[7] + 20_000, r[8] + 20_000
    lines[2] = json.dumps(host)
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert main(["paths", "--trace", str(path)]) == 2
    assert f"{path}: the trace spans 20,0" in capsys.readouterr().err

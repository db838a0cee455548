"""The injection record contract: valid records load, bad ones name file, line and field."""

import json

import pytest

from linkgrad.errors import InputError
from linkgrad.protocol.record import load_injection_record, parse_injection_record

GOOD = {"start": 1795000000.5, "period_s": 40, "cycles": 6, "magnitude_ms": 30.2}


def test_valid_record_becomes_a_square_wave_in_seconds():
    record = parse_injection_record(json.dumps({**GOOD, "n_bins": 48, "link": "a->b"}))
    wave = record.square_wave()
    assert (wave.start_s, wave.period_s, wave.cycles) == (1795000000.5, 40, 6)
    assert wave.magnitude_s == pytest.approx(0.0302)
    assert record.n_bins == 48


def test_every_problem_is_reported_with_line_and_field(tmp_path):
    text = '{\n  "start": 1795000000,\n  "period_s": -4,\n  "cycles": 6,\n  "magnitud_ms": 30\n}\n'
    path = tmp_path / "inj.json"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_injection_record(path)
    message = str(err.value)
    assert f"{path}:3: field 'period_s'" in message
    assert f"{path}:5: field 'magnitud_ms' unknown field" in message
    assert "field 'magnitude_ms' Field required" in message
    assert err.value.exit_code == 2


def test_broken_json_names_its_line(tmp_path):
    path = tmp_path / "inj.json"
    path.write_text('{\n  "start": 1,\n  "cycles": ,\n}')
    with pytest.raises(InputError, match=r"inj.json:3: not valid JSON"):
        load_injection_record(path)


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"cannot read \(injection record\)"):
        load_injection_record(tmp_path / "nope.json")


@pytest.mark.parametrize(("text", "expected"), [
    ('{"start": 1795000000.0, "start": 1795000001.0, "period_s": 40, "cycles": 6, '
     '"magnitude_ms": 30}', "key 'start' is given twice"),
    ('{"start": 1795000000.0, "period_s": Infinity, "cycles": 6, "magnitude_ms": 30}',
     "Infinity"),
    ('{"start": 1795000000.0, "period_s": 40, "cycles": 6, "magnitude_ms": 1e999}', "1e999"),
    ('{"start": 1795000000.0, "period_s": 40, "cycles": true, "magnitude_ms": 30}',
     "field 'cycles'"),
    ('{"start": 1795000000.0, "period_s": 40, "cycles": 6, "magnitude_ms": "30"}',
     "field 'magnitude_ms'"),
    ('{"start": 1795000000.0, "period_s": 40, "cycles": 6, "magnitude_ms": 30, "link": '
     + "[" * 10_000 + "]" * 10_000 + "}", "nested too deeply"),
])
def test_records_are_strict_json_of_strict_types(tmp_path, text, expected):
    """Found by benchmarks/fuzz_cli.py: `--concurrent` took the last of two `start`s, and a
    record's `true` or "30" was read as a number (issue 13)."""
    path = tmp_path / "inj.json"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_injection_record(path)
    assert str(path) in str(err.value)
    assert expected in str(err.value)


def test_a_record_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "inj.json"
    path.write_bytes(b'{"start": 1795000000.0,\n "link": "\xff"}')
    with pytest.raises(InputError, match=r"inj.json:2: not UTF-8"):
        load_injection_record(path)

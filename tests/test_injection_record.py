"""The injection record contract: valid records load, bad ones name file, line and field."""

import json

import pytest

from common.errors import InputError
from common.protocol.record import load_injection_record, parse_injection_record

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
    with pytest.raises(InputError, match="cannot read injection record"):
        load_injection_record(tmp_path / "nope.json")

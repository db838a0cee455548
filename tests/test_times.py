"""Times in the commands' answers: local ISO 8601 with the zone (pure)."""

import argparse
import time
from pathlib import Path

import pytest

from coordinator.cli.times import local_time, time_value


@pytest.fixture
def berlin_winter(monkeypatch):
    monkeypatch.setenv("TZ", "CET-1")  # POSIX: one hour east of UTC, no tzdata needed
    time.tzset()
    yield
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def test_a_time_is_local_iso_with_its_zone(berlin_winter):
    assert local_time(1_796_458_848.4) == "2026-12-05T09:20:48+01:00"


def test_what_no_date_can_say_is_said_as_the_number():
    assert local_time(1e300) == "unix time 1e+300"
    assert local_time(float("inf")) == "unix time inf"
    assert local_time(None) == "-"
    assert local_time(1.0) == "1970-01-01T00:00:01+00:00"


@pytest.mark.parametrize(("text", "unix_s"), [
    ("1795000000", 1_795_000_000.0), ("1795000000.25", 1_795_000_000.25),
    ("2026-11-18T11:06:40+00:00", 1_795_000_000.0), ("2026-11-18T11:06:40Z", 1_795_000_000.0),
    ("2026-11-18T12:06:40+01:00", 1_795_000_000.0),
])
def test_a_time_asked_is_unix_seconds_or_iso(text, unix_s):
    assert time_value(text) == unix_s


def test_an_iso_time_without_a_zone_is_local(berlin_winter):
    assert time_value("2026-11-18T12:06:40") == 1_795_000_000.0


@pytest.mark.parametrize("text", ["yesterday", "nan", "inf", "2026-13-01T00:00:00", ""])
def test_what_is_no_time_is_the_option_s_error(text):
    with pytest.raises(argparse.ArgumentTypeError):
        time_value(text)


def test_gradient_takes_its_baseline_end_as_iso(capsys, monkeypatch):
    from coordinator.cli.main import main

    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    fmt = (root / "experiments" / "example" / "log_format.txt").read_text().strip()
    argv = ["gradient", "--log", "experiments/example/access.log.gz", "--log-format", fmt,
            "--injection", "experiments/example/injection.json", "--json"]
    assert main([*argv, "--baseline-end", "2026-11-18T10:06:40Z"]) == 0
    by_iso = capsys.readouterr().out
    assert main([*argv, "--baseline-end", str(1_795_000_000 - 3600)]) == 0
    assert capsys.readouterr().out == by_iso
    assert main([*argv, "--baseline-end", "soon"]) == 2
    assert "expected unix seconds or ISO 8601" in capsys.readouterr().err

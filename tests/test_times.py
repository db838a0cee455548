"""Times in the commands' answers: local ISO 8601 with the zone (pure)."""

import time

import pytest

from coordinator.cli.times import local_time


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

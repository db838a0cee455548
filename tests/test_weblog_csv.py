"""CSV request logs: start_unix_s,response_ms,url (pure, no files)."""

from __future__ import annotations

import pytest
from numpy.testing import assert_allclose, assert_array_equal

from common.errors import InputError
from coordinator.core.weblog.csvlog import parse_csv


def parse(*lines: str):
    return parse_csv([line + "\n" for line in lines], "requests.csv")


@pytest.mark.parametrize("header", [True, False])
def test_with_and_without_header(header: bool) -> None:
    rows = ["100.5,250,/a", "101.25,1.5,/b?x=1"]
    log = parse(*(["start_unix_s,response_ms,url"] if header else []), *rows)
    assert_array_equal(log.start_s, [100.5, 101.25])
    assert_allclose(log.response_s, [0.25, 0.0015], rtol=1e-12)
    assert_array_equal(log.url, ["/a", "/b?x=1"])
    assert log.malformed.count == 0
    assert log.malformed.total == 2


def test_quoted_url_with_commas() -> None:
    log = parse('1,2,"/search?q=a,b,c"', '3,4,"/say ""hi"""')
    assert_array_equal(log.url, ["/search?q=a,b,c", '/say "hi"'])


def test_header_names_the_columns() -> None:
    log = parse("url, Response_ms ,start_unix_s,host", "/x,20,7.5,h1")
    assert_array_equal(log.start_s, [7.5])
    assert_allclose(log.response_s, [0.02], rtol=1e-12)
    assert_array_equal(log.url, ["/x"])


def test_header_missing_a_column_is_input_error() -> None:
    with pytest.raises(InputError) as info:
        parse("", "start_unix_s,url", "1,/x")
    (problem,) = info.value.problems
    assert (problem.file, problem.line, problem.field) == ("requests.csv", 2, "header")
    assert "lacks response_ms" in problem.message


def test_malformed_rows_are_counted_with_reasons() -> None:
    log = parse(
        "1,10,/ok",
        "2,-5,/neg",
        "x,10,/nan-start",
        "3,10,/a,b",
        "",
        "4,nan,/n",
        "5,10,",
        "6,10,/ok2",
    )
    assert_array_equal(log.url, ["/ok", "/ok2"])
    assert log.malformed.count == 5
    assert log.malformed.total == 7
    assert log.malformed.examples == (
        (2, "negative response time '-5' in response_ms"),
        (3, "unparsable number 'x' in start_unix_s"),
        (4, "expected 3 fields, found 4 (quote URLs with commas)"),
        (6, "'nan' in response_ms is not a finite number"),
        (7, "empty url"),
    )


def test_blank_lines_are_ignored() -> None:
    log = parse("", "  ", "1,2,/a", "")
    assert len(log) == 1
    assert log.malformed.total == 1


@pytest.mark.parametrize(
    ("starts", "resolution"),
    [(("100", "101"), 1.0), (("100.5", "101.125"), 0.001), (("100.000001", "101"), 1e-6)],
)
def test_time_resolution_from_the_start_column(starts: tuple[str, str], resolution: float) -> None:
    log = parse(*(f"{s},1,/a" for s in starts))
    assert log.time_resolution_s == resolution

"""CSV request logs: start_unix_s,response_ms,url (pure, no files)."""

from __future__ import annotations

import pytest
from numpy.testing import assert_allclose, assert_array_equal

from linkgrad.errors import InputError
from linkgrad.weblog.csvlog import parse_csv


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


def test_reasons_are_counted_by_name() -> None:
    log = parse("1,10,/ok", "2,-5,/neg", "x,10,/a", "3,10,/a,b", "4,nan,/n", "5,10,", "6,1,/ok")
    assert dict(log.malformed.by_reason) == {
        "negative response time": 1, "unparsable time stamp": 1, "wrong number of fields": 1,
        "unparsable response time": 1, "empty url": 1}
    assert sum(n for _, n in log.malformed.by_reason) == log.malformed.count


def test_an_unclosed_quote_counts_every_line_it_swallows() -> None:
    """The csv module reads on to the next quote: those lines were lost without a count."""
    log = parse("1,10,/a", '2,10,"/b', "3,10,/c", "4,10,/d")
    assert_array_equal(log.url, ["/a"])
    assert log.malformed.count == 3
    assert log.malformed.total == 4
    assert log.malformed.examples == ((2, "a quoted field runs over lines 2-4"),)


def test_a_field_over_the_csv_limit_is_one_malformed_line() -> None:
    log = parse("1,10,/a", "2,10,/" + "x" * 200_000, "3,10,/c")
    assert_array_equal(log.url, ["/a", "/c"])
    assert log.malformed.by_reason == (("wrong number of fields", 1),)
    assert log.malformed.examples[0][0] == 2
    assert "field larger than field limit" in log.malformed.examples[0][1]


def test_out_of_range_values_are_malformed() -> None:
    log = parse("1795000000,10,/ok", "1795000000000,10,/ms", "-5,10,/neg", "1795000001,1e12,/slow")
    assert_array_equal(log.url, ["/ok"])
    assert dict(log.malformed.by_reason) == {"time stamp out of range": 2,
                                             "response time out of range": 1}
    assert [line for line, _ in log.malformed.examples] == [2, 3, 4]


def test_bytes_that_are_not_utf8_are_malformed() -> None:
    log = parse("1,10,/a", "2,10,/caf\udce9")  # how surrogateescape decodes b"\xe9"
    assert_array_equal(log.url, ["/a"])
    assert log.malformed.by_reason == (("bytes that are not UTF-8", 1),)


def test_equal_urls_share_one_string() -> None:
    log = parse(*(f"{i},1,/same?q=1" for i in range(5)))
    assert len({id(u) for u in log.url}) == 1


def test_an_unclosed_quote_over_blank_lines_still_counts_them() -> None:
    log = parse("1,10,/a", '"', "", "  ", "")
    assert log.malformed.count == 4
    assert log.malformed.examples == ((2, "a quoted field runs over lines 2-5"),)

"""nginx log_format compilation and line parsing (pure, no files)."""

from __future__ import annotations

import pytest
from numpy.testing import assert_allclose, assert_array_equal

from linkgrad.errors import InputError
from linkgrad.weblog.nginx_format import DEFAULT_LOG_FORMAT, compile_nginx
from linkgrad.weblog.textlog import parse_lines

T0 = 1_795_341_601  # 22/Nov/2026:10:00:01 +0000


def parse(log_format: str | None, *lines: str):
    return parse_lines([line + "\n" for line in lines], compile_nginx(log_format), "test.log")


def test_default_format_is_combined_plus_request_time() -> None:
    assert DEFAULT_LOG_FORMAT == (
        '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
        '"$http_referer" "$http_user_agent" $request_time'
    )


def test_default_format_line_starts_at_stamp_minus_request_time() -> None:
    log = parse(
        None,
        '10.0.0.1 - alice [22/Nov/2026:10:00:01 +0000] "GET /cart?item=4 HTTP/1.1" 200 512 '
        '"http://ref/x" "Mozilla/5.0 (X11; Linux)" 0.250',
    )
    assert_allclose(log.start_s, [T0 - 0.25], rtol=0, atol=1e-9)
    assert_allclose(log.response_s, [0.25], rtol=0, atol=1e-12)
    assert_array_equal(log.url, ["/cart?item=4"])
    assert log.time_resolution_s == 1.0
    assert log.malformed.count == 0


def test_msec_end_stamp_moved_back_by_request_time() -> None:
    log = parse('$msec $request_time "$request"', '100.5 0.25 "GET /a HTTP/1.1"')
    assert_allclose(log.start_s, [100.25], rtol=0, atol=1e-12)
    assert log.time_resolution_s == 0.001


@pytest.mark.parametrize(("offset", "expected"), [("+0000", T0), ("+0100", T0 - 3600)])
def test_time_local_offset(offset: str, expected: int) -> None:
    log = parse("[$time_local] $request_time $request_uri", f"[22/Nov/2026:10:00:01 {offset}] 0 /")
    assert log.start_s[0] == expected


def test_time_local_offsets_3600_s_apart() -> None:
    fmt = "[$time_local] $request_time $request_uri"
    utc = parse(fmt, "[22/Nov/2026:10:00:01 +0000] 0.5 /").start_s[0]
    cet = parse(fmt, "[22/Nov/2026:10:00:01 +0100] 0.5 /").start_s[0]
    west = parse(fmt, "[22/Nov/2026:10:00:01 -0130] 0.5 /").start_s[0]
    assert utc - cet == 3600.0
    assert west - utc == 5400.0


def test_time_iso8601() -> None:
    log = parse("$time_iso8601 $request_time $request_uri", "2026-11-22T11:00:01+01:00 1.5 /x")
    assert log.start_s[0] == T0 - 1.5
    assert log.time_resolution_s == 1.0


def test_impossible_date_is_malformed() -> None:
    log = parse("[$time_local] $request_time $request_uri", "[31/Feb/2026:10:00:01 +0000] 0 /")
    assert len(log) == 0
    assert log.malformed.examples == ((1, "unparsable time stamp '31/Feb/2026:10:00:01 +0000'"),)


def test_finest_stamp_wins_when_two_are_logged() -> None:
    log = parse(
        "[$time_local] $msec $request_time $request_uri",
        "[22/Nov/2026:10:00:01 +0000] 1795341601.750 0.5 /",
    )
    assert_allclose(log.start_s, [T0 + 0.25], rtol=0, atol=1e-6)
    assert log.time_resolution_s == 0.001


@pytest.mark.parametrize(
    ("log_format", "line", "url"),
    [
        ('$msec $request_time "$request"', '1.0 0 "GET /p?q=1 HTTP/1.1"', "/p?q=1"),
        ('$msec $request_time "$request"', '1.0 0 "POST /p HTTP/2.0"', "/p"),
        ('$msec $request_time "$request"', '1.0 0 "GET /old"', "/old"),  # HTTP/0.9
        ('$msec $request_time "$request"', '1.0 0 "GET http://h:8080/p?q HTTP/1.1"', "/p?q"),
        ('$msec $request_time "$request"', '1.0 0 "GET https://h HTTP/1.1"', "/"),
        ('$msec $request_time "$request"', '1.0 0 "GET http://h?x=1 HTTP/1.1"', "/?x=1"),
        ("$msec $request_time $request_uri", "1.0 0 /a/b?c=d&e", "/a/b?c=d&e"),
        ("$msec $request_time $uri $args", "1.0 0 /a/b c=d", "/a/b?c=d"),
        ("$msec $request_time $uri $args", "1.0 0 /a/b -", "/a/b"),
        ('$msec $request_time "$uri"', '1.0 0 "/a b"', "/a b"),  # decoded $uri
        ("${msec} ${request_time} ${request_uri}", "1.0 0 /braced", "/braced"),
        ("$msec $request_time $request_uri $request", "1.0 0 /uri GET /req HTTP/1.1", "/uri"),
    ],
)
def test_url_sources(log_format: str, line: str, url: str) -> None:
    log = parse(log_format, line)
    assert_array_equal(log.url, [url])


def test_status_must_be_three_digits() -> None:
    spec = compile_nginx("$msec $request_time $request_uri $status")
    assert spec.regex.match("1.0 0 / 404") is not None
    assert spec.regex.match("1.0 0 / abc") is None


def test_other_variables_match_non_greedily() -> None:
    spec = compile_nginx("$msec $request_time $request_uri $foo $bar")
    m = spec.regex.match("1.0 0 / a b c\n")
    assert m is not None
    assert (m.group("v_foo"), m.group("v_bar")) == ("a", "b c")


def test_quoted_value_with_escaped_quote() -> None:
    log = parse(
        '$msec $request_time "$http_user_agent" "$request"',
        '1.0 0.5 "say \\"hi\\" \\x22" "GET /q HTTP/1.1"',
    )
    assert_array_equal(log.url, ["/q"])


def test_repeated_variable_is_allowed() -> None:
    log = parse("$remote_addr $msec $request_time $request_uri $remote_addr", "a 2.0 1.0 /x a")
    assert log.start_s[0] == 1.0


def test_negative_and_unparsable_request_time_are_malformed() -> None:
    log = parse("$msec $request_time $request_uri", "5.0 -0.5 /a", "5.0 1.2.3 /b", "5.0 0.5 /c")
    assert_array_equal(log.url, ["/c"])
    assert log.malformed.count == 2
    assert log.malformed.total == 3
    assert log.malformed.examples == (
        (1, "negative response time '-0.5' in $request_time"),
        (2, "unparsable number '1.2.3' in $request_time"),
    )


def test_config_file_form() -> None:
    spec = compile_nginx(
        "log_format timed escape=default '$remote_addr [$time_local] '\n"
        "    '\"$request\" $request_time';"
    )
    m = spec.regex.match('1.2.3.4 [22/Nov/2026:10:00:01 +0000] "GET /x HTTP/1.1" 0.1')
    assert m is not None
    assert m.group("path") == "/x"


@pytest.mark.parametrize(
    ("log_format", "missing"),
    [
        ('$remote_addr "$request" $request_time', "time stamp"),
        ('$remote_addr [$time_local] "$request"', "response time"),
        ("$msec $request_time $status", "URL"),
        ("$msec $request_time $args", "URL"),  # $args alone is no URL
    ],
)
def test_missing_field_is_input_error(log_format: str, missing: str) -> None:
    with pytest.raises(InputError) as info:
        compile_nginx(log_format)
    assert len(info.value.problems) == 1
    problem = info.value.problems[0]
    assert problem.field == "--log-format"
    assert f"has no {missing} (use " in problem.message
    assert info.value.exit_code == 2


def test_all_missing_fields_reported_at_once() -> None:
    with pytest.raises(InputError) as info:
        compile_nginx("$remote_addr $status")
    messages = [p.message for p in info.value.problems]
    assert len(messages) == 3
    assert "$time_local, $msec or $time_iso8601" in messages[0]
    assert "$request_time" in messages[1]
    assert "$request, $request_uri or $uri" in messages[2]


def test_dollar_without_name_is_input_error() -> None:
    with pytest.raises(InputError, match=r"'\$' at column 7"):
        compile_nginx("$msec $ $request_time $request_uri")


def test_every_unused_line_is_counted_under_its_reason() -> None:
    log = parse("$msec $request_time $request_uri",
                "5.0 0.5 /ok", "5.0 -0.5 /neg", "5.0 1.2.3 /bad", "x", "5.0 9999999 /month",
                "99999999999999 0.5 /year-5000000", "31.0 0.5 /ok")
    assert_array_equal(log.url, ["/ok", "/ok"])
    assert dict(log.malformed.by_reason) == {
        "negative response time": 1, "unparsable response time": 1,
        "does not match the log format": 1, "response time out of range": 1,
        "time stamp out of range": 1}
    assert log.malformed.count == 5
    assert log.malformed.total == 7
    assert len(log) + log.malformed.count == log.malformed.total


def test_equal_urls_share_one_string() -> None:
    log = parse("$msec $request_time $request_uri", *(f"{i}.0 0.1 /same?q=1" for i in range(5)))
    assert len({id(u) for u in log.url}) == 1

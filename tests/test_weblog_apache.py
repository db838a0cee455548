"""Apache LogFormat compilation and line parsing (pure, no files)."""

from __future__ import annotations

import pytest
from numpy.testing import assert_allclose, assert_array_equal

from linkgrad.errors import InputError
from linkgrad.weblog.apache_format import DEFAULT_LOG_FORMAT, compile_apache
from linkgrad.weblog.textlog import parse_lines

T0 = 1_795_341_601  # 22/Nov/2026:10:00:01 +0000


def parse(log_format: str | None, *lines: str):
    return parse_lines([line + "\n" for line in lines], compile_apache(log_format), "access_log")


def test_default_is_common_plus_microseconds() -> None:
    assert DEFAULT_LOG_FORMAT == '%h %l %u %t "%r" %>s %b %D'


def test_default_line_starts_at_the_stamp() -> None:
    log = parse(
        None, '10.0.0.1 - bob [22/Nov/2026:10:00:01 +0000] "GET /a?b=1 HTTP/1.1" 200 - 250000'
    )
    assert log.start_s[0] == T0
    assert_allclose(log.response_s, [0.25], rtol=0, atol=1e-12)
    assert_array_equal(log.url, ["/a?b=1"])
    assert log.time_resolution_s == 1.0


def test_t_timezone_offset() -> None:
    log = parse(None, 'h - - [22/Nov/2026:10:00:01 +0100] "GET / HTTP/1.1" 200 5 1')
    assert log.start_s[0] == T0 - 3600


@pytest.mark.parametrize(
    ("directive", "stamp", "start", "resolution"),
    [
        ("%{sec}t", "100", 100.0, 1.0),
        ("%{msec}t", "100500", 100.5, 1e-3),
        ("%{usec}t", "100500000", 100.5, 1e-6),
        ("%{begin:msec}t", "100500", 100.5, 1e-3),
        ("%{begin:usec}t", "100500000", 100.5, 1e-6),
        ("%{end:msec}t", "100500", 100.25, 1e-3),
        ("%{end:usec}t", "100500000", 100.25, 1e-6),
        ("%{end:sec}t", "100", 99.75, 1.0),
    ],
)
def test_epoch_stamps_begin_and_end(
    directive: str, stamp: str, start: float, resolution: float
) -> None:
    log = parse(f"{directive} %D %U", f"{stamp} 250000 /x")
    assert_allclose(log.start_s, [start], rtol=0, atol=1e-9)
    assert log.time_resolution_s == resolution


def test_end_stamp_in_clf_strftime_form() -> None:
    log = parse("[%{end:%d/%b/%Y:%H:%M:%S %z}t] %T %U", "[22/Nov/2026:10:00:01 +0000] 2 /x")
    assert log.start_s[0] == T0 - 2


@pytest.mark.parametrize(
    ("directive", "value", "response_s", "resolution"),
    [
        ("%D", "1500", 0.0015, 1e-6),
        ("%T", "3", 3.0, 1.0),
        ("%{s}T", "3", 3.0, 1.0),
        ("%{ms}T", "1500", 1.5, 1e-3),
        ("%{us}T", "1500", 0.0015, 1e-6),
    ],
)
def test_duration_units(directive: str, value: str, response_s: float, resolution: float) -> None:
    log = parse(f"%{{msec}}t {directive} %U", f"100000 {value} /x")
    assert_allclose(log.response_s, [response_s], rtol=1e-12)
    assert log.start_s[0] == 100.0
    assert log.time_resolution_s == max(1e-3, resolution)


def test_finest_duration_wins() -> None:
    log = parse("%{usec}t %T %D %U", "100000000 1 1234567 /x")
    assert_allclose(log.response_s, [1.234567], rtol=1e-12)
    assert log.time_resolution_s == 1e-6


@pytest.mark.parametrize(
    ("log_format", "line", "url"),
    [
        ('%{msec}t %D "%r"', '1 0 "GET /p?q=1 HTTP/1.1"', "/p?q=1"),
        ('%{msec}t %D "%r"', '1 0 "GET http://example.org/p?q HTTP/1.1"', "/p?q"),
        ('%{msec}t %D "%U%q"', '1 0 "/p?a=1&b=2"', "/p?a=1&b=2"),
        ('%{msec}t %D "%U%q"', '1 0 "/p"', "/p"),
        ("%{msec}t %D %U %q", "1 0 /p ?x", "/p?x"),
        ('%{msec}t %D "%U" "%r"', '1 0 "/decoded" "GET /raw HTTP/1.1"', "/raw"),
    ],
)
def test_url_sources(log_format: str, line: str, url: str) -> None:
    assert_array_equal(parse(log_format, line).url, [url])


def test_status_host_bytes_header_and_percent() -> None:
    spec = compile_apache('%h %l %u %t "%r" %s %>s %b "%{Referer}i" %% %X %D')
    line = (
        '10.0.0.1 - - [22/Nov/2026:10:00:01 +0000] "GET / HTTP/1.1" 302 200 1234 '
        '"http://ref/a \\"q\\"" % + 17\n'
    )
    m = spec.regex.match(line)
    assert m is not None
    assert (m.group("v_s"), m.group("v_b"), m.group("v_i_Referer")) == (
        "302",
        "1234",
        'http://ref/a \\"q\\"',
    )
    assert m.group("v_X") == "+"
    assert spec.regex.match(line.replace(" 302 ", " abc ")) is None


def test_other_directive_matches_non_greedily() -> None:
    spec = compile_apache("%{msec}t %D %U %{X-A}o %{X-B}o")
    m = spec.regex.match("1 2 /p a b c")
    assert m is not None
    assert (m.group("v_o_X_A"), m.group("v_o_X_B")) == ("a", "b c")


def test_config_file_forms() -> None:
    bare = compile_apache(r"%h %l %u %t \"%r\" %>s %b %D")
    line = 'LogFormat "%h %l %u %t \\"%r\\" %>s %b %D" timed'
    whole = compile_apache(line)
    assert bare.regex.pattern == whole.regex.pattern == compile_apache(None).regex.pattern


@pytest.mark.parametrize(
    ("log_format", "missing", "hint"),
    [
        ('%h "%r" %D', "time stamp", "%t, %{msec}t, %{usec}t or %{sec}t"),
        ('%h %t "%r"', "response time", "%D, %T, %{ms}T or %{us}T"),
        ("%h %t %D %q", "URL", "%r or %U%q"),
        ('%{%Y-%m-%d}t "%r" %D', "time stamp", "%t"),  # other strftime: not readable
    ],
)
def test_missing_field_is_input_error(log_format: str, missing: str, hint: str) -> None:
    with pytest.raises(InputError) as info:
        compile_apache(log_format)
    (problem,) = info.value.problems
    assert problem.field == "--log-format"
    assert f"has no {missing} (use " in problem.message
    assert hint in problem.message


def test_stray_percent_is_input_error() -> None:
    with pytest.raises(InputError, match="'%' at column 8"):
        compile_apache('%t %D "%')

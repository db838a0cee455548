"""read_log: format choice, gzip, sorting, malformed-line threshold and file errors."""

from __future__ import annotations

import gzip
import random
import re
from pathlib import Path

import pytest
from numpy.testing import assert_allclose, assert_array_equal

from linkgrad.errors import InputError
from linkgrad.weblog import read_log

T0 = 1_795_341_601  # 22/Nov/2026:10:00:01 +0000
MSEC = '$msec $request_time "$request"'


def nginx_line(end_s: float, response_s: float, url: str) -> str:
    return f'{end_s:.3f} {response_s:.3f} "GET {url} HTTP/1.1"\n'


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_default_nginx_format(tmp_path: Path) -> None:
    line = '1.2.3.4 - - [22/Nov/2026:10:00:01 +0000] "GET /x HTTP/1.1" 200 9 "-" "ua" 0.500\n'
    log = read_log(write(tmp_path / "access.log", line))
    assert_allclose(log.start_s, [T0 - 0.5], rtol=0, atol=1e-9)
    assert log.source == str(tmp_path / "access.log")


def test_sorted_by_start_time_stably(tmp_path: Path) -> None:
    # nginx writes in end order; starts are end - response time.
    text = (
        nginx_line(10.0, 1.0, "/a")  # start 9.0
        + nginx_line(10.5, 3.0, "/b")  # start 7.5
        + nginx_line(11.0, 2.0, "/c")  # start 9.0, after /a in the file
        + nginx_line(11.0, 0.5, "/d")  # start 10.5
    )
    log = read_log(write(tmp_path / "a.log", text), "nginx", MSEC)
    assert_array_equal(log.url, ["/b", "/a", "/c", "/d"])
    assert_allclose(log.start_s, [7.5, 9.0, 9.0, 10.5], rtol=0, atol=1e-9)
    assert_allclose(log.response_s, [3.0, 1.0, 2.0, 0.5], rtol=0, atol=1e-12)


def test_apache_stamp_is_the_start(tmp_path: Path) -> None:
    text = (
        'h - - [22/Nov/2026:10:00:02 +0000] "GET /late HTTP/1.1" 200 1 1000\n'
        'h - - [22/Nov/2026:10:00:01 +0000] "GET /early HTTP/1.1" 200 1 2500000\n'
    )
    log = read_log(write(tmp_path / "access_log", text), "apache")
    assert_array_equal(log.start_s, [T0, T0 + 1])
    assert_allclose(log.response_s, [2.5, 0.001], rtol=1e-12)
    assert_array_equal(log.url, ["/early", "/late"])


def test_gzip_nginx_and_csv_by_name(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "access.log.1.gz", "wt") as f:
        f.write(nginx_line(5.0, 1.0, "/gz"))
    log = read_log(tmp_path / "access.log.1.gz", log_format=MSEC)
    assert_array_equal(log.url, ["/gz"])
    assert log.start_s[0] == 4.0
    with gzip.open(tmp_path / "requests.CSV.gz", "wt") as f:
        f.write("start_unix_s,response_ms,url\n3.5,100,/c\n")
    log = read_log(tmp_path / "requests.CSV.gz")
    assert_array_equal(log.url, ["/c"])
    assert log.start_s[0] == 3.5


def test_csv_chosen_by_suffix_and_crlf(tmp_path: Path) -> None:
    log = read_log(write(tmp_path / "r.csv", "2,1,/b\r\n1,1,/a\r\n"))
    assert_array_equal(log.url, ["/a", "/b"])
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(nginx_line(2.0, 1.0, "/n").replace("\n", "\r\n").encode())
    assert_array_equal(read_log(crlf, log_format=MSEC).url, ["/n"])


def test_malformed_lines_counted_below_threshold(tmp_path: Path) -> None:
    lines = [nginx_line(float(i), 0.0, f"/{i}") for i in range(1, 100)]
    lines.insert(41, "garbage\n")
    lines.insert(10, "\n")  # blank: ignored, not malformed
    log = read_log(write(tmp_path / "a.log", "".join(lines)), log_format=MSEC)
    assert len(log) == 99
    assert log.malformed.count == 1
    assert log.malformed.total == 100
    assert log.malformed.examples == ((43, "does not match the log format"),)


def test_first_five_examples_in_line_order(tmp_path: Path) -> None:
    lines = [nginx_line(1.0, 0.0, "/") for _ in range(20)]
    for n in (3, 5, 7):
        lines[n - 1] = "bad\n"
    lines[1] = nginx_line(1.0, 0.0, "/").replace("0.000", "-1.000")
    lines[8] = lines[9] = "also bad\n"
    log = read_log(write(tmp_path / "a.log", "".join(lines)), log_format=MSEC, max_bad_fraction=1)
    assert log.malformed.count == 6
    assert [n for n, _ in log.malformed.examples] == [2, 3, 5, 7, 9]
    assert log.malformed.examples[0] == (2, "negative response time '-1.000' in $request_time")


def test_too_many_malformed_lines_is_input_error(tmp_path: Path) -> None:
    lines = [nginx_line(1.0, 0.0, "/") for _ in range(10)]
    lines[3] = "not a log line\n"
    path = write(tmp_path / "wrongformat.log", "".join(lines))
    with pytest.raises(InputError) as info:
        read_log(path, log_format=MSEC, max_bad_fraction=0.05)
    message = str(info.value)
    assert "wrongformat.log" in message
    assert "first bad lines: 4" in message
    assert "1 of 10 lines (10.0%)" in message
    assert "--format/--log-format may be wrong" in message
    assert "nginx log_format '$msec $request_time \"$request\"'" in message
    assert info.value.problems[1].line == 4
    assert info.value.problems[1].file == str(path)


def test_wrong_format_refused(tmp_path: Path) -> None:
    apache = 'h - - [22/Nov/2026:10:00:01 +0000] "GET / HTTP/1.1" 200 1 1000\n' * 3
    with pytest.raises(InputError, match=r"do not parse as nginx log_format") as info:
        read_log(write(tmp_path / "access.log", apache))  # read as nginx by default
    assert "3 of 3 lines" in str(info.value)


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_empty_log_is_input_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(InputError, match=r"no requests in the log \(the file is empty\)"):
        read_log(write(tmp_path / "empty.log", text))


def test_all_lines_bad_with_threshold_one_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no line parsed"):
        read_log(write(tmp_path / "a.log", "x\n"), max_bad_fraction=1.0)


def test_missing_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        read_log(tmp_path / "nope.log")
    assert info.value.problems[0].file == str(tmp_path / "nope.log")
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"fmt": "iis"}, "--format"),
        ({"fmt": "csv", "log_format": "$msec"}, "--log-format"),
        ({"max_bad_fraction": 1.5}, "--max-bad-fraction"),
        ({"fmt": "apache", "log_format": "%h %t"}, "--log-format"),
    ],
)
def test_bad_arguments_are_input_errors(tmp_path: Path, kwargs: dict, field: str) -> None:
    path = write(tmp_path / "a.log", nginx_line(1.0, 0.0, "/"))
    with pytest.raises(InputError) as info:
        read_log(path, **kwargs)
    assert info.value.problems[0].field == field


def test_status_is_read_when_the_format_has_it(tmp_path):
    nginx = tmp_path / "a.log"
    nginx.write_text(
        '10.0.0.1 - - [22/Nov/2026:10:00:01 +0000] "GET /a HTTP/1.1" 200 5 "-" "x" 0.010\n'
        '10.0.0.1 - - [22/Nov/2026:10:00:02 +0000] "GET /b HTTP/1.1" 499 0 "-" "x" 0.150\n'
        '10.0.0.1 - - [22/Nov/2026:10:00:03 +0000] "GET /c HTTP/1.1" 502 0 "-" "x" 0.020\n'
        '10.0.0.1 - - [22/Nov/2026:10:00:04 +0000] "GET /d HTTP/1.1" 404 0 "-" "x" 0.001\n')
    log = read_log(nginx)
    assert log.status.tolist() == [200, 499, 502, 404]
    assert log.failed().tolist() == [False, True, True, False]  # 404 is the client's own
    assert log.select(log.status != 200).status.tolist() == [499, 502, 404]
    apache = tmp_path / "b.log"
    apache.write_text('10.0.0.1 - - [22/Nov/2026:10:00:01 +0000] "GET /a HTTP/1.1" 503 5 1200\n')
    assert read_log(apache, "apache").status.tolist() == [503]
    no_status = read_log(nginx, log_format='$remote_addr - $remote_user [$time_local] '
                         '"$request" $code $body_bytes_sent "$http_referer" "$http_user_agent" '
                         '$request_time')  # $code: some variable, not the status
    assert no_status.status is None


def test_csv_status_column_is_optional_and_checked(tmp_path):
    with_status = tmp_path / "a.csv"
    with_status.write_text("start_unix_s,response_ms,url,status\n1.0,5,/a,200\n2.0,9,/b,504\n"
                           "3.0,9,/c,OK\n")
    log = read_log(with_status, max_bad_fraction=0.5)
    assert log.status.tolist() == [200, 504]
    assert log.malformed.examples[0] == (4, "status 'OK' is not a three-digit HTTP status")
    plain = tmp_path / "b.csv"
    plain.write_text("1.0,5,/a\n")
    assert read_log(plain).status is None


def _gzip_log(tmp_path: Path, lines: int = 2000) -> bytes:
    text = "".join(nginx_line(10.0 + i, 0.1, f"/p{i % 7}") for i in range(lines))
    return gzip.compress(text.encode())


def test_truncated_gzip_is_input_error_naming_the_file_and_line(tmp_path: Path) -> None:
    data = _gzip_log(tmp_path)
    path = tmp_path / "cut.log.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as info:
        read_log(path, log_format=MSEC)
    (problem,) = info.value.problems
    assert problem.file == str(path)
    assert re.search(r"corrupt or truncated gzip data after line \d+", problem.message)


@pytest.mark.parametrize("seed", range(6))
def test_corrupt_gzip_is_input_error_never_a_zlib_traceback(tmp_path: Path, seed: int) -> None:
    """Bytes flipped in the deflate stream raise zlib.error or (the CRC at the end) OSError:
    each must be exit 2 naming the file."""
    data = bytearray(_gzip_log(tmp_path))
    rng = random.Random(seed)
    for _ in range(4):
        data[rng.randrange(20, len(data) - 8)] ^= 0xFF
    path = tmp_path / "bad.log.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="corrupt or truncated gzip") as info:
        read_log(path, log_format=MSEC, max_bad_fraction=1.0)
    assert info.value.problems[0].file == str(path)


def test_not_a_gzip_file_behind_the_magic_is_input_error(tmp_path: Path) -> None:
    path = write(tmp_path / "x.log", "")
    path.write_bytes(b"\x1f\x8b" + b"not deflate at all")
    with pytest.raises(InputError, match="corrupt or truncated gzip"):
        read_log(path, log_format=MSEC)


def test_a_directory_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory") as info:
        read_log(tmp_path, log_format=MSEC)
    assert info.value.problems[0].file == str(tmp_path)


def test_bytes_that_are_not_utf8_make_their_line_malformed(tmp_path: Path) -> None:
    path = tmp_path / "latin1.log"
    good = nginx_line(5.0, 1.0, "/a").encode()
    path.write_bytes(good + b'6.000 1.000 "GET /caf\xe9 HTTP/1.1"\n' + good)
    log = read_log(path, log_format=MSEC, max_bad_fraction=0.5)
    assert_array_equal(log.url, ["/a", "/a"])
    assert log.malformed.by_reason == (("bytes that are not UTF-8", 1),)
    assert log.malformed.examples == ((2, "bytes that are not UTF-8"),)


def test_utf8_urls_are_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "utf8.log", nginx_line(5.0, 1.0, "/café"))
    assert_array_equal(read_log(path, log_format=MSEC).url, ["/café"])


def test_out_of_range_stamps_are_counted_not_lost(tmp_path: Path) -> None:
    """A stamp in milliseconds where seconds are read puts a request in the year 58000: it was
    dropped with 0 malformed lines counted; now it is malformed, named, and over the
    threshold the log is refused."""
    lines = [nginx_line(1_795_000_000.0 + i, 0.1, "/a") for i in range(10)]
    lines[2] = nginx_line(1_795_000_002_000.0, 0.1, "/ms")
    lines[5] = '1' + '0' * 400 + ' 0.1 "GET /inf HTTP/1.1"\n'  # parses as infinity
    log = read_log(write(tmp_path / "a.log", "".join(lines)), log_format=MSEC,
                   max_bad_fraction=0.5)
    assert len(log) == 8
    assert log.malformed.by_reason == (("time stamp out of range", 2),)
    assert [line for line, _ in log.malformed.examples] == [3, 6]
    assert len(log.malformed.examples[1][1]) < 250  # the 401-digit stamp is cut in the message
    with pytest.raises(InputError, match="2 time stamp out of range"):
        read_log(tmp_path / "a.log", log_format=MSEC)


@pytest.mark.parametrize("suffix", [".log", ".csv", ".log.gz"])
def test_an_endless_line_is_input_error_naming_its_line(tmp_path: Path, monkeypatch,
                                                        suffix: str) -> None:
    """Found by benchmarks/fuzz_cli.py (issue 13): a log that is /dev/zero (or a core dump)
    is one endless line, read whole until MemoryError; past the cap it is an error at its
    line, and lines up to the cap are read as before."""
    monkeypatch.setattr("linkgrad.weblog.read.MAX_LINE_CHARS", 1000)
    if suffix == ".csv":
        good, long = "1795341601.0,500,/x\n", "1795341602.0,500,/" + "y" * 1000 + "\n"
    else:
        good = nginx_line(T0, 0.5, "/x")
        long = nginx_line(T0, 0.5, "/" + "y" * 1000)
    path = tmp_path / f"access{suffix}"
    text = good * 3 + long + good
    if suffix.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    with pytest.raises(InputError, match=rf"access{re.escape(suffix)}:4: longer than"):
        read_log(path, None, None if suffix == ".csv" else MSEC)
    path.write_text(good * 3 + nginx_line(T0, 0.5, "/" + "y" * 900) if suffix != ".csv"
                    else good * 3 + "1795341602.0,500,/" + "y" * 900 + "\n")
    assert len(read_log(path, None, None if suffix == ".csv" else MSEC).start_s) == 4


def test_dev_zero_as_a_log_is_input_error(tmp_path: Path) -> None:
    (tmp_path / "zero.log").symlink_to("/dev/zero")
    with pytest.raises(InputError, match=r"zero.log:1: longer than 16 MiB"):
        read_log(tmp_path / "zero.log", "nginx", MSEC)

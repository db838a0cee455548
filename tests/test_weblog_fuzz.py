"""Property-based tests: web logs in, gradients out, fed what a hostile or careless user would.

Every parser (nginx, Apache, CSV, the text-log reader, the file reader with gzip) must turn any
input into requests plus malformed lines counted under a named reason, or an InputError: never
another exception, and never a line lost without a count. The estimator's entry points, fed
degenerate request sets (one time stamp, nothing during the injection, only the on halves...),
must give an estimate or a note, never a traceback, and `linkgrad gradient --json` must print
strict JSON with exit 0 or 2.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import math
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.cli.main import main
from linkgrad.errors import InputError
from linkgrad.spectral.estimate import (
    GradientSettings,
    log_gradients,
    shared_periodic_noise_hz,
)
from linkgrad.spectral.lockin import lockin_gradient
from linkgrad.spectral.planner import probe_noise
from linkgrad.spectral.result import GradientResult
from linkgrad.square_wave import SquareWave
from linkgrad.weblog import RequestLog, read_log
from linkgrad.weblog.apache_format import compile_apache
from linkgrad.weblog.csvlog import parse_csv
from linkgrad.weblog.model import MAX_RESPONSE_S, MAX_START_S, MIN_START_S
from linkgrad.weblog.nginx_format import compile_nginx
from linkgrad.weblog.textlog import parse_lines

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
T = TypeVar("T")
NGINX = compile_nginx()  # combined + $request_time, $time_local (an end stamp)
APACHE = compile_apache()  # common + %D, %t (a start stamp)


def attempt(call: Callable[..., T], *args: object) -> tuple[T | None, InputError | None]:
    """The call's result, or the InputError it raised (any other exception fails the test)."""
    try:
        return call(*args), None
    except InputError as e:
        return None, e


def assert_accounted(log: RequestLog, good: int, bad: int) -> None:
    """Every good line became a request, every bad one is counted under a named reason, and
    what was kept is sane."""
    m = log.malformed
    assert len(log) == good
    assert m.count == bad
    assert m.total == good + bad
    assert sum(n for _, n in m.by_reason) == m.count
    assert len(m.examples) == min(5, m.count)
    assert all(len(detail) < 400 for _, detail in m.examples)
    assert np.all((log.start_s >= MIN_START_S) & (log.start_s <= MAX_START_S))
    assert np.all((log.response_s >= 0) & (log.response_s <= MAX_RESPONSE_S))
    assert all(isinstance(u, str) for u in log.url)


# -- pieces of log lines -------------------------------------------------------------------

URL_CHARS = st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters='"\\') | \
    st.sampled_from("éü中😀")
urls = st.builds(lambda path, long: "/" + path + "x" * long,
                 st.text(URL_CHARS, max_size=30), st.sampled_from([0, 0, 0, 9000]))
agents = st.text(st.characters(exclude_characters='"\\\n\r', exclude_categories=["Cs"]),
                 max_size=40)
# stamps between 1971 and 9998, every time zone nginx can write
stamps = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(9998, 1, 1),
                      timezones=st.builds(lambda m: timezone(timedelta(minutes=m)),
                                          st.integers(-23 * 60, 23 * 60)))
good_seconds = st.floats(0, 1e6, allow_nan=False)
bad_durations = st.sampled_from(["-0.5", "9999999.000", "1.2.3", "1" + "0" * 400, ".", "-"])
garbage = st.text(min_size=1, max_size=200).filter(lambda s: s.strip() and "\n" not in s)


def clf(when: datetime) -> str:
    return when.strftime("%d/%b/%Y:%H:%M:%S %z")


def nginx_line(when: datetime | str, duration: str, url: str, agent: str) -> str:
    stamp = when if isinstance(when, str) else clf(when)
    return f'10.0.0.1 - - [{stamp}] "GET {url} HTTP/1.1" 200 512 "-" "{agent}" {duration}'


def apache_line(when: datetime, duration: str, url: str) -> str:
    return f'10.0.0.1 - - [{clf(when)}] "GET {url} HTTP/1.1" 200 512 {duration}'


@st.composite
def nginx_lines(draw: st.DrawFn) -> tuple[list[str], int, int]:
    """(lines, good, bad): a mix of good lines and lines wrong in one way each."""
    lines, good, bad = [], 0, 0
    for _ in range(draw(st.integers(0, 20))):
        kind = draw(st.sampled_from(["good", "good", "duration", "date", "garbage",
                                     "undecoded", "blank"]))
        when, url, agent = draw(stamps), draw(urls), draw(agents)
        if kind == "good":
            lines.append(nginx_line(when, f"{draw(good_seconds):.3f}", url, agent))
        elif kind == "duration":
            lines.append(nginx_line(when, draw(bad_durations), url, agent))
        elif kind == "date":  # the right shape, an impossible day
            lines.append(nginx_line("31/Feb" + clf(when)[6:], "0.1", url, agent))
        elif kind == "garbage":
            lines.append(draw(garbage))
        elif kind == "undecoded":  # a byte that is not UTF-8, as surrogateescape reads it
            lines.append(nginx_line(when, "0.1", url + "\udce9", agent))
        else:
            lines.append(draw(st.sampled_from(["", " ", "\t"])))
        good += kind == "good"
        bad += kind not in ("good", "blank")
    return [line + "\n" for line in lines], good, bad


@FAST
@given(nginx_lines())
def test_nginx_lines_are_requests_or_counted(case: tuple[list[str], int, int]) -> None:
    lines, good, bad = case
    assert_accounted(parse_lines(lines, NGINX, "access.log"), good, bad)


@FAST
@given(st.lists(st.tuples(stamps, st.one_of(st.integers(0, 10**16).map(str),
                                            st.sampled_from(["-5", "1.2.3", ".", "-", ""])),
                          urls), max_size=30))
def test_apache_lines_are_requests_or_counted(rows: list[tuple[datetime, str, str]]) -> None:
    lines = [apache_line(when, duration, url) + "\n" for when, duration, url in rows]
    good = sum(d.isdigit() and int(d) <= MAX_RESPONSE_S * 1e6 for _, d, _ in rows)  # %D: µs
    assert_accounted(parse_lines(lines, APACHE, "access_log"), good, len(rows) - good)


@FAST
@given(st.lists(st.text(max_size=300), max_size=30))
def test_any_text_through_the_text_log_reader(lines: list[str]) -> None:
    for spec in (NGINX, APACHE):
        log = parse_lines(lines, spec, "any.log")
        nonblank = sum(bool(line) and not line.isspace() for line in lines)
        assert_accounted(log, len(log), nonblank - len(log))


@FAST
@given(st.text(max_size=120))
def test_any_format_string_compiles_or_is_input_error(text: str) -> None:
    for compile_format in (compile_nginx, compile_apache):
        spec, error = attempt(compile_format, text)
        if error is not None:
            assert {p.field for p in error.problems} == {"--log-format"}
        else:
            assert spec is not None
            parse_lines(["whatever\n"], spec, "x.log")


# -- CSV -----------------------------------------------------------------------------------

def csv_text(cells: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


csv_urls = urls.filter(lambda u: u.strip() == u)
bad_csv_rows = st.one_of(
    st.builds(lambda u: ["1e12", "5", u], csv_urls),  # start out of range
    st.builds(lambda u: ["100", "-5", u], csv_urls),
    st.builds(lambda u: ["100", "5e12", u], csv_urls),  # response out of range
    st.builds(lambda u: ["x", "5", u], csv_urls),
    st.builds(lambda u: ["100", "nan", u], csv_urls),
    st.builds(lambda u: ["100", "5", u, "extra"], csv_urls),
    st.just(["100", "5", ""]),
    st.builds(lambda u: ["100", "5", u + "\udce9"], csv_urls),
)


@FAST
@given(st.lists(st.one_of(
    st.tuples(st.just(True), st.builds(lambda t, r, u: [repr(t), repr(r), u],
                                       st.floats(0, 2e9), st.floats(0, 1e6), csv_urls)),
    st.tuples(st.just(False), bad_csv_rows)), max_size=30), st.booleans())
def test_csv_rows_are_requests_or_counted(rows: list[tuple[bool, list[str]]],
                                          header: bool) -> None:
    lines = ["start_unix_s,response_ms,url\n"] if header else []
    lines += [csv_text(cells) for _, cells in rows]
    good = sum(ok for ok, _ in rows)
    if not header and rows and not rows[0][0]:
        return  # a bad first row could read as a header; tested with one below
    assert_accounted(parse_csv(lines, "requests.csv"), good, len(rows) - good)


@FAST
@given(st.text(max_size=2000))
def test_any_text_through_the_csv_reader(text: str) -> None:
    lines = text.splitlines(keepends=True)
    log, error = attempt(parse_csv, lines, "any.csv")
    if error is not None:  # a first row that names some columns but not all
        assert [p.field for p in error.problems] == ["header"]
        return
    assert log is not None
    assert len(log) + log.malformed.count == log.malformed.total
    assert log.malformed.total <= len(lines)


# -- files ---------------------------------------------------------------------------------

def gzip_variants(data: bytes) -> st.SearchStrategy[bytes]:
    packed = gzip.compress(data)
    return st.one_of(st.just(packed), st.integers(0, len(packed)).map(lambda n: packed[:n]),
                     st.tuples(st.integers(10, len(packed) - 1), st.integers(1, 255)).map(
                         lambda p: packed[:p[0]] + bytes([packed[p[0]] ^ p[1]]) +
                         packed[p[0] + 1:]))


log_bytes = st.one_of(
    st.binary(max_size=3000),
    nginx_lines().map(lambda c: "".join(c[0]).encode("utf-8", "surrogateescape")),
    nginx_lines().flatmap(lambda c: gzip_variants(
        "".join(c[0]).encode("utf-8", "surrogateescape"))),
)


@FAST
@given(log_bytes, st.sampled_from(["nginx", "apache", "csv"]))
def test_any_file_is_a_log_or_input_error_naming_it(data: bytes, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "access.log"
        path.write_bytes(data)
        log, error = attempt(read_log, path, fmt, None, 1.0)
    if error is not None:
        assert error.problems[0].file == str(path)
        return
    assert log is not None
    assert len(log) + log.malformed.count == log.malformed.total
    assert np.all(np.diff(log.start_s) >= 0)


# -- the estimator on degenerate request sets ----------------------------------------------

WAVE_START_S = 10_000.0


@st.composite
def request_sets(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, SquareWave]:
    """Start and response times shaped as the cases that broke the estimator: every request
    at one instant, only before or after the injection, only in the on or off halves, one
    request, none, identical responses, a month-long outlier."""
    wave = SquareWave(WAVE_START_S, draw(st.sampled_from([1.0, 8.0, 40.0])),
                      draw(st.integers(1, 6)), draw(st.sampled_from([1e-4, 0.01, 0.5])))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.sampled_from([0, 1, 2, 9, 25, 300, 2000, 2000]))
    lo, hi = WAVE_START_S - 2000, wave.end_s + 100
    shape = draw(st.sampled_from(["uniform", "instant", "before", "after", "on", "off",
                                  "window", "cluster", "uniform", "window"]))
    if shape == "instant":
        t = np.full(n, draw(st.floats(lo, hi)))
    elif shape == "before":
        t = rng.uniform(lo, WAVE_START_S - 1, n)
    elif shape == "after":
        t = rng.uniform(wave.end_s, hi, n)
    elif shape in ("on", "off"):
        t = rng.uniform(wave.start_s, wave.end_s, n)
        t = t[wave.is_on(t) == (shape == "on")]
    elif shape == "window":
        t = rng.uniform(wave.start_s, wave.end_s, n)
    elif shape == "cluster":
        t = draw(st.floats(lo, hi)) + rng.integers(0, 3, n).astype(float)
    else:
        t = rng.uniform(lo, hi, n)
    values = draw(st.sampled_from(["constant", "zero", "noise", "outlier"]))
    y = {"constant": np.full(len(t), 0.05), "zero": np.zeros(len(t)),
         "noise": rng.exponential(0.05, len(t)),
         "outlier": np.where(rng.random(len(t)) < 0.01, MAX_RESPONSE_S, 0.05)}[values]
    return np.sort(t), y, wave


def strictly(document: object) -> str:
    return json.dumps(document, allow_nan=False)


@SLOW
@given(request_sets(), st.sampled_from([0, 1, 3]), st.sampled_from(["none", "same", "double"]))
def test_gradients_of_degenerate_sets_are_estimates_or_notes(
    case: tuple[np.ndarray, np.ndarray, SquareWave], rows_cut: int, partner: str
) -> None:
    t, y, wave = case
    groups = {"all": np.arange(len(t)), "some": np.arange(0, len(t), 2)[rows_cut:],
              "none": np.arange(0)}
    others = {"none": (), "same": (wave,),  # a partner no fit can tell from the wave itself
              "double": (SquareWave(wave.start_s, 2 * wave.period_s, wave.cycles, 0.01),)}
    results = log_gradients(t, y, groups, wave, GradientSettings(), others=others[partner])
    for r in results.values():
        if r.lockin is None:
            assert r.notes, "no estimate must say why"
        else:
            assert np.all(np.isfinite([r.lockin.gradient, *r.lockin.ci, r.lockin.se_s]))
        assert r.thesis is None or math.isfinite(r.thesis.gradient)
        strictly(GradientResult.of(r).model_dump(mode="json"))
    assert results["none"].lockin is None


@SLOW
@given(request_sets())
def test_lockin_gives_a_finite_estimate_or_value_error(
    case: tuple[np.ndarray, np.ndarray, SquareWave],
) -> None:
    t, y, wave = case
    try:
        e = lockin_gradient(t, y, wave)
    except ValueError:
        return
    assert np.all(np.isfinite([e.gradient, *e.ci, e.se_s, e.effect_s]))


@SLOW
@given(request_sets(), st.sampled_from([1, 4, 16]))
def test_planning_noise_probe_gives_finite_noise_or_value_error(
    case: tuple[np.ndarray, np.ndarray, SquareWave], cycles: int
) -> None:
    t, y, wave = case
    try:
        probe = probe_noise(t, y, wave.start_s, wave.period_s, cycles)
    except ValueError:
        return
    assert math.isfinite(probe.se_s)
    assert probe.shams >= 1


@SLOW
@given(request_sets())
def test_periodic_noise_search_never_fails(case: tuple[np.ndarray, np.ndarray, SquareWave]
                                          ) -> None:
    t, y, wave = case
    found = shared_periodic_noise_hz(t, y, {"all": np.arange(len(t))}, wave.start_s,
                                     GradientSettings())
    assert all(math.isfinite(f) and f > 0 for f in found)


# -- the command line ----------------------------------------------------------------------

def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main([*argv, "--json"])
    return code, out.getvalue()


def strict_json(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in --json output")
    return json.loads(text, parse_constant=refuse)


@SLOW
@given(request_sets(), st.lists(st.sampled_from(["/a", "/b?x=1", "/c"]), min_size=1,
                                max_size=3))
def test_gradient_command_exits_0_or_2_with_strict_json(
    case: tuple[np.ndarray, np.ndarray, SquareWave], paths: list[str]
) -> None:
    t, y, wave = case
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.csv"
        log.write_text("".join(f"{s!r},{r * 1e3!r},{paths[i % len(paths)]}\n"
                               for i, (s, r) in enumerate(zip(t.tolist(), y.tolist(),
                                                              strict=True))))
        record = Path(tmp) / "injection.json"
        record.write_text(json.dumps({"start": wave.start_s, "period_s": wave.period_s,
                                      "cycles": wave.cycles,
                                      "magnitude_ms": wave.magnitude_s * 1e3}))
        code, out = run_cli("gradient", "--log", str(log), "--injection", str(record))
        document = strict_json(out)
        if code == 2:
            assert document["error"]["kind"] == "input"
            assert str(log) in document["error"]["message"] or len(t) == 0
        else:
            assert code == 0
            assert any(r["gradient"] is not None or r["thesis_gradient"] is not None
                       for r in document["transactions"].values())
            used = len(t) - sum(document["log"]["unused"].values())
            assert used >= 0
        code, out = run_cli("plan", "--log", str(log))
        assert code in (0, 2)
        strict_json(out)


def test_a_log_that_ends_before_the_injection_is_exit_2_saying_so(tmp_path: Path) -> None:
    log = tmp_path / "early.csv"
    log.write_text("".join(f"{1000.0 + i},{5 + i % 3},/a\n" for i in range(500)))
    record = tmp_path / "injection.json"
    record.write_text(json.dumps({"start": 5000.0, "period_s": 10, "cycles": 4,
                                  "magnitude_ms": 5}))
    code, out = run_cli("gradient", "--log", str(log), "--injection", str(record))
    assert code == 2
    message = strict_json(out)["error"]["message"]
    assert message.startswith(f"{log}: no request started during the injection of {record}")
    assert message.endswith("start from 1970-01-01T00:16:40+00:00 to 1970-01-01T00:24:59+00:00: "
                            "the log or the record is not this run's")


def test_out_of_range_stamps_are_reported_beside_the_gradients(tmp_path: Path) -> None:
    """The case of the issue: stamps out of range made requests vanish with 0 malformed lines
    counted. Allowed by --max-bad-fraction, they are now counted and named in the output."""
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 400, 4000)) + 1_795_000_000.0
    on = SquareWave(1_795_000_200.0, 40.0, 4, 0.02).is_on(t)
    lines = [f"{s!r},{5 + 20 * o + rng.exponential(1):.3f},/a\n"
             for s, o in zip(t.tolist(), on.tolist(), strict=True)]
    lines[::10] = [f"{s * 1000!r},5,/a\n" for s in t[::10].tolist()]  # ms, not seconds
    (tmp_path / "log.csv").write_text("".join(lines))
    (tmp_path / "i.json").write_text(json.dumps({"start": 1_795_000_200.0, "period_s": 40,
                                                 "cycles": 4, "magnitude_ms": 20}))
    argv = ("gradient", "--log", str(tmp_path / "log.csv"), "--injection",
            str(tmp_path / "i.json"))
    code, out = run_cli(*argv)
    assert code == 2
    assert "400 time stamp out of range" in strict_json(out)["error"]["message"]
    code, out = run_cli(*argv, "--max-bad-fraction", "0.2")
    document = strict_json(out)
    assert code == 0
    assert document["log"]["malformed"]["by_reason"] == {"time stamp out of range": 400}
    assert 0.9 < document["transactions"]["/a"]["gradient"] < 1.1


def test_gradient_table_names_what_it_left_out(tmp_path: Path, capsys) -> None:
    lines = [f"{1000.0 + i * 0.1!r},{5 + 3 * ((i // 50) % 2)},/a[x]\n" for i in range(3000)]
    lines.insert(7, "garbage\n")
    (tmp_path / "log.csv").write_text("".join(lines))
    (tmp_path / "i.json").write_text(json.dumps({"start": 1100.0, "period_s": 10, "cycles": 4,
                                                 "magnitude_ms": 3}))
    code = main(["gradient", "--log", str(tmp_path / "log.csv"), "--injection",
                 str(tmp_path / "i.json")])
    out = capsys.readouterr().out
    assert code == 0
    assert "1 of 3001 lines malformed, not used (1 wrong number of fields; first: lines 8)" in out
    assert "requests not used: 1600 after the injection" in out
    assert "/a[x]" in out  # a URL with brackets is shown, not taken for markup


def test_clf_helper_matches_the_parser() -> None:
    """The strategies' own stamp writer agrees with the parser (else the oracle is wrong)."""
    when = datetime(2026, 11, 22, 10, 0, 1, tzinfo=UTC)
    log = parse_lines([nginx_line(when, "0.5", "/", "ua") + "\n"], NGINX, "x")
    assert log.start_s[0] == when.timestamp() - 0.5


@SLOW
@given(st.floats(1.0, 1e300) | st.floats(900.0, 1300.0),  # or over the log's 300 s
       st.floats(1e-300, 1e308) | st.floats(1e-3, 100.0),
       st.integers(1, 10**9) | st.integers(1, 10**5), st.floats(1e-300, 1e300))
def test_any_valid_record_against_a_real_log_is_exit_0_or_2(
    start: float, period_s: float, cycles: int, magnitude_ms: float
) -> None:
    """Records the record model accepts but no run writes (a wave of 1e-300 s or 1e308 s, a
    billion cycles, a start in the year 1e292) against a log of 3000 requests."""
    record = {"start": start, "period_s": period_s, "cycles": cycles,
              "magnitude_ms": magnitude_ms}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.csv"
        log.write_text("".join(f"{1000.0 + i * 0.1!r},{5 + i % 7},/a\n" for i in range(3000)))
        (Path(tmp) / "i.json").write_text(json.dumps(record))
        code, out = run_cli("gradient", "--log", str(log), "--injection",
                            str(Path(tmp) / "i.json"))
    assert code in (0, 2)
    strict_json(out)

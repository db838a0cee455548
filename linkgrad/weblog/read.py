"""`read_log`: the one entry point that turns a web-log file into a `RequestLog`.

It chooses the format, opens plain or gzip files, parses, sorts by start time and refuses a
log that mostly does not parse: a wrong `--format`/`--log-format` must stop the run with a
message, never yield a response series built from the few lines that happened to match.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Literal, TextIO

import numpy as np

from linkgrad.errors import InputError, Problem
from linkgrad.weblog.apache_format import compile_apache
from linkgrad.weblog.csvlog import DESCRIPTION as CSV_DESCRIPTION
from linkgrad.weblog.csvlog import parse_csv
from linkgrad.weblog.linespec import LOG_FORMAT_FIELD
from linkgrad.weblog.model import RequestLog
from linkgrad.weblog.nginx_format import compile_nginx
from linkgrad.weblog.textlog import parse_lines

__all__ = [
    "FORMATS",
    "MAX_LINE_CHARS",
    "LogKind",
    "Parser",
    "bounded_lines",
    "choose_format",
    "line_parser",
    "read_log",
]

LogKind = Literal["nginx", "apache", "csv"]
FORMATS: tuple[LogKind, ...] = ("nginx", "apache", "csv")
_GZIP_MAGIC = b"\x1f\x8b"
# No server writes such a line (nginx and Apache refuse request lines past 8 KB by default):
# a longer one is the wrong file, and reading it whole would take memory without bound.
MAX_LINE_CHARS = 16 * 2**20
# A byte that is not UTF-8 is kept as a surrogate, so the parser counts its line as malformed
# ("bytes that are not UTF-8") instead of reading a URL with U+FFFD in it.
_TEXT = {"encoding": "utf-8", "errors": "surrogateescape", "newline": ""}

Parser = Callable[[Iterable[str], str], RequestLog]


def read_log(
    path: str | Path,
    fmt: LogKind | None = None,
    log_format: str | None = None,
    max_bad_fraction: float = 0.05,
) -> RequestLog:
    """Requests of the log at `path`, sorted by start time (stable), times in seconds.

    `fmt=None` means CSV for `*.csv` / `*.csv.gz`, nginx otherwise. `log_format` is the
    server's format string (default: nginx combined + `$request_time`, Apache common + `%D`).
    Raises InputError for a missing or empty file, a bad format string, or more than
    `max_bad_fraction` of the non-blank lines malformed.
    """
    path = Path(path)
    kind = choose_format(path, fmt, log_format)
    if not 0.0 <= max_bad_fraction <= 1.0:
        raise InputError(
            Problem(f"{max_bad_fraction=} must be within [0, 1]", field="--max-bad-fraction")
        )
    parse, description = line_parser(kind, log_format)
    log = _parse_file(path, parse)
    _check(log, description, max_bad_fraction)
    return log.select(np.argsort(log.start_s, kind="stable"))


def choose_format(path: Path, fmt: str | None, log_format: str | None) -> LogKind:
    """The log kind to use: `fmt` if given, else by file name."""
    if fmt is None:
        name = path.name.lower()
        fmt = "csv" if name.endswith((".csv", ".csv.gz")) else "nginx"
    if fmt not in FORMATS:
        raise InputError(
            Problem(f"unknown format {fmt!r}; expected nginx, apache or csv", field="--format")
        )
    if fmt == "csv" and log_format is not None:
        raise InputError(
            Problem(
                "CSV logs have the fixed columns start_unix_s,response_ms,url; "
                "a log format applies to nginx and apache only",
                field=LOG_FORMAT_FIELD,
            )
        )
    return fmt  # type: ignore[return-value]  # checked against FORMATS above


def line_parser(kind: LogKind, log_format: str | None) -> tuple[Parser, str]:
    """The line parser for a log kind, and its description for error messages."""
    if kind == "csv":
        return parse_csv, CSV_DESCRIPTION
    spec = compile_nginx(log_format) if kind == "nginx" else compile_apache(log_format)
    return (lambda lines, source: parse_lines(lines, spec, source)), spec.description


def _parse_file(path: Path, parse: Parser) -> RequestLog:
    """Parse the file, turning I/O trouble (missing, unreadable, corrupt or truncated gzip)
    into InputError naming the file and the last line read whole."""
    try:
        with _open_text(path) as text:
            return parse(bounded_lines(text, path), str(path))
    except FileNotFoundError:
        raise InputError(Problem("no such file", file=str(path))) from None
    except IsADirectoryError:
        raise InputError(Problem("is a directory, not a log", file=str(path))) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise InputError(Problem(f"corrupt or truncated gzip data{_after(path)}: {e}",
                                 file=str(path))) from e
    except OSError as e:
        raise InputError(Problem(f"cannot read the log{_after(path)}: {e}",
                                 file=str(path))) from e


def bounded_lines(text: TextIO, path: Path) -> Iterator[str]:
    """The lines of `text`, none held longer than MAX_LINE_CHARS (/dev/zero, a core dump
    given as a log: one endless line)."""
    for number, line in enumerate(iter(partial(text.readline, MAX_LINE_CHARS + 1), ""), 1):
        if len(line) > MAX_LINE_CHARS:
            raise InputError(Problem(f"longer than {MAX_LINE_CHARS // 2**20} MiB: not a web "
                                     "log line (is it the right file?)", str(path), number))
        yield line


def _after(path: Path) -> str:
    """" after line N": the lines read whole before the error. Counted by reading again, on
    the error path only, so the parser's loop pays nothing for it."""
    read = 0
    try:
        with _open_text(path) as text:
            for read, _ in enumerate(bounded_lines(text, path), 1):  # noqa: B007  # the count
                pass
    except (OSError, EOFError, zlib.error, InputError):
        pass
    return f" after line {read}" if read else ""


def _open_text(path: Path) -> TextIO:
    """The file as text lines; gzip (by its magic bytes) is decompressed on the fly."""
    with path.open("rb") as probe:
        compressed = probe.read(2) == _GZIP_MAGIC
    if compressed:
        return io.TextIOWrapper(gzip.open(path, "rb"), **_TEXT)
    return path.open(**_TEXT)


def _check(log: RequestLog, description: str, max_bad_fraction: float) -> None:
    """Refuse a log with too many malformed lines, or with no requests at all."""
    bad = log.malformed
    if bad.count and bad.fraction > max_bad_fraction:
        first = ", ".join(str(line) for line, _ in bad.examples)
        reasons = ", ".join(f"{n} {reason}" for reason, n in bad.by_reason)
        summary = Problem(
            f"{bad.count} of {bad.total} lines ({bad.fraction:.1%}) do not parse as "
            f"{description} ({reasons}; allowed: {max_bad_fraction:.1%}; first bad lines: "
            f"{first}); --format/--log-format may be wrong",
            file=log.source,
            field="--format/--log-format",
        )
        details = [Problem(reason, file=log.source, line=line) for line, reason in bad.examples]
        raise InputError([summary, *details])
    if len(log) == 0:
        what = "the file is empty" if bad.total == 0 else "no line parsed"
        raise InputError(Problem(f"no requests in the log ({what})", file=log.source))

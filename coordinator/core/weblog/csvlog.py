"""Read a CSV request log: `start_unix_s,response_ms,url`, one request per row.

For load generators and servers whose own log we cannot configure: the simplest format that
still says when each request started and how long it took. The header line is optional;
when present it names the columns (so they may come in any order, with extra columns), and
an optional `status` column gives each request's HTTP status (for the run's error limit).
The csv module handles quoted URLs that contain commas.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from common.errors import InputError, Problem
from coordinator.core.weblog.model import MalformedLines, RequestLog

COLUMNS = ("start_unix_s", "response_ms", "url")
DESCRIPTION = "CSV start_unix_s,response_ms,url"


def parse_csv(lines: Iterable[str], source: str) -> RequestLog:
    """All well-formed rows, in file order (not yet sorted), with malformed rows counted."""
    reader = csv.reader(lines)
    starts: list[float] = []
    responses: list[float] = []
    urls: list[str] = []
    statuses: list[int] = []
    bad: dict[int, str] = {}
    columns: tuple[int, int, int] | None = None
    status_column: int | None = None
    width = len(COLUMNS)
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue  # blank line
        if columns is None:
            columns, width = _layout(row, source, reader.line_num)
            if _is_header(row):
                names = [cell.strip().lower() for cell in row]
                status_column = names.index("status") if "status" in names else None
                continue
        try:
            start_s, response_s, url = _row(row, columns, width)
            if status_column is not None:
                statuses.append(_status(row[status_column]))
        except ValueError as e:
            bad[reader.line_num] = str(e)
            continue
        starts.append(start_s)
        responses.append(response_s)
        urls.append(url)
    log = _request_log(starts, responses, urls, bad, source)
    if status_column is None:
        return log
    return replace(log, status=np.array(statuses, dtype=np.int16))


def _status(text: str) -> int:
    value = text.strip()
    if not (len(value) == 3 and value.isdigit()):
        raise ValueError(f"status {value!r} is not a three-digit HTTP status")
    return int(value)


def _is_header(row: list[str]) -> bool:
    """A first row is a header if it names a column and does not start with a number."""
    if not any(cell.strip().lower() in COLUMNS for cell in row):
        return False
    try:
        float(row[0])
    except ValueError:
        return True
    return False


def _layout(row: list[str], source: str, line: int) -> tuple[tuple[int, int, int], int]:
    """Column indices (start, response, url) and row width, from the header if there is one."""
    if not _is_header(row):
        return (0, 1, 2), len(COLUMNS)
    names = [cell.strip().lower() for cell in row]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise InputError(
            Problem(
                f"header {','.join(row)!r} lacks {', '.join(missing)}; "
                f"expected columns {','.join(COLUMNS)}",
                file=source,
                line=line,
                field="header",
            )
        )
    start, response, url = (names.index(c) for c in COLUMNS)
    return (start, response, url), len(names)


def _row(row: list[str], columns: tuple[int, int, int], width: int) -> tuple[float, float, str]:
    """(start s, response s, url) of one row; ValueError with the reason if it is malformed."""
    if len(row) != width:
        raise ValueError(f"expected {width} fields, found {len(row)} (quote URLs with commas)")
    start_s = _number(row[columns[0]], "start_unix_s")
    response_ms = _number(row[columns[1]], "response_ms")
    if response_ms < 0:
        raise ValueError(f"negative response time {row[columns[1]].strip()!r} in response_ms")
    url = row[columns[2]].strip()
    if not url:
        raise ValueError("empty url")
    return start_s, response_ms * 1e-3, url


def _number(text: str, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"unparsable number {text.strip()!r} in {column}") from None
    if not math.isfinite(value):
        raise ValueError(f"{text.strip()!r} in {column} is not a finite number")
    return value


def _request_log(
    starts: list[float], responses: list[float], urls: list[str], bad: dict[int, str], source: str
) -> RequestLog:
    start_s = np.array(starts, dtype=np.float64)
    url = np.empty(len(urls), dtype=object)
    url[:] = urls
    examples = tuple(itertools.islice(bad.items(), 5))
    return RequestLog(
        start_s=start_s,
        response_s=np.array(responses, dtype=np.float64),
        url=url,
        source=source,
        malformed=MalformedLines(len(bad), len(starts) + len(bad), examples),
        time_resolution_s=_resolution_s(start_s),
    )


def _resolution_s(start_s: np.ndarray) -> float:
    """1 s if every start is a whole second, 1 ms if every start is a whole ms, else 1 µs."""
    if np.array_equal(start_s, np.round(start_s)):
        return 1.0
    ms = start_s * 1e3
    return 0.001 if np.allclose(ms, np.round(ms), rtol=0.0, atol=1e-3) else 1e-6

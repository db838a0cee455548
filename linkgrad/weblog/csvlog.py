"""Read a CSV request log: `start_unix_s,response_ms,url`, one request per row.

For load generators and servers whose own log we cannot configure: the simplest format that
still says when each request started and how long it took. The header line is optional;
when present it names the columns (so they may come in any order, with extra columns), and
an optional `status` column gives each request's HTTP status (for the run's error limit).
The csv module handles quoted URLs that contain commas.
"""

from __future__ import annotations

import csv
import heapq
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from linkgrad.errors import InputError, Problem
from linkgrad.weblog.model import (
    BAD_RESPONSE,
    BAD_STAMP,
    MAX_RESPONSE_S,
    NEGATIVE_RESPONSE,
    NOT_UTF8,
    RESPONSE_RANGE,
    MalformedLines,
    RequestLog,
    quoted,
)
from linkgrad.weblog.textlog import EXAMPLES, ROW_REASONS, not_utf8, row_reasons

__all__ = ["BAD_STATUS", "COLUMNS", "DESCRIPTION", "EMPTY_URL", "WRONG_FIELDS", "parse_csv"]

COLUMNS = ("start_unix_s", "response_ms", "url")
DESCRIPTION = "CSV start_unix_s,response_ms,url"
# Reasons only a CSV row can have (the others are shared with nginx and Apache logs).
WRONG_FIELDS = "wrong number of fields"
EMPTY_URL = "empty url"
BAD_STATUS = "unparsable status"


def parse_csv(lines: Iterable[str], source: str) -> RequestLog:
    """All well-formed rows, in file order (not yet sorted), with malformed lines counted.

    The hot loop appends to local lists; whatever is unusual goes through `_Rows`.
    """
    reader = csv.reader(lines)
    rows = _Rows()
    add_line, add_start, add_response, add_url, add_status = (
        rows.lines.append, rows.starts.append, rows.responses.append, rows.urls.append,
        rows.statuses.append)  # fmt: skip
    intern = rows.distinct.setdefault
    layout: tuple[tuple[int, int, int], int, int | None] | None = None
    last_line = 0
    while True:
        try:
            for row in reader:
                first_line, last_line = last_line + 1, reader.line_num
                unusual = last_line > first_line or not all(map(str.isascii, row))
                if unusual and rows.odd(row, first_line, last_line):
                    continue
                if not "".join(row).strip():
                    continue  # blank line
                if layout is None:
                    layout = _layout(row, source, last_line)
                    if _is_header(row):
                        continue
                columns, width, status_column = layout
                try:
                    start_s, response_s, url = _row(row, columns, width)
                    if status_column is not None:
                        add_status(_status(row[status_column]))
                except _Bad as e:
                    rows.bad(last_line, e.reason, e.detail)
                    continue
                add_line(last_line)
                add_start(start_s)
                add_response(response_s)
                add_url(intern(url, url))  # one string object per distinct URL
            break
        except csv.Error as e:  # e.g. a field over the csv module's 128 KB limit; it goes on
            rows.bad_lines(last_line + 1, reader.line_num, WRONG_FIELDS, f"not CSV: {e}")
            last_line = reader.line_num
    return rows.request_log(source, layout is not None and layout[2] is not None)


class _Bad(ValueError):
    """A row that is not a request: the reason it is counted under and what is wrong."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


@dataclass
class _Rows:
    """The requests read so far, and every line that is not one (line -> reason)."""

    lines: list[int] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    responses: list[float] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    examples: list[tuple[int, str]] = field(default_factory=list)
    distinct: dict[str, str] = field(default_factory=dict)

    def odd(self, row: list[str], first: int, last: int) -> bool:
        """Count a row over several lines (an unclosed quote took in the lines after it) or
        with bytes that are not UTF-8; False if the row is neither."""
        if last > first:
            self.bad_lines(first, last, WRONG_FIELDS,
                           f"a quoted field runs over lines {first}-{last}")
            return True
        if any(map(not_utf8, row)):
            self.bad(last, NOT_UTF8, NOT_UTF8)
            return True
        return False

    def bad(self, line: int, reason: str, detail: str) -> None:
        self.bad_lines(line, line, reason, detail)

    def bad_lines(self, first: int, last: int, reason: str, detail: str) -> None:
        self.reasons[reason] += last - first + 1
        if len(self.examples) < EXAMPLES:
            self.examples.append((first, detail))

    def request_log(self, source: str, with_status: bool) -> RequestLog:
        start_s = np.array(self.starts, dtype=np.float64)
        response_s = np.array(self.responses, dtype=np.float64)
        reason = row_reasons(start_s, response_s, start_s)
        for row in np.flatnonzero(reason).tolist():
            why = ROW_REASONS[reason[row]]
            assert why is not None  # rows with reason 0 are not bad
            self.bad(self.lines[row], why, _range_detail(why, start_s[row], response_s[row]))
        ok = reason == 0
        url = np.empty(int(ok.sum()), dtype=object)
        url[:] = [u for u, keep in zip(self.urls, ok.tolist(), strict=True) if keep]
        count = sum(self.reasons.values())
        malformed = MalformedLines(
            count=count,
            total=int(ok.sum()) + count,
            examples=tuple(heapq.nsmallest(EXAMPLES, self.examples)),
            by_reason=tuple((r, n) for r, n in self.reasons.most_common() if n),
        )
        return RequestLog(
            start_s=start_s[ok],
            response_s=response_s[ok],
            url=url,
            source=source,
            malformed=malformed,
            time_resolution_s=_resolution_s(start_s[ok]),
            status=np.array(self.statuses, dtype=np.int16)[ok] if with_status else None,
        )


def _range_detail(reason: str, start_s: float, response_s: float) -> str:
    if reason == RESPONSE_RANGE:
        return f"response_ms {response_s * 1e3:g} is over {MAX_RESPONSE_S * 1e3:.0f} ms"
    return f"start_unix_s {start_s:g} is outside the years 1970-9999"


def _status(text: str) -> int:
    value = text.strip()
    if not (len(value) == 3 and value.isdigit()):
        raise _Bad(BAD_STATUS, f"status {quoted(value)} is not a three-digit HTTP status")
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


def _layout(
    row: list[str], source: str, line: int
) -> tuple[tuple[int, int, int], int, int | None]:
    """Column indices (start, response, url), row width and the status column, from the
    header if there is one."""
    if not _is_header(row):
        return (0, 1, 2), len(COLUMNS), None
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
    status = names.index("status") if "status" in names else None
    return (start, response, url), len(names), status


def _row(row: list[str], columns: tuple[int, int, int], width: int) -> tuple[float, float, str]:
    """(start s, response s, url) of one row; _Bad with the reason if it is malformed."""
    if len(row) != width:
        raise _Bad(WRONG_FIELDS,
                   f"expected {width} fields, found {len(row)} (quote URLs with commas)")
    start_text, response_text = row[columns[0]], row[columns[1]]
    try:
        start_s, response_ms = float(start_text), float(response_text)
    except ValueError:
        start_s, response_ms = math.nan, math.nan
    if not (math.isfinite(start_s) and math.isfinite(response_ms)):  # say which, and why
        start_s = _number(start_text, "start_unix_s", BAD_STAMP)
        response_ms = _number(response_text, "response_ms", BAD_RESPONSE)
    if response_ms < 0:
        raise _Bad(NEGATIVE_RESPONSE,
                   f"negative response time {quoted(response_text.strip())} in response_ms")
    url = row[columns[2]].strip()
    if not url:
        raise _Bad(EMPTY_URL, "empty url")
    return start_s, response_ms * 1e-3, url


def _number(text: str, column: str, reason: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _Bad(reason, f"unparsable number {quoted(text.strip())} in {column}") from None
    if not math.isfinite(value):
        raise _Bad(reason, f"{quoted(text.strip())} in {column} is not a finite number")
    return value


def _resolution_s(start_s: np.ndarray) -> float:
    """1 s if every start is a whole second, 1 ms if every start is a whole ms, else 1 µs."""
    if np.array_equal(start_s, np.round(start_s)):
        return 1.0
    ms = start_s * 1e3
    return 0.001 if np.allclose(ms, np.round(ms), rtol=0.0, atol=1e-3) else 1e-6

"""The parsed form of a web log: one row per request, times in seconds."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "BAD_RESPONSE",
    "BAD_STAMP",
    "MAX_RESPONSE_S",
    "MAX_START_S",
    "MIN_START_S",
    "NEGATIVE_RESPONSE",
    "NOT_UTF8",
    "NO_MATCH",
    "QUOTE_CHARS",
    "RESPONSE_RANGE",
    "STAMP_RANGE",
    "MalformedLines",
    "RequestLog",
    "quoted",
]

# Why a line is not a request: the names malformed lines are counted under.
NO_MATCH = "does not match the log format"
NOT_UTF8 = "bytes that are not UTF-8"
BAD_STAMP = "unparsable time stamp"
STAMP_RANGE = "time stamp out of range"
BAD_RESPONSE = "unparsable response time"
NEGATIVE_RESPONSE = "negative response time"
RESPONSE_RANGE = "response time out of range"

# Sane values. Beyond them a number is a unit mistake (milliseconds read as seconds) or
# corruption, and would put a request centuries away from the others: silently outside every
# window, or swamping every sum.
MIN_START_S = 0.0  # 1970-01-01
MAX_START_S = 253_402_300_799.0  # 9999-12-31T23:59:59Z, the last second a date can name
MAX_RESPONSE_S = 30 * 86_400.0  # no server holds a request open for a month

# Examples quote the offending text, cut to this many characters (a field may be megabytes).
QUOTE_CHARS = 80


def quoted(text: str) -> str:
    """`text` as repr, cut to QUOTE_CHARS characters for a message."""
    if len(text) <= QUOTE_CHARS:
        return repr(text)
    return repr(text[:QUOTE_CHARS]) + f"... ({len(text)} characters)"


@dataclass(frozen=True)
class MalformedLines:
    """Lines that did not parse: how many, why (count per reason), and the first few with
    their line numbers."""

    count: int
    total: int
    examples: tuple[tuple[int, str], ...] = ()  # (line number, what is wrong with it)
    by_reason: tuple[tuple[str, int], ...] = ()  # (reason, lines); counts sum to `count`

    @property
    def fraction(self) -> float:
        return self.count / self.total if self.total else 0.0


@dataclass(frozen=True)
class RequestLog:
    """Requests from a web log, sorted by start time.

    `start_s` is the unix time the request *started* (nginx end stamps are moved back by the
    response time), `response_s` its response time, `url` the path with query string.
    """

    start_s: np.ndarray  # float64, seconds since the epoch, sorted ascending
    response_s: np.ndarray  # float64, seconds
    url: np.ndarray  # object array of str, path + query
    source: str = ""
    malformed: MalformedLines = field(default_factory=lambda: MalformedLines(0, 0))
    time_resolution_s: float = 0.0  # coarsest stamp resolution seen (1.0 for $time_local / %t)
    status: np.ndarray | None = None  # int HTTP status per request; None: the log has none

    def __post_init__(self) -> None:
        n = len(self.start_s)
        if len(self.response_s) != n or len(self.url) != n:
            raise ValueError("start_s, response_s and url must have the same length")
        if self.status is not None and len(self.status) != n:
            raise ValueError("status must have one entry per request")

    def failed(self) -> np.ndarray | None:
        """Requests that failed in a way a delay can cause: a server error (5xx), or the
        client gave up (nginx 499, 408); None when the log has no status."""
        if self.status is None:
            return None
        return (self.status >= 500) | (self.status == 499) | (self.status == 408)

    def __len__(self) -> int:
        return len(self.start_s)

    def select(self, mask: np.ndarray) -> RequestLog:
        """The requests where `mask` is true (order kept)."""
        return RequestLog(
            self.start_s[mask],
            self.response_s[mask],
            self.url[mask],
            self.source,
            self.malformed,
            self.time_resolution_s,
            None if self.status is None else self.status[mask],
        )

"""What one web-log line looks like: shared by the nginx and Apache format compilers.

A format string (nginx `log_format`, Apache `LogFormat`) is a list of literals and variables.
Each format module maps its variables to `Field`s (a regex and what the value means);
`compile_spec` picks the time stamp, the response time and the URL among them, builds one
anchored regex with named groups and returns a `LineSpec` that the reader applies to every
line. Doing this in one place means both servers place requests, and report a format that
lacks a needed field, in exactly the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

from linkgrad.errors import InputError, Problem

__all__ = [
    "CLF_TIME",
    "DURATION",
    "EPOCH",
    "GENERIC",
    "ISO8601_TIME",
    "LOG_FORMAT_FIELD",
    "REQUEST",
    "STATUS",
    "STATUS_FIELD",
    "Field",
    "LineSpec",
    "Stamp",
    "StampKind",
    "UrlRole",
    "Var",
    "clf_to_s",
    "compile_spec",
    "group_name",
    "iso8601_to_s",
    "literal_between",
]

LOG_FORMAT_FIELD = "--log-format"

# Tight patterns shared by both servers. Durations accept a minus sign so that a negative
# response time is reported as such instead of as "does not match".
CLF_TIME = r"[0-9]{2}/[A-Z][a-z]{2}/[0-9]{4}:[0-9]{2}:[0-9]{2}:[0-9]{2} [+-][0-9]{4}"
ISO8601_TIME = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:[+-][0-9]{2}:[0-9]{2}|Z)"
EPOCH = r"[0-9.]+"
DURATION = r"-?[0-9.]+"
STATUS = r"[0-9]{3}"

StampKind = Literal["clf", "iso8601", "epoch"]
UrlRole = Literal["request", "uri_with_query", "path", "query"]


@dataclass(frozen=True)
class Stamp:
    """How a time stamp is written and whether the server took it at the request's end."""

    kind: StampKind
    at_end: bool  # True: start = stamp - response time
    resolution_s: float
    scale_s: float = 1.0  # "epoch" only: seconds per unit of the written number


@dataclass(frozen=True)
class Field:
    """One format variable: its regex (captured part between `before` and `after`) and role."""

    pattern: str
    before: str = ""
    after: str = ""
    stamp: Stamp | None = None
    duration_scale_s: float | None = None  # set when the value is a response time
    duration_resolution_s: float = 0.0
    url: UrlRole | None = None
    status: bool = False  # the HTTP status: what the run's error-rate limit watches


GENERIC = Field(".*?")
STATUS_FIELD = Field(STATUS, status=True)
# A request line "GET /p?q HTTP/1.1": only the target is captured.
REQUEST = Field(r'[^\s"]+', before=r'[^\s"]+ ', after=r"(?: HTTP/[0-9.]+)?", url="request")


@dataclass(frozen=True)
class Var:
    """One occurrence of a variable in a format string."""

    token: str  # as written, e.g. "$msec" or "%{end:msec}t"
    name: str  # identifier used for its regex group
    field: Field


@dataclass(frozen=True)
class LineSpec:
    """A compiled format: groups `stamp`, `duration`, `path`, and `query` / `status` if the
    format has them."""

    regex: re.Pattern[str]
    description: str  # e.g. "nginx log_format '...'", used in error messages
    stamp: Stamp
    duration_token: str
    duration_scale_s: float
    has_query: bool
    resolution_s: float
    has_status: bool = False  # coarsest of the stamp's and the response time's resolution

    @property
    def groups(self) -> tuple[str, ...]:
        base = ("stamp", "duration", "path")
        return (*base, "query") if self.has_query else base


def compile_spec(
    pieces: Sequence[str | Var], description: str, hints: Mapping[str, str], quoted: str
) -> LineSpec:
    """Build the line regex from literals and variables; InputError names every missing field.

    `hints` maps "time stamp", "response time" and "URL" to the variables that would supply it.
    `quoted` is the pattern of an unknown variable between double quotes: the server escapes
    quotes inside values, so a tight pattern is safe there (and faster than `.*?`).
    """
    variables = [(i, p) for i, p in enumerate(pieces) if isinstance(p, Var)]
    stamp = _finest(variables, lambda f: f.stamp.resolution_s if f.stamp else None)
    duration = _finest(variables, lambda f: f.duration_resolution_s if f.duration_scale_s else None)
    path, query = _url_source(variables)
    found = {"time stamp": stamp, "response time": duration, "URL": path}
    missing = [what for what, index in found.items() if index is None]
    if missing:
        raise InputError(
            [
                Problem(f"{description} has no {what} (use {hints[what]})", field=LOG_FORMAT_FIELD)
                for what in missing
            ]
        )
    roles = {stamp: "stamp", duration: "duration", path: "path"}
    if query is not None:
        roles[query] = "query"
    # the last status: Apache's final `%>s` is written after the original `%s` when both are
    status = next((i for i, var in reversed(variables) if var.field.status), None)
    if status is not None:
        roles[status] = "status"
    stamp_var, duration_var = _var(pieces, stamp), _var(pieces, duration)
    assert stamp_var.field.stamp is not None  # chosen for having one
    assert duration_var.field.duration_scale_s is not None
    return LineSpec(
        regex=re.compile(_regex(pieces, roles, quoted)),
        description=description,
        stamp=stamp_var.field.stamp,
        duration_token=duration_var.token,
        duration_scale_s=duration_var.field.duration_scale_s,
        has_query=query is not None,
        has_status=status is not None,
        resolution_s=max(
            stamp_var.field.stamp.resolution_s, duration_var.field.duration_resolution_s
        ),
    )


def _var(pieces: Sequence[str | Var], index: int) -> Var:
    piece = pieces[index]
    assert isinstance(piece, Var)  # indices come from the list of variables
    return piece


def _finest(
    variables: list[tuple[int, Var]], resolution: Callable[[Field], float | None]
) -> int | None:
    """Index of the variable with the finest resolution for a role (first on a tie)."""
    best: tuple[float, int] | None = None
    for index, var in variables:
        res = resolution(var.field)
        if res is not None and (best is None or res < best[0]):
            best = (res, index)
    return None if best is None else best[1]


def _url_source(variables: list[tuple[int, Var]]) -> tuple[int | None, int | None]:
    """Where the URL comes from: a full URI, else a request line, else a path (+ query)."""
    first: dict[str, int] = {}
    for index, var in variables:
        if var.field.url is not None:
            first.setdefault(var.field.url, index)
    for role in ("uri_with_query", "request"):
        if role in first:
            return first[role], None
    return first.get("path"), first.get("query") if "path" in first else None


def _regex(pieces: Sequence[str | Var], roles: Mapping[int, str], quoted: str) -> str:
    """One anchored pattern; a role gets its group, other variables `v_<name>` once."""
    parts: list[str] = []
    seen: set[str] = set()
    for index, piece in enumerate(pieces):
        if isinstance(piece, str):
            parts.append(re.escape(piece))
            continue
        f = piece.field
        if f is GENERIC and _between_quotes(pieces, index):
            f = Field(quoted)
        if index in roles:
            parts.append(f"{f.before}(?P<{roles[index]}>{f.pattern}){f.after}")
        elif piece.name in seen:
            parts.append(f"(?:{f.before}{f.pattern}{f.after})")
        else:
            seen.add(piece.name)
            parts.append(f"(?P<v_{piece.name}>{f.before}{f.pattern}{f.after})")
    return "".join(parts) + r"\s*\Z"


def _between_quotes(pieces: Sequence[str | Var], index: int) -> bool:
    before = pieces[index - 1] if index > 0 else None
    after = pieces[index + 1] if index + 1 < len(pieces) else None
    return (
        isinstance(before, str)
        and before.endswith('"')
        and isinstance(after, str)
        and after.startswith('"')
    )


def group_name(text: str) -> str:
    """A regex-group-safe identifier for a variable name."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


def clf_to_s(text: str) -> float:
    """`22/Nov/2026:10:00:01 +0100` (nginx $time_local, Apache %t) to unix seconds.

    Raises ValueError for an impossible date (the regex only checks the shape).
    """
    try:
        month = _MONTHS[text[3:6]]
    except KeyError:
        raise ValueError(f"unknown month {text[3:6]!r}") from None
    sign = -1 if text[21] == "-" else 1
    offset = timedelta(hours=int(text[22:24]), minutes=int(text[24:26])) * sign
    when = datetime(
        int(text[7:11]), month, int(text[0:2]),
        int(text[12:14]), int(text[15:17]), int(text[18:20]),
        tzinfo=timezone(offset),
    )  # fmt: skip
    return when.timestamp()


def iso8601_to_s(text: str) -> float:
    """`2026-11-22T10:00:01+01:00` (nginx $time_iso8601) to unix seconds."""
    return datetime.fromisoformat(text).timestamp()


def literal_between(text: str, start: int, end: int, sigil: str, meaning: str) -> str:
    """Format text between two placeholders; a stray `sigil` there is an InputError."""
    literal = text[start:end]
    if sigil in literal:
        column = start + literal.index(sigil) + 1
        raise InputError(
            Problem(f"'{sigil}' at column {column} of {text!r} {meaning}", field=LOG_FORMAT_FIELD)
        )
    return literal

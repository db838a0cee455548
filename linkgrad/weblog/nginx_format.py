"""Compile an nginx `log_format` string into a `LineSpec`.

nginx logs whatever the operator configured, so the reader cannot assume "combined": it turns
the configured format into one regex. nginx takes `$time_local`, `$msec` and `$time_iso8601`
when it writes the log line, i.e. when the request *ends*; the spec records that so the
reader can place each request at its start (stamp - `$request_time`).
"""

from __future__ import annotations

import re

from linkgrad.errors import InputError, Problem
from linkgrad.weblog.linespec import (
    CLF_TIME,
    DURATION,
    EPOCH,
    GENERIC,
    ISO8601_TIME,
    LOG_FORMAT_FIELD,
    REQUEST,
    STATUS_FIELD,
    Field,
    LineSpec,
    Stamp,
    Var,
    compile_spec,
    group_name,
    literal_between,
)

__all__ = ["DEFAULT_LOG_FORMAT", "FIELDS", "HINTS", "QUOTED", "compile_nginx"]

# nginx "combined" plus the response time, which "combined" lacks.
DEFAULT_LOG_FORMAT = (
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    '"$http_referer" "$http_user_agent" $request_time'
)

FIELDS: dict[str, Field] = {
    "time_local": Field(CLF_TIME, stamp=Stamp("clf", at_end=True, resolution_s=1.0)),
    "time_iso8601": Field(ISO8601_TIME, stamp=Stamp("iso8601", at_end=True, resolution_s=1.0)),
    "msec": Field(EPOCH, stamp=Stamp("epoch", at_end=True, resolution_s=0.001)),
    "request_time": Field(DURATION, duration_scale_s=1.0, duration_resolution_s=0.001),
    "request": REQUEST,
    "request_uri": Field(r'[^\s"]+', url="uri_with_query"),
    "uri": Field(r'[^"]*?', url="path"),  # decoded: may contain spaces
    "args": Field(r'[^\s"]*', url="query"),  # "-" when there is no query
    "status": STATUS_FIELD,
    "remote_addr": Field(r"\S+"),
    "body_bytes_sent": Field(r"[0-9]+"),
}

# nginx writes a '"' inside a value as \x22 (and as \" with escape=json).
QUOTED = r'[^"\\]*(?:\\.[^"\\]*)*'

HINTS = {
    "time stamp": "$time_local, $msec or $time_iso8601",
    "response time": "$request_time",
    "URL": "$request, $request_uri or $uri",
}

_VARIABLE = re.compile(r"\$(?:\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))")
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"")


def compile_nginx(log_format: str | None = None) -> LineSpec:
    """The spec for `log_format` (a bare format or an nginx.conf `log_format` directive)."""
    text = _unwrap(log_format if log_format is not None else DEFAULT_LOG_FORMAT)
    return compile_spec(_pieces(text), f"nginx log_format {text!r}", HINTS, QUOTED)


def _pieces(text: str) -> list[str | Var]:
    """Split a format into literal strings and variables."""
    pieces: list[str | Var] = []
    position = 0
    for m in _VARIABLE.finditer(text):
        pieces.append(_literal(text, position, m.start()))
        name = m.group(1) or m.group(2)
        pieces.append(Var(m.group(0), group_name(name), FIELDS.get(name, GENERIC)))
        position = m.end()
    pieces.append(_literal(text, position, len(text)))
    return [p for p in pieces if p != ""]


def _literal(text: str, start: int, end: int) -> str:
    """Text between variables; a `$` there is not followed by a variable name."""
    return literal_between(text, start, end, "$", "is not a variable")


def _unwrap(text: str) -> str:
    """Accept `log_format name [escape=..] '...' '...';` as pasted from nginx.conf."""
    text = text.strip()
    if text.startswith("log_format ") or text.startswith("log_format\t"):
        quoted = [m.group(1) or m.group(2) or "" for m in _QUOTED.finditer(text)]
        if not quoted:
            raise InputError(
                Problem("log_format directive without a quoted format", field=LOG_FORMAT_FIELD)
            )
        text = "".join(quoted)
    return re.sub(r"\\([\"'\\])", r"\1", text)

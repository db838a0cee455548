"""Compile an Apache `LogFormat` string into a `LineSpec`.

Apache takes `%t` (and `%{msec}t` etc.) when the request *starts*, unless the directive says
`%{end:...}t`; the spec records which so the reader places each request at its start. The
format may be pasted from httpd.conf, with `\\"` escapes or as a whole `LogFormat` line.
"""

from __future__ import annotations

import re

from linkgrad.weblog.linespec import (
    CLF_TIME,
    DURATION,
    GENERIC,
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

__all__ = ["DEFAULT_LOG_FORMAT", "HINTS", "QUOTED", "compile_apache", "directive_field"]

# Apache "common" plus the response time in microseconds, which "common" lacks.
DEFAULT_LOG_FORMAT = '%h %l %u %t "%r" %>s %b %D'

# Apache writes a '"' inside a value as \".
QUOTED = r'[^"\\]*(?:\\.[^"\\]*)*'

HINTS = {
    "time stamp": "%t, %{msec}t, %{usec}t or %{sec}t",
    "response time": "%D, %T, %{ms}T or %{us}T",
    "URL": "%r or %U%q",
}

_CLF_STRFTIME = "%d/%b/%Y:%H:%M:%S %z"
_EPOCH_SCALE_S = {"sec": 1.0, "msec": 1e-3, "usec": 1e-6}
_T_SCALE_S = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}

# Simple directives: letter -> field. `%t`, `%T` and `%D` depend on their argument.
_SIMPLE: dict[str, Field] = {
    "r": REQUEST,
    "U": Field(r'[^"]*?', url="path"),  # decoded: may contain spaces
    "q": Field(r'(?:\?[^\s"]*)?', url="query"),  # "?a=1" or empty
    "s": STATUS_FIELD,
    "h": Field(r"\S+"),
    "l": Field(r"\S+"),
    "b": Field(r"[0-9]+|-"),
}

_DIRECTIVE = re.compile(
    r"%(?P<mods>[<>!0-9,]*)(?:\{(?P<arg>[^}]*)\})?(?P<letter>\^t[io]|[a-zA-Z%])"
)
_CONFIG_LINE = re.compile(r'LogFormat\s+"((?:[^"\\]|\\.)*)"(?:\s+\S+)?\s*')


def compile_apache(log_format: str | None = None) -> LineSpec:
    """The spec for `log_format` (a bare format or an httpd.conf `LogFormat` line)."""
    text = _unwrap(log_format if log_format is not None else DEFAULT_LOG_FORMAT)
    return compile_spec(_pieces(text), f"Apache LogFormat {text!r}", HINTS, QUOTED)


def directive_field(letter: str, arg: str | None) -> Field:
    """What one `%...` directive looks like in a log line and what it means."""
    if letter == "t":
        return _time_field(arg)
    if letter == "D":
        return Field(DURATION, duration_scale_s=1e-6, duration_resolution_s=1e-6)
    if letter == "T" and arg in _T_SCALE_S:
        scale = _T_SCALE_S[arg]
        return Field(DURATION, duration_scale_s=scale, duration_resolution_s=scale)
    return GENERIC if letter == "T" else _SIMPLE.get(letter, GENERIC)


def _time_field(arg: str | None) -> Field:
    """`%t`, `%{msec}t`, `%{end:usec}t`, `%{begin:%d/%b/%Y:%H:%M:%S %z}t`, ..."""
    if arg is None:
        clf = Stamp("clf", at_end=False, resolution_s=1.0)
        return Field(CLF_TIME, before=r"\[", after=r"\]", stamp=clf)
    at_end = arg.startswith("end:")
    what = arg.removeprefix("end:").removeprefix("begin:")
    if what in _EPOCH_SCALE_S:
        scale = _EPOCH_SCALE_S[what]
        return Field(r"[0-9]+", stamp=Stamp("epoch", at_end, resolution_s=scale, scale_s=scale))
    if what == _CLF_STRFTIME:
        return Field(CLF_TIME, stamp=Stamp("clf", at_end, resolution_s=1.0))
    return GENERIC  # another strftime format: not a time stamp we can read


def _pieces(text: str) -> list[str | Var]:
    """Split a format into literal strings and directives (`%%` becomes a literal `%`)."""
    pieces: list[str | Var] = []
    position = 0
    for m in _DIRECTIVE.finditer(text):
        pieces.append(_literal(text, position, m.start()))
        position = m.end()
        letter, arg = m.group("letter"), m.group("arg")
        if letter == "%":
            pieces.append("%")
            continue
        name = group_name(letter if arg is None else f"{letter}_{arg}")
        pieces.append(Var(m.group(0), name, directive_field(letter, arg)))
    pieces.append(_literal(text, position, len(text)))
    return [p for p in pieces if p != ""]


def _literal(text: str, start: int, end: int) -> str:
    """Text between directives; a `%` there starts no valid directive."""
    return literal_between(text, start, end, "%", "is no directive")


def _unwrap(text: str) -> str:
    """Accept `LogFormat "..." nickname` and `\\"` escapes as written in httpd.conf."""
    text = text.strip()
    m = _CONFIG_LINE.fullmatch(text)
    if m:
        text = m.group(1)
    return re.sub(r'\\(["\\])', r"\1", text)

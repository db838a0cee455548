"""A user's or a run's file read strictly: UTF-8 text of a bounded size, and JSON parsed
without NaN, Infinity or a duplicate key; every problem reported as file:line: field: message.
Plain Python and pydantic: the YAML loader (`coordinator.config.yamlconf`) builds on it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from linkgrad.errors import InputError, Problem

__all__ = ["MAX_BYTES", "loads_json", "problems_of", "read_json", "read_text"]

MAX_BYTES = 64 * 2**20  # a configuration or run record larger than this is not one

_KeyPath = tuple[int | str, ...]


def read_text(path: str | Path, what: str = "") -> str:
    """A file's text (UTF-8, a byte-order mark allowed); InputError naming the file, and the
    line of the first byte that is not UTF-8."""
    path = Path(path)
    label = f" ({what})" if what else ""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise InputError(Problem(f"cannot read{label}: {e.strerror or e}", str(path))) from e
    if len(data) > MAX_BYTES:
        raise InputError(Problem(f"larger than {MAX_BYTES // 2**20} MB: not a linkgrad "
                                 f"file{label}", str(path)))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(Problem(f"not UTF-8 text{label}: byte {data[e.start]:#04x} at "
                                 f"offset {e.start}", str(path), line)) from e


def problems_of(e: ValidationError, source: str, prefix: _KeyPath = (),
                line_of: Callable[[_KeyPath], int | None] | None = None) -> list[Problem]:
    """pydantic's errors as Problems at their field (and line, when `line_of` knows it)."""
    problems = []
    for err in e.errors():
        path = (*prefix, *err["loc"])
        message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        if err["type"] == "value_error":  # our own sentence, without pydantic's prefix
            message = message.removeprefix("Value error, ")
        problems.append(Problem(message, source, line_of(path) if line_of else None,
                                ".".join(str(p) for p in path) or None))
    return problems



def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as infinity
        raise ValueError(f"{text} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:  # free-form: any JSON object
    data = dict(pairs)
    if len(data) != len(pairs):
        twice = sorted({k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i])})
        raise ValueError(f"key {twice[0]!r} is given twice")
    return data


def loads_json(text: str, source: str) -> Any:
    """Strict JSON: no NaN, Infinity or out-of-range number, no duplicate key; InputError
    naming the file and line (json's decoder stops deep nesting with a RecursionError)."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float,
                          object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        raise InputError(Problem(f"not valid JSON: {e.msg}", source, e.lineno)) from e
    except ValueError as e:  # from the hooks, or an int of more than 4300 digits
        raise InputError(Problem(f"not valid JSON: {e}", source)) from e
    except RecursionError as e:
        raise InputError(Problem("nested too deeply", source)) from e


def read_json(path: str | Path, what: str = "") -> Any:
    """A JSON file read strictly (`loads_json`); InputError naming it."""
    return loads_json(read_text(path, what), str(path))

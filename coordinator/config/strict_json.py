"""JSON as other tools parse it: never NaN or Infinity (Python's json writes both, and
strict parsers refuse the whole document). A value that is not a finite number is written
null and, in a command's output, named in a note, so a missing value is never silent."""

from __future__ import annotations

import json
import math
from typing import Any

NOTE_KEY = "null_values"  # in --json output: the fields written null because not finite


def finite_or_null(data: Any, path: tuple[str, ...] = ()) -> tuple[Any, list[str]]:
    """`data` with every NaN or infinity replaced by None, and the paths replaced."""
    if isinstance(data, float) and not math.isfinite(data):
        return None, [f"{'.'.join(path) or '(the value)'}: {data!r}"]
    if isinstance(data, dict):
        out, notes = {}, []
        for key, value in data.items():
            out[key], found = finite_or_null(value, (*path, str(key)))
            notes += found
        return out, notes
    if isinstance(data, list | tuple):
        items = [finite_or_null(v, (*path, str(i))) for i, v in enumerate(data)]
        return [v for v, _ in items], [n for _, found in items for n in found]
    return data, []


def dumps(data: Any, indent: int | None = 2, note: bool = True) -> str:
    """Strict JSON of `data`. With `note`, a dict's replaced values are listed under
    NOTE_KEY as 'field.path: nan' (the reader learns which nulls mean 'not a number')."""
    clean, replaced = finite_or_null(data)
    if note and replaced and isinstance(clean, dict):
        clean = {**clean, NOTE_KEY: [f"{r} (not a finite number)" for r in replaced]}
    return json.dumps(clean, indent=indent, allow_nan=False, default=str)

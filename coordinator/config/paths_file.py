"""`paths.json` read back into the `PathsResult` that wrote it (linkgrad.paths is plain
dataclasses: pydantic validates them here), a wrong field named by file and field."""

from __future__ import annotations

from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from coordinator.config.run_dir import read_run_file
from linkgrad.errors import InputError
from linkgrad.paths.result import PathsResult
from linkgrad.reading import problems_of

__all__ = ["read_paths_file"]

_PATHS = TypeAdapter(PathsResult)


def read_paths_file(path: Path) -> PathsResult:
    """A run's paths.json, or one `linkgrad paths --output` wrote."""
    data = read_run_file(path, "the causal paths")
    try:
        return _PATHS.validate_python(data)
    except ValidationError as e:
        raise InputError(problems_of(e, str(path))) from e

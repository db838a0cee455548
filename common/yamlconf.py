"""YAML files validated by pydantic, with every problem reported as file:line: field: message.

pydantic knows paths, not lines; the YAML node tree knows lines. Composing both gives errors a
person can act on without opening the schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from common.errors import InputError, Problem

Model = TypeVar("Model", bound=BaseModel)


def _line_of(node: yaml.Node | None, path: tuple[int | str, ...]) -> int | None:
    """The 1-based line of the node at `path` (or of its nearest existing parent)."""
    line = node.start_mark.line + 1 if node is not None else None
    for key in path:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == key), None)
            if match is None:
                key_node = next((k for k, _ in node.value if k.value == key), None)
                return key_node.start_mark.line + 1 if key_node else line
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            return line
        line = node.start_mark.line + 1
    return line


def parse_yaml(text: str, model: type[Model], source: str) -> Model:
    """Validate YAML text against `model`; InputError listing every problem with its line."""
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InputError(Problem(f"not valid YAML: {getattr(e, 'problem', e)}", source,
                                 line)) from e
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as e:
        problems = []
        for err in e.errors():
            path = tuple(err["loc"])
            message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(Problem(message, source, _line_of(root, path),
                                    ".".join(str(p) for p in path) or None))
        raise InputError(problems) from e


def line_of(path: Path, keys: tuple[int | str, ...]) -> int | None:
    """The line of a field of a YAML file that already validated (for later checks)."""
    return _line_of(yaml.compose(path.read_text()), keys)


def load_yaml(path: str | Path, model: type[Model]) -> Model:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(Problem(f"cannot read: {e.strerror}", str(path))) from e
    return parse_yaml(text, model, str(path))

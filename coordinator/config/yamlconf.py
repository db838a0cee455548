"""The user's files and a run's records, read strictly: YAML validated by pydantic, JSON parsed
without NaN or Infinity, every problem reported as file:line: field: message.

pydantic knows paths, not lines; the YAML node tree knows lines. Composing both gives errors a
person can act on without opening the schema. What a file can be besides what it claims is
refused here, before any model sees it: bytes that are not UTF-8, a duplicate key (YAML takes
the last one silently), a YAML tag other than plain data (binary, timestamps, sets), nesting
deeper than any configuration needs (10,000 brackets exhaust Python's stack), an integer of
thousands of digits, and NaN or Infinity where a number is meant.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from linkgrad.errors import InputError, Problem
from linkgrad.reading import problems_of, read_text

Model = TypeVar("Model", bound=BaseModel)

MAX_DEPTH = 64  # nesting of mappings and lists; linkgrad's files need 5
MAX_NODES = 100_000  # values once aliases are expanded (a few aliases can make billions)

# Plain data only: YAML's other types reach a model as something no field means (bytes from
# !!binary, a datetime from an unquoted date, a set).
_REFUSED_TAGS = ("binary", "timestamp", "set", "omap", "pairs")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without the non-JSON types, and dates left as the strings they look like."""


_StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


# YAML 1.1 reads `1e308` and `1e-3` as strings (its floats need a dot); every other reader
# (and YAML 1.2) sees a number, and so do linkgrad's users.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _refuse_tag(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    raise yaml.constructor.ConstructorError(
        None, None, f"the YAML tag {node.tag.rsplit(':', 1)[-1]!r} is not allowed here: give a "
        "plain value (string, number, true/false, list or mapping)", node.start_mark)


_DECIMAL_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_DECIMAL_FLOAT = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?"
                            r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")


class _BadValue(yaml.constructor.ConstructorError):
    """Valid YAML whose value is refused (numbers that differ by reader, a tag the value
    is not): named by its field."""


def _ambiguous_number(node: yaml.Node, value: float) -> _BadValue:
    """YAML 1.1 reads `022` as 18, `1:30` as 90 and `0x16` as 22, where YAML 1.2 and people
    read other things (22, a time, text): refused, with both readings, rather than guessed."""
    full = node.value
    text = full if len(full) <= 40 else full[:37] + "..."
    if isinstance(value, int):  # float() of a 300-digit hex would overflow
        shown: object = value if value.bit_length() < 64 else \
            f"a number of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    else:
        shown = ("a number too large for a float" if math.isinf(value) else
                 int(value) if value.is_integer() else value)
    kind = ("an octal number" if re.fullmatch(r"[-+]?0[0-7_]+", full) else
            "a base-60 number" if ":" in full else
            "a hexadecimal number" if "x" in full else
            "a binary number" if "b" in full else "a number with underscores")
    return _BadValue(
        None, None, f"{text!r} is {kind} in YAML 1.1 (it would read as {shown}): write the "
        "number in plain decimal, or quote it if text is meant", node.start_mark)


def _not_a(node: yaml.Node, what: str) -> _BadValue:
    """An explicit tag on a value that is not one (`!!float "abc"`)."""
    full = str(node.value)
    text = full if len(full) <= 40 else full[:37] + "..."
    return _BadValue(
        None, None, f"{text!r} is not {what}, as its tag {node.tag.rsplit(':', 1)[-1]!r} "
        "says", node.start_mark)


def _int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    try:
        value = yaml.SafeLoader.construct_yaml_int(loader, node)  # type: ignore[arg-type]
    except (ValueError, IndexError):  # IndexError: PyYAML reads "" past its end
        if re.fullmatch(r"[-+]?[0-9_]{4300,}", node.value):  # Python's limit on int()
            raise _BadValue(None, None, "an integer of more than 4300 digits",
                            node.start_mark) from None
        raise _not_a(node, "an integer") from None
    if not _DECIMAL_INT.fullmatch(node.value):
        raise _ambiguous_number(node, value)
    return value


def _float(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    try:
        value = yaml.SafeLoader.construct_yaml_float(loader, node)  # type: ignore[arg-type]
    except OverflowError:  # PyYAML sums a long base-60 float as an int first
        value = math.inf
    except (ValueError, IndexError):
        raise _not_a(node, "a number") from None
    if not _DECIMAL_FLOAT.fullmatch(node.value):  # 1:30.5 (base 60), 1_000.5
        raise _ambiguous_number(node, value)
    return value


def _bool(loader: yaml.SafeLoader, node: yaml.Node) -> bool:
    try:
        return yaml.SafeLoader.construct_yaml_bool(loader, node)  # type: ignore[arg-type]
    except KeyError:
        raise _not_a(node, "true or false") from None


def _null(loader: yaml.SafeLoader, node: yaml.Node) -> None:
    value = loader.construct_scalar(node)  # type: ignore[arg-type]
    if value not in ("", "~", "null", "Null", "NULL"):
        raise _not_a(node, "null")


for _tag in _REFUSED_TAGS:
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _float)
_StrictLoader.add_constructor("tag:yaml.org,2002:bool", _bool)
_StrictLoader.add_constructor("tag:yaml.org,2002:null", _null)


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


def _path_of(node: yaml.Node | None, mark: yaml.Mark, path: tuple[int | str, ...] = ()
             ) -> tuple[int | str, ...] | None:
    """The path of the value that starts at `mark` (to name the field of a scalar's error)."""
    if node is None:
        return None
    if isinstance(node, yaml.ScalarNode):
        return path if node.start_mark.index == mark.index else None
    pairs = ([(k.value, v) for k, v in node.value] if isinstance(node, yaml.MappingNode) else
             list(enumerate(node.value)))
    for key, child in pairs:
        if (found := _path_of(child, mark, (*path, key))) is not None:
            return found
    return None


def nesting_problem(text: str, source: str) -> Problem | None:
    """The first place YAML (or JSON, which is YAML's flow style) nests deeper than MAX_DEPTH,
    found on the token stream (the scanner keeps no stack, the composer recurses)."""
    depth = 0
    opening = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken,
               yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)
    closing = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
    for token in yaml.scan(text, Loader=_StrictLoader):
        if isinstance(token, opening):
            depth += 1
            if depth > MAX_DEPTH:
                return Problem(f"nested more than {MAX_DEPTH} levels deep", source,
                               token.start_mark.line + 1)
        elif isinstance(token, closing):
            depth -= 1
    return None


def expanded_size(node: yaml.Node | None) -> int:
    """Values in the document once every alias is expanded (as validation walks it); nodes
    an alias shares are counted once per use, their sizes remembered."""
    sizes: dict[int, int] = {}

    def size(n: yaml.Node) -> int:
        if id(n) not in sizes:
            children = [c for pair in n.value for c in pair] if isinstance(
                n, yaml.MappingNode) else n.value if isinstance(n, yaml.SequenceNode) else []
            sizes[id(n)] = 1 + sum(size(c) for c in children)
        return sizes[id(n)]

    return size(node) if node is not None else 0


def duplicate_keys(node: yaml.Node | None, source: str) -> list[Problem]:
    """Every key given twice in one mapping, with both lines (YAML would keep the last)."""
    problems, stack, seen_nodes = [], [node] if node is not None else [], set()
    while stack:
        current = stack.pop()
        if id(current) in seen_nodes:  # an alias's node: checked once
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key, value in current.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else id(key)
                if name in seen:
                    first = seen[name].start_mark.line + 1
                    problems.append(Problem(f"given twice (lines {first} and "
                                            f"{key.start_mark.line + 1})", source,
                                            key.start_mark.line + 1, str(name)))
                else:
                    seen[name] = key
                stack.append(value)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return sorted(problems, key=lambda p: p.line or 0)


def _yaml_error(e: yaml.YAMLError, text: str, source: str) -> InputError:
    mark = getattr(e, "problem_mark", None)
    if isinstance(e, yaml.reader.ReaderError):  # a control character: a position, no line
        line = text.count("\n", 0, e.position) + 1
        return InputError(Problem(f"not valid YAML: character {e.character!r} is not allowed "
                                  "(a binary file?)", source, line))
    line = mark.line + 1 if mark is not None else None
    return InputError(Problem(f"not valid YAML: {getattr(e, 'problem', None) or e}", source,
                              line))


def compose(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """The data of a YAML text and its node tree (for lines); InputError for anything that
    is not plain, finite, unambiguous YAML."""
    try:
        if (deep := nesting_problem(text, source)) is not None:
            raise InputError(deep)
        loader = _StrictLoader(text)
        try:
            root = loader.get_single_node()
            if expanded_size(root) > MAX_NODES:
                raise InputError(Problem(f"more than {MAX_NODES} values once its aliases are "
                                         "expanded", source))
            if problems := duplicate_keys(root, source):
                raise InputError(problems)
            try:
                data = loader.construct_document(root) if root is not None else None
            except _BadValue as e:
                where = _path_of(root, e.problem_mark)
                raise InputError(Problem(str(e.problem), source, e.problem_mark.line + 1,
                                         ".".join(map(str, where)) if where else None)) from e
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        raise _yaml_error(e, text, source) from e
    except RecursionError as e:  # not reached below MAX_DEPTH; kept as the last word
        raise InputError(Problem("nested too deeply", source)) from e
    if (bad := unusable_value(data)) is not None:
        where, message = bad
        raise InputError(Problem(message, source, _line_of(root, where),
                                 ".".join(map(str, where)) or None))
    return data, root


def unusable_value(data: Any, path: tuple[int | str, ...] = ()
                   ) -> tuple[tuple[int | str, ...], str] | None:
    """Where plain data holds a value no field means, and what it is: a NaN or an infinity
    (YAML's .nan, .inf), a NUL character (no path or name holds one)."""
    if isinstance(data, float) and not math.isfinite(data):
        return path, "not a finite number (NaN and infinity are not values)"
    if isinstance(data, str) and "\0" in data:
        return path, "holds a NUL character"
    items = data.items() if isinstance(data, dict) else enumerate(data) \
        if isinstance(data, list) else ()
    for key, value in items:
        if isinstance(key, str) and "\0" in key:
            return path, "a key holds a NUL character"
        if (found := unusable_value(value, (*path, key))) is not None:
            return found
    return None


def parse_yaml(text: str, model: type[Model], source: str) -> Model:
    """Validate YAML text against `model`; InputError listing every problem with its line."""
    data, root = compose(text, source)
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as e:
        raise InputError(problems_of(e, source, line_of=lambda path: _line_of(root, path))
                         ) from e
    except RecursionError as e:
        raise InputError(Problem("nested too deeply", source)) from e


def line_of(path: Path, keys: tuple[int | str, ...]) -> int | None:
    """The line of a field of a YAML file that already validated (for later checks)."""
    return _line_of(compose(read_text(path), str(path))[1], keys)


def load_yaml(path: str | Path, model: type[Model]) -> Model:
    return parse_yaml(read_text(path), model, str(path))



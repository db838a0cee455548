"""experiments/reference.yaml documents every field of an experiment file, truthfully: every
field of every model reachable from `Experiment` is in it (as a key, or a commented-out
`# field:`) within its own section; the file validates; and a value it gives is the model's
default unless that line says `# not the default`. A field added to the model without being
documented there fails this test."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import yaml
from pydantic import BaseModel

from coordinator.config.experiment import Experiment
from coordinator.config.experiment_file import load_experiment

REFERENCE = Path(__file__).resolve().parent.parent / "experiments" / "reference.yaml"
NOT_DEFAULT = "not the default"
# a key at the start of a line (after '- ' or '{'), or inside a flow mapping
_KEY = re.compile(r"(?:^\s*(?:-\s+)?\{?|[{,]\s*)([A-Za-z_][A-Za-z0-9_]*):(?=\s|$)")


def models(model: type[BaseModel] = Experiment, path: tuple[str, ...] = ()
           ) -> list[tuple[tuple[str, ...], type[BaseModel]]]:
    """Every pydantic model reachable from `model` through its fields' types (optional,
    tuples, lists, dicts...), with the field path that leads to it."""
    out = [(path, model)]

    def inner(annotation: object) -> list[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for arg in typing.get_args(annotation) for m in inner(arg)]

    for name, field in model.model_fields.items():
        for found in inner(field.annotation):
            out += models(found, (*path, name))
    return out


def _keys(text: str) -> list[tuple[int, int, str]]:
    """(line index, column, key) of every key of the file, commented-out ones too: '# ' is
    taken off a commented line, so '  # period_s:' sits where 'period_s:' would."""
    out = []
    for i, raw in enumerate(text.splitlines()):
        line = re.sub(r"^(\s*)# ", r"\1", raw) if raw.lstrip().startswith("# ") else raw
        line = re.split(r"\s#", line, maxsplit=1)[0]  # an end-of-line comment
        indent = len(line) - len(line.lstrip())
        out += [(i, indent, m[1]) for m in _KEY.finditer(line)]
    return out


def documented(text: str, path: tuple[str, ...]) -> set[str]:
    """The keys (written or commented out) in the block of `path`: top-level keys for the
    root, else every key below `path`'s key, at any depth, until the block ends."""
    keys = _keys(text)
    if not path:
        return {k for _, col, k in keys if col == 0}
    block = keys
    for part in path:
        start = next((n for n, (_, col, k) in enumerate(block) if k == part), None)
        if start is None:
            return set()
        _, col, _ = block[start]
        inside = []
        for line, c, k in block[start + 1:]:
            if c <= col and line != block[start][0]:
                break
            inside.append((line, c, k))
        block = inside
    return {k for _, _, k in block}


def undocumented(text: str) -> list[str]:
    return [".".join((*path, name)) or name for path, model in models()
            for name in model.model_fields if name not in documented(text, path)]


def test_every_field_of_every_model_is_documented_in_its_section():
    found = {m.__name__ for _, m in models()}
    assert found >= {"Experiment", "Host", "Ssh", "Nodes", "WebLog", "Parameters", "Workload"}
    assert undocumented(REFERENCE.read_text()) == []


def test_a_field_left_out_of_the_reference_is_found():
    text = REFERENCE.read_text()
    without = "\n".join(line for line in text.splitlines()
                        if not line.lstrip().startswith(("concurrent:", "# frontend_url:",
                                                         "#   timeout_s:")))
    assert undocumented(without) == ["frontend_url", "parameters.concurrent",
                                     "workload.timeout_s"]
    elsewhere = text.replace("port: 22,", "prt: 22,")
    assert "hosts.port" in undocumented(elsewhere)  # ssh's or nodes' 'ports' do not count


def test_the_reference_validates():
    experiment = load_experiment(REFERENCE)
    assert experiment.web_log is not None
    assert experiment.web_log.host == "web"
    assert experiment.parameters.exclude == ("->web",)


def _value_lines(text: str) -> list[tuple[str, BaseModel, str, int, str]]:
    """(section, its validated model, field, line, that line's comment) for every field the
    file gives a value to on the key's own line (a block below a key is checked key by key),
    in the top level and in every section that is one model."""
    experiment = Experiment.model_validate(yaml.safe_load(text))
    root = yaml.compose(text)
    lines = text.splitlines()
    out = []

    def walk(node: yaml.MappingNode, section: str, model: BaseModel) -> None:
        for key, value in node.value:
            if value.start_mark.line != key.start_mark.line:
                continue  # a block: its own keys are the values
            comment = lines[key.start_mark.line][value.end_mark.column:].partition("#")[2]
            out.append((section, model, key.value, key.start_mark.line + 1, comment))

    walk(root, "", experiment)
    for key, value in root.value:
        if isinstance(value, yaml.MappingNode) and isinstance(
                getattr(experiment, key.value), BaseModel):
            walk(value, key.value, getattr(experiment, key.value))
    return out


def test_every_value_given_is_the_default_unless_its_line_says_not():
    wrong = []
    checked = set()
    for section, model, name, line, comment in _value_lines(REFERENCE.read_text()):
        field = type(model).model_fields[name]
        if field.is_required():
            continue
        default = field.get_default(call_default_factory=True)
        is_default = getattr(model, name) == default
        says_not = NOT_DEFAULT in comment
        where = f"{section}.{name}" if section else name
        checked.add(where)
        if is_default == says_not:
            said = "says" if says_not else "does not say"
            wrong.append(f"line {line}: {where} = {getattr(model, name)!r}, the default is "
                         f"{default!r}, and the comment {said} {NOT_DEFAULT!r}")
    assert wrong == []
    assert {"parameters.half_width", "parameters.min_training_s", "parameters.concurrent",
            "parameters.exclude", "ssh.python", "output"} <= checked


def test_values_that_are_not_the_default_are_caught():
    text = REFERENCE.read_text().replace("  k: 8 ", "  k: 9 ")
    text = text.replace("half_width: '10%' ", "half_width: 0.2   ")
    bad = [(s, n) for s, m, n, _, c in _value_lines(text)
           if not type(m).model_fields[n].is_required()
           and (getattr(m, n) == type(m).model_fields[n].get_default(
               call_default_factory=True)) == (NOT_DEFAULT in c)]
    assert bad == [("parameters", "k"), ("parameters", "half_width")]


def test_the_model_walk_sees_through_optional_and_containers():
    class Leaf(BaseModel):
        x: int = 0

    class Root(BaseModel):
        a: Leaf | None = None
        b: tuple[Leaf, ...] = ()
        c: dict[str, list[Leaf]] = {}

    assert [(p, m.__name__) for p, m in models(Root)] == [
        ((), "Root"), (("a",), "Leaf"), (("b",), "Leaf"), (("c",), "Leaf")]

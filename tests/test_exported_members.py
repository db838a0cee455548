"""Every module of the `linkgrad` library says what it exports (httpx's
tests/test_exported_members.py is the model): `__all__` is exactly the public names the module
defines (a package's: what it imports from its own modules), each one there. A new public
function is added to `__all__` or made private: a choice, never an accident."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import linkgrad

LIBRARY = Path(linkgrad.__file__).resolve().parent
MODULES = sorted(
    ".".join(p.relative_to(LIBRARY.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in LIBRARY.rglob("*.py"))


def _bound_names(module: str) -> set[str]:
    """Public names bound at the module's top level: defined, or (a package) imported from
    inside itself. A TypeVar is typing's plumbing, not an export."""
    path = Path(importlib.import_module(module).__file__ or "")
    package = module if path.name == "__init__.py" else None
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            value = node.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "TypeVar":
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif (isinstance(node, ast.ImportFrom) and package and node.module
              and node.module.startswith(package + ".")):
            names |= {a.asname or a.name for a in node.names}
    return {n for n in names if not n.startswith("_")}


def test_every_module_is_found() -> None:
    assert {"linkgrad.spectral.estimate", "linkgrad.snap.classify", "linkgrad.paths.structural",
            "linkgrad.protocol.record", "linkgrad.weblog.read"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_all_is_what_the_module_defines(module: str) -> None:
    imported = importlib.import_module(module)
    exported = getattr(imported, "__all__", None)
    assert isinstance(exported, list), f"{module} has no __all__"
    assert len(exported) == len(set(exported)), f"{module}.__all__ names one twice"
    assert not [n for n in exported if not hasattr(imported, n)], module
    public = set(exported) - {"__version__"}
    assert public == _bound_names(module), (
        f"{module}: in __all__, not defined: {sorted(public - _bound_names(module))}; "
        f"defined, not in __all__: {sorted(_bound_names(module) - public)}")


def test_the_notebook_entry_points() -> None:
    from linkgrad import spectral

    assert {"gradients", "log_gradients", "TransactionGradient"} <= set(spectral.__all__)
    assert linkgrad.__all__ == ["__version__"]

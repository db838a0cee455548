"""The import rules of the layout (docs/layout.md): arrows point down only.

Every import statement is read, function-local ones included, so a rule cannot be dodged by
importing inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Top-level packages, bottom first; a package imports only itself and those of a lower rank.
RANK = {"linkgrad": 0, "injector": 1, "sniffer": 1, "testbed": 2, "coordinator": 3,
        "benchmarks": 4, "tests": 5}

# Below-rank imports allowed all the same: the fake remote is a tool as much as a test (the
# fuzz campaign makes a real run directory with it, in virtual time, without root).
ALLOWED_UPWARD = ("tests.fakes",)

PRESENTATION = ("rich", "argparse", "matplotlib")
REMOTE = ("paramiko", "fabric", "asyncssh")
# sub-package -> what it must never import (prefixes of module names)
FORBIDDEN = {
    # the library: numpy, scipy, pydantic and the standard library; no process started
    "linkgrad": ("yaml", "subprocess", "multiprocessing", "pyroute2", "netfilterqueue", "scapy",
                 *REMOTE, *PRESENTATION),
    # used by the sniffer on every host at its polling rate: numpy and the standard library
    "linkgrad.snap": ("pydantic", "scipy", "linkgrad.spectral", "linkgrad.weblog",
                      "linkgrad.protocol", "linkgrad.paths"),
    "linkgrad.paths": ("pydantic", "scipy", "linkgrad.spectral", "linkgrad.weblog",
                       "linkgrad.protocol", "linkgrad.snap"),
    # the daemons on every host: driven by argv and the protocol
    "injector": ("yaml", "rich", "matplotlib", *REMOTE),
    "sniffer": ("yaml", "rich", "matplotlib", *REMOTE),
    # the testbed reads no user file of its own: its topology file is the coordinator's to read
    "testbed": ("yaml", *REMOTE),
    "coordinator.config": ("coordinator.live", "coordinator.cli", *REMOTE, *PRESENTATION),
    "coordinator.live": ("coordinator.cli", "injector", "sniffer", *PRESENTATION),
    # (live may use coordinator.explain: passive-first chooses the links after the passive
    # phase; explain never imports live)
    # the nights' comparison: run directories in, checks out; no SSH, testbed or presentation
    # a run directory in, each gradient explained out: no SSH, testbed or presentation
    "coordinator.explain": ("coordinator.live", "coordinator.cli", "coordinator.regress",
                            "coordinator.export", *REMOTE, "testbed", "injector", "sniffer",
                            *PRESENTATION),
    "coordinator.regress": ("coordinator.live", "coordinator.cli", *REMOTE, "testbed",
                            "injector", "sniffer", *PRESENTATION),
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _sources() -> list[Path]:
    return sorted(p for top in RANK for p in (ROOT / top).rglob("*.py"))


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_the_sources_are_found() -> None:
    names = {_module(p) for p in _sources()}
    assert {"linkgrad.errors", "linkgrad.prediction", "coordinator.live.run",
            "coordinator.cli.main", "injector.daemon", "testbed.lifecycle"} <= names


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_top_level_package_imports_one_above_it(path: Path) -> None:
    mine = _module(path).split(".")[0]
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {name}" for line, name in _imports(path)
             if (top := name.split(".")[0]) in RANK and top != mine
             and RANK[top] >= RANK[mine]
             and not any(_within(name, allowed) for allowed in ALLOWED_UPWARD)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_layer_imports_only_what_its_docstring_allows(path: Path) -> None:
    module = _module(path)
    rules = [banned for layer, banned in FORBIDDEN.items() if _within(module, layer)]
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {name}" for line, name in _imports(path)
             for banned in rules for prefix in banned if _within(name, prefix)]
    assert not wrong, "\n".join(wrong)

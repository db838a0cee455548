"""A testbed topology file (`linkgrad testbed up --topology`, a suite's `topology:`): the
testbed's model read from YAML with file:line: field errors."""

from __future__ import annotations

from pathlib import Path

from coordinator.config.yamlconf import load_yaml
from testbed.topology import BUILT_IN, Topology


def load_topology(path: str | Path | None, app: str | None = None) -> Topology:
    """The topology in `path`, else the built-in one of `app` (default: rubis)."""
    if path is None:
        return BUILT_IN[app or "rubis"]
    return load_yaml(path, Topology)

"""The marks of tests that need more than Python: root, an installed tool, Mininet. Each skip
says why, in one wording, here only.

A module takes a composed list (`pytestmark = TESTBED`), a single test a marker
(`@needs_tool("nginx")`). A list starts with `pytest.mark.netns`, so `-m "not netns"` deselects
the module outright instead of skipping it test by test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.lifecycle import MININET_PYTHON

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root: network namespaces, iptables, daemons")


def needs_tool(name: str) -> pytest.MarkDecorator:
    """Skipped when `name` is not on PATH."""
    return pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} is not installed")


def _has_mininet() -> bool:
    """Debian's python3-mininet, for the interpreter the testbed runs Mininet with (the venv
    does not have it)."""
    if not Path(MININET_PYTHON).exists():
        return False
    return subprocess.run([MININET_PYTHON, "-c", "import mininet"], capture_output=True,
                          check=False).returncode == 0


needs_mininet = pytest.mark.skipif(not _has_mininet(),
                                   reason=f"Debian's mininet is not installed for {MININET_PYTHON}")

NETNS = [pytest.mark.netns, needs_root]  # namespaces and daemons in them
IPTABLES = [*NETNS, needs_tool("iptables")]  # ... and injection rules
TESTBED = [*NETNS, needs_tool("nginx")]  # the whole testbed (`linkgrad testbed up`)

"""A testbed for a test module (made in a private root, removed after), and the check that no
injection rule is left in any of its hosts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.lifecycle import down, up
from testbed.topology import DEFAULT

TESTBED_MARKS = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root"),
    pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed"),
]
LINKGRAD = str(Path(sys.executable).parent / "linkgrad")


def running_testbed(tag: str) -> Iterator[Path]:
    """Yields the root of a testbed `tag` that is up; always taken down."""
    root = Path(tempfile.mkdtemp(prefix="lgtest-", dir="/var/tmp"))
    root.chmod(0o755)
    try:
        up(DEFAULT, tag, root)
        yield root
        down(tag, root=root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def assert_no_rules(tag: str) -> None:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout.split()
    for ns in namespaces:
        if ns.startswith(f"lgtb-{tag}-"):
            rules = subprocess.run(["ip", "netns", "exec", ns, "iptables", "-S"],
                                   capture_output=True, text=True, check=True).stdout
            assert "LINKGRAD" not in rules, ns


def wait_until_gone(tag: str, needles: tuple[str, ...] = ("testbed.loadgen", "tail -n 0 -F"),
                    timeout_s: float = 20.0) -> None:
    """Until no process in the testbed's namespaces runs one of `needles` (a run's workload
    and log follower must end with it)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        left = [cmd for cmd in _commands(tag) if any(n in cmd for n in needles)]
        if not left:
            return
        assert time.monotonic() < deadline, f"still running after the run: {left}"
        time.sleep(0.2)


def _commands(tag: str) -> list[str]:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout.split()
    out = []
    for ns in (n for n in namespaces if n.startswith(f"lgtb-{tag}-")):
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                              check=True).stdout.split()
        for pid in pids:
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            out.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return out

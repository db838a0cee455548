"""What the testbed benchmarks share: the `linkgrad` beside this Python, a scratch root the
testbed's postgres and www-data users can reach, and running a `linkgrad` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LINKGRAD = str(Path(sys.executable).parent / "linkgrad")


def scratch_root(who: str) -> Path:
    """A fresh directory under /var/tmp, readable by all (mkdtemp's are private to root);
    exits with a message unless run as root, which the testbed needs."""
    if os.geteuid() != 0:
        sys.exit(f"{who}: needs root")
    root = Path(tempfile.mkdtemp(prefix="lgbench-", dir="/var/tmp"))
    root.chmod(0o755)
    return root


def linkgrad(who: str, env: dict[str, str], *argv: str) -> str:
    """`linkgrad ARGV`'s stdout; a failure exits with what it printed."""
    done = subprocess.run([LINKGRAD, *argv], capture_output=True, text=True, env=env,
                          timeout=3600, check=False)
    if done.returncode != 0:
        sys.exit(f"{who}: linkgrad {argv[0]} failed: {done.stdout}\n{done.stderr[-3000:]}")
    return done.stdout


def run_and_explain(who: str, experiment: Path, timeout_s: float
                    ) -> tuple[dict[str, Any], Path, float, dict[str, Any]]:
    """`linkgrad run EXPERIMENT --json`: its status, run directory, wall seconds and
    explain.json; exits naming `who` where the run left no directory."""
    started = time.perf_counter()
    done = subprocess.run([LINKGRAD, "run", str(experiment), "--json"], capture_output=True,
                          text=True, timeout=timeout_s, check=False)
    seconds = time.perf_counter() - started
    status = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
    if "run_dir" not in status:
        sys.exit(f"{who}: run {experiment.stem} failed: {done.stderr[-3000:]}")
    run_dir = Path(status["run_dir"])
    return status, run_dir, seconds, json.loads((run_dir / "explain.json").read_text())

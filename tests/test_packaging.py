"""A plain `pip install linkgrad` (no extras) into a fresh venv, used from outside the source
tree: the coordinator, the library and the sniffer work; the testbed's application packages
and the injector's C build are absent, and the injector says exactly what to install."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "experiments" / "example"
PACKAGED = ("pyproject.toml", "README.md", "linkgrad", "injector", "sniffer", "testbed",
            "coordinator")


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding `pip install ROOT` (a wheel built from the tree, not an editable install)."""
    where = tmp_path_factory.mktemp("plain")
    source = where / "source"  # a copy: setuptools builds in the tree it is given
    source.mkdir()
    for name in PACKAGED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                           "--disable-pip-version-check", str(source)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return venv


def _run(plain: Path, *argv: str, stdin: int | None = subprocess.DEVNULL
         ) -> subprocess.CompletedProcess[str]:
    # from the venv's own directory: nothing of the source tree on sys.path
    return subprocess.run([str(plain / "bin" / argv[0]), *argv[1:]], cwd=plain, stdin=stdin,
                          capture_output=True, text=True, timeout=120)


def test_the_version_and_the_commands(plain: Path) -> None:
    done = _run(plain, "linkgrad", "--version")
    assert done.returncode == 0, done
    assert done.stdout.startswith("linkgrad "), done
    listing = _run(plain, "linkgrad")
    assert listing.returncode == 0, listing
    assert {"gradient", "run", "paths"} <= set(listing.stdout.split()), listing.stdout


def test_the_shipped_example_gives_its_gradients(plain: Path) -> None:
    done = _run(plain, "linkgrad", "gradient", "--log", str(EXAMPLE / "access.log.gz"),
                "--log-format", (EXAMPLE / "log_format.txt").read_text().strip(),
                "--injection", str(EXAMPLE / "injection.json"), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["transactions"], result


def test_the_library_imports_from_a_notebook(plain: Path) -> None:
    code = ("import linkgrad, linkgrad.spectral, linkgrad.snap, linkgrad.paths, linkgrad.weblog; "
            "print(linkgrad.__version__)")
    done = _run(plain, "python", "-c", code)
    assert done.returncode == 0, done
    assert done.stdout.strip() != "0+unknown", done


def test_the_extras_are_left_out(plain: Path) -> None:
    for module in ("uvicorn", "starlette", "asyncpg", "aiomcache", "netfilterqueue"):
        done = _run(plain, "python", "-c", f"import {module}")
        assert done.returncode != 0, f"{module} was installed without its extra"


def test_the_sniffer_runs_and_the_injector_says_what_to_install(plain: Path) -> None:
    sniffer = _run(plain, "python", "-m", "sniffer")  # stdin closed: ready, then stopped
    events = [json.loads(line)["event"] for line in sniffer.stdout.splitlines()]
    assert sniffer.returncode == 0, sniffer
    assert events == ["ready", "stopped"], sniffer
    injector = _run(plain, "python", "-m", "injector")
    assert injector.returncode != 0
    assert "pip install 'linkgrad[injector]'" in injector.stderr, injector.stderr
    assert "libnetfilter-queue-dev" in injector.stderr
    assert "Traceback" not in injector.stderr

"""The wheelhouse `linkgrad deploy` copies to hosts, built here: linkgrad's own wheel (from its
source tree), and for each kind of host (CPython version, machine, glibc) every dependency as
a wheel for that host, at the versions installed here, so every host runs what was tested here.
netfilterqueue has no wheels: its source goes along and is built on the host (against Debian's
libnetfilter-queue-dev). Hosts often cannot reach a package index; this machine can.

Kept under ~/.cache/linkgrad/wheelhouse, keyed by linkgrad's source digest and the host kind,
so a second deploy downloads nothing. pip does the work (`pip wheel`, `pip download`): it is
the tool that knows wheels' platform tags.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from linkgrad.errors import RuntimeFailure

__all__ = ["HostKind", "Wheelhouse", "build_linkgrad_wheel", "dependencies_for", "kind_of",
           "platform_tags", "project_root", "source_digest"]

PACKAGES = ("linkgrad", "coordinator", "injector", "sniffer", "testbed")
# built on the host from source (no wheels on PyPI), with the build tools it needs: its
# setup.py asks for Cython when pip reads its metadata, though the C it ships needs none
FROM_SOURCE = ("netfilterqueue",)
BUILD_TOOLS = ("pip", "setuptools", "wheel", "cython")
OLDEST_MANYLINUX = 5  # manylinux1 is glibc 2.5


@dataclass(frozen=True)
class HostKind:
    """What a binary wheel must fit: CPython X.Y on a glibc Linux of this machine type."""

    python: tuple[int, int]
    machine: str
    glibc: tuple[int, int]

    @property
    def key(self) -> str:
        return (f"cp{self.python[0]}{self.python[1]}-{self.machine}-"
                f"glibc{self.glibc[0]}.{self.glibc[1]}")


def kind_of(python: tuple[int, ...], machine: str, glibc: tuple[int, int]) -> HostKind:
    return HostKind((python[0], python[1]), machine, glibc)


def platform_tags(kind: HostKind) -> list[str]:
    """Every manylinux tag a wheel for this host may carry, newest first (PEP 600, and the
    older names PEP 599's manylinux2014/2010 and manylinux1 use for glibc 2.17/2.12/2.5)."""
    major, minor = kind.glibc
    if major != 2:
        return []
    arch = kind.machine
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, OLDEST_MANYLINUX - 1, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{arch}" for m, name in legacy.items() if m <= minor]
    return tags


def project_root() -> Path:
    """linkgrad's source tree (its pyproject.toml beside the packages), which the wheel is
    built from."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or 'name = "linkgrad"' not in pyproject.read_text():
        raise RuntimeFailure(f"deploy builds linkgrad's wheel from its source tree, and this "
                             f"linkgrad ({root}) was installed without one: run deploy from a "
                             "checkout (git clone, then scripts/setup)")
    return root


def _source_files(root: Path) -> list[Path]:
    files = [root / "pyproject.toml", root / "README.md"]
    for package in PACKAGES:
        files += [p for p in (root / package).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    return sorted(files)


def source_digest(root: Path) -> str:
    """What identifies this linkgrad: a digest of its source files (their paths and contents),
    since a checkout's version number does not change with every commit."""
    h = hashlib.sha256()
    for path in _source_files(root):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _pip(*args: str, what: str) -> None:
    # the machine's pip configuration stays out of it: no extra index or constraint may change
    # what is built or fetched (pip reads no file when PIP_CONFIG_FILE is os.devnull)
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True,
                          text=True, env=env, timeout=1800)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        raise RuntimeFailure(f"{what}: pip {args[0]} exited {done.returncode}:\n{tail}")


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "linkgrad" / "wheelhouse"


def build_linkgrad_wheel(root: Path, digest: str, cache: Path) -> Path:
    """linkgrad's wheel for this source digest, built once. Built from a copy of the tree:
    setuptools writes build/ and *.egg-info where it builds."""
    out = cache / f"linkgrad-{digest}"
    found = sorted(out.glob("linkgrad-*.whl"))
    if found:
        return found[0]
    with tempfile.TemporaryDirectory(prefix="linkgrad-wheel-") as tmp:
        tree = Path(tmp) / "src"
        tree.mkdir()
        for path in _source_files(root):
            target = tree / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        built = Path(tmp) / "out"
        _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(built), str(tree),
             what="building linkgrad's wheel")
        wheels = sorted(built.glob("linkgrad-*.whl"))
        if not wheels:
            raise RuntimeFailure(f"building linkgrad's wheel: pip made none in {built}")
        out.mkdir(parents=True, exist_ok=True)
        final = out / wheels[0].name
        shutil.copy2(wheels[0], final.with_suffix(".part"))
        os.replace(final.with_suffix(".part"), final)
        return final


def installed_versions() -> dict[str, str]:
    """Every distribution installed here, by its normalized name: the versions hosts get."""
    out = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out[name.lower().replace("_", "-")] = dist.version
    return out


def dependencies_for(kind: HostKind, linkgrad_wheel: Path, cache: Path) -> Path:
    """A directory of every wheel linkgrad needs on a host of `kind` (and the sources built
    there), fetched once per kind. RuntimeFailure naming what has no wheel for that host."""
    out = cache / f"deps-{kind.key}"
    complete = out / "COMPLETE"
    if complete.is_file():
        return out
    versions = installed_versions()
    tags = platform_tags(kind)
    if not tags:
        raise RuntimeFailure(f"no manylinux wheels fit glibc {kind.glibc}")
    with tempfile.TemporaryDirectory(prefix="linkgrad-deps-") as tmp:
        fetched = Path(tmp) / "deps"
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text("".join(f"{name}=={v}\n" for name, v in sorted(versions.items())
                                       if name != "linkgrad"))
        python = f"{kind.python[0]}.{kind.python[1]}"
        abi = f"cp{kind.python[0]}{kind.python[1]}"
        platforms = [a for t in tags for a in ("--platform", t)]
        _pip("download", "--quiet", "--only-binary=:all:", "--python-version", python,
             "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none",
             *platforms, "--constraint", str(constraints), "--dest", str(fetched),
             str(linkgrad_wheel), *BUILD_TOOLS,
             what=f"fetching linkgrad's dependencies for {kind.key}")
        for name in FROM_SOURCE:
            pinned = f"{name}=={versions[name]}" if name in versions else name
            _pip("download", "--quiet", "--no-deps", f"--no-binary={name}", "--dest",
                 str(fetched), pinned, what=f"fetching {name}'s source")
        (fetched / linkgrad_wheel.name).unlink(missing_ok=True)  # travels on its own
        (fetched / "COMPLETE").write_text("".join(f"{p.name}\n" for p in
                                                  sorted(fetched.iterdir())))
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(fetched), str(out))
    return out


@dataclass(frozen=True)
class Wheelhouse:
    """What one host kind gets: linkgrad's wheel and the directory of its dependencies."""

    linkgrad_wheel: Path
    dependencies: Path

    def files(self) -> list[Path]:
        return [self.linkgrad_wheel, *sorted(p for p in self.dependencies.iterdir()
                                             if p.name != "COMPLETE")]

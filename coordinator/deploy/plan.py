"""What `linkgrad deploy` does on each host, decided from its facts alone (pure), and the
table it ends with."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Literal

from coordinator.deploy.host_facts import FEATURES, MIN_PYTHON, HostFacts, feature_state
from coordinator.deploy.wheelhouse import HostKind, kind_of

__all__ = ["HostOutcome", "HostPlan", "manifest", "plan_host", "venv_of"]

Action = Literal["present", "install", "cannot"]
# a host that lacks one of these cannot do its part in a run (inject, or read sockets)
NEEDED = ("nfqueue", "sock_diag")
APT_FOR_BUILD = "apt install gcc python3-dev libnetfilter-queue-dev"


def venv_of(python: str) -> str | None:
    """The venv `ssh.python` is the interpreter of (`V/bin/python`, `V/bin/python3`,
    `V/bin/python3.11`), or None for a bare command such as `python3`."""
    path = PurePosixPath(python)
    if path.parent.name != "bin" or not re.fullmatch(r"python(3(\.\d+)?)?", path.name) \
            or len(path.parts) < 3:
        return None
    return str(path.parent.parent)


def manifest(version: str, digest: str, kind: HostKind, injector: bool) -> str:
    """The record deploy leaves in a venv it made: a host whose record matches needs
    nothing."""
    return json.dumps({"linkgrad": version, "source": digest, "host": kind.key,
                       "injector": injector}, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class HostPlan:
    name: str
    action: Action
    why: str  # "cannot": the reasons; "install": new or which record it replaces
    kind: HostKind | None = None
    injector: bool = False
    manifest: str = ""
    warnings: tuple[str, ...] = ()


def _cannot(name: str, why: str, warnings: list[str]) -> HostPlan:
    return HostPlan(name, "cannot", why, warnings=tuple(warnings))


def plan_host(name: str, facts: HostFacts, venv: str, version: str, digest: str) -> HostPlan:
    """Install, nothing to do, or cannot (and why), for one host."""
    warnings = []
    for feature in FEATURES:
        state, why = feature_state(facts, feature)
        if state != "yes":
            what = FEATURES[feature][3]
            warnings.append(f"{feature} {'missing' if state == 'no' else 'not known'}: {why} "
                            f"({what})")
    if not facts.root and not facts.sudo:
        warnings.append("the SSH user is not root and has no password-less sudo: the "
                        "daemons need root (docs/hosts.md, 'Users and sudo')")
    if facts.occupied:
        return _cannot(name, f"{venv} is there and deploy did not make it: it installs only "
                       "into a venv of its own, new or empty (give ssh.python another path)",
                       warnings)
    if facts.python is None:
        return _cannot(name, "no python3", warnings)
    shown = ".".join(map(str, facts.python))
    if not facts.python_fits:
        need = ".".join(map(str, MIN_PYTHON))
        return _cannot(name, f"python3 is {shown} ({facts.python_path}): linkgrad needs "
                       f"{need} or later", warnings)
    if not facts.venv_module:
        return _cannot(name, f"python3 {shown} has no venv module", warnings)
    if facts.glibc is None:
        return _cannot(name, "no glibc (musl?): the wheels deploy brings are manylinux ones",
                       warnings)
    missing = facts.builds_injector
    if missing:
        warnings.append(f"no injector: its C build lacks {', '.join(missing)} "
                        f"({APT_FOR_BUILD})")
    kind = kind_of(facts.python, facts.machine, facts.glibc)
    wanted = manifest(version, digest, kind, injector=not missing)
    plan = HostPlan(name, "install", "", kind, not missing, wanted, tuple(warnings))
    if facts.installed == wanted:
        return HostPlan(name, "present", "", kind, not missing, wanted, tuple(warnings))
    if not facts.installed:
        return replace(plan, why="not there")
    try:
        old = json.loads(facts.installed)
        was = f"replaces linkgrad {old.get('linkgrad')} ({old.get('source')})"
    except (json.JSONDecodeError, AttributeError):
        was = "replaces an unreadable record"
    return replace(plan, why=was)


@dataclass
class HostOutcome:
    """A host's row in deploy's table: its plan (None: never probed) and what happened."""

    name: str
    plan: HostPlan | None
    facts: HostFacts | None
    result: str  # present / installed / would install / cannot / failed
    detail: str = ""
    seconds: float | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """linkgrad is there, current, with its injector, on a kernel that can run it."""
        if self.result not in ("present", "installed") or self.plan is None:
            return False
        return self.plan.injector and self.facts is not None \
            and all(feature_state(self.facts, f)[0] != "no" for f in NEEDED)

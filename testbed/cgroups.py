"""Each testbed host's own cgroup: made before the host's first process starts, joined by every
process the testbed starts in the host, removed by `down`.

Network namespaces share the machine's /proc/stat, so the host probe measures a testbed host as
its cgroup (`sniffer.host_probe.read_cgroup`). sshd joins it, so everything started over SSH
(the sniffer, the injector, a workload) is in it too; a server's children and a daemonized
server stay in their parent's cgroup. The host sees the hierarchies at /sys/fs/cgroup as the
machine does (`testbed.cgroup_mounts.host_mounts`). Names are generated from the tag, so
removal is by ownership:

- cgroup v1 (used wherever one of its controllers is mounted):
  `/sys/fs/cgroup/<controller>/linkgrad-<tag>/<host>` for each of cpu, cpuacct, cpuset, memory,
  blkio and pids that is mounted there;
- cgroup v2 (the unified hierarchy mounted at /sys/fs/cgroup):
  `/sys/fs/cgroup/linkgrad-<tag>/<host>`, with the controllers that the root hands down
  enabled in `linkgrad-<tag>`'s cgroup.subtree_control (the root's own is not changed).

Where no hierarchy can be written (none is mounted, or it is mounted read-only as in a
container) the testbed is built without them (`unavailable` says why) instead of refusing:
gradients do not need cgroups, and the host probe says of each host that it has no cgroup of
its own. Any other failure to make one is an error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from linkgrad.errors import RuntimeFailure

__all__ = ["CGROUP_ROOT", "JOIN", "NO_LIMIT_BPS", "V1_CONTROLLERS", "V2_CONTROLLERS",
           "Hierarchy", "cgroup_dirs", "cpuset_values", "detect", "distinct", "host_cgroup_dirs",
           "join_then_exec", "leftover_cgroups", "make_testbed_cgroups", "remove_testbed_cgroups",
           "remove_tree", "subtree_control", "tag_dirs", "throttle_rule", "unavailable"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "blkio", "pids")
V2_CONTROLLERS = ("cpu", "cpuset", "memory", "io", "pids")
# v1 counts a cgroup's block I/O (blkio.throttle.io_service_bytes) only once blk-throttle is
# on for the device, which takes a rule: 1 PiB/s is one that never throttles
NO_LIMIT_BPS = 1 << 50


@dataclass(frozen=True)
class Hierarchy:
    version: int  # 1 or 2
    root: Path  # v1: where each controller is mounted (root/<controller>); v2: its root
    controllers: tuple[str, ...]  # v1: those mounted; v2: those the root hands down


def detect(root: Path = CGROUP_ROOT) -> Hierarchy | None:
    """The hierarchy this machine's hosts get cgroups in; None: none is mounted at `root`."""
    v1 = tuple(c for c in V1_CONTROLLERS if (root / c / "tasks").exists())  # `tasks`: v1 only
    if v1:
        return Hierarchy(1, root, v1)
    if not (root / "cgroup.controllers").exists():
        return None
    handed_down = _read(root / "cgroup.subtree_control").split()
    return Hierarchy(2, root, tuple(c for c in V2_CONTROLLERS if c in handed_down))


def tag_dirs(h: Hierarchy, tag: str) -> list[Path]:
    """The testbed's `linkgrad-<tag>` directories: one per v1 controller, the one of v2."""
    if h.version == 1:
        return [h.root / c / f"linkgrad-{tag}" for c in h.controllers]
    return [h.root / f"linkgrad-{tag}"]


def cgroup_dirs(h: Hierarchy, tag: str, host: str) -> dict[str, Path]:
    """controller -> the host's cgroup directory in it. v2 has one directory for all; with no
    controller handed down it is keyed `cgroup2` (its cpu.stat still counts CPU time)."""
    if h.version == 1:
        return {c: h.root / c / f"linkgrad-{tag}" / host for c in h.controllers}
    leaf = h.root / f"linkgrad-{tag}" / host
    return {c: leaf for c in h.controllers} or {"cgroup2": leaf}


def host_cgroup_dirs(tag: str, host: str, root: Path = CGROUP_ROOT) -> dict[str, Path]:
    """controller -> the directory of host `host` of testbed `tag`, for the controllers this
    machine has mounted (whether made or not); {} where there is no hierarchy."""
    h = detect(root)
    return {} if h is None else cgroup_dirs(h, tag, host)


def distinct(dirs: Iterable[Path]) -> list[Path]:
    """`dirs` once each by their real path: v1 controllers mounted together (cpu,cpuacct with
    a link for each name) are one directory."""
    seen, out = set(), []
    for d in dirs:
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            out.append(d)
    return out


def unavailable(h: Hierarchy | None) -> str | None:
    """Why this machine's testbed hosts cannot have cgroups of their own; None: they can."""
    note = "; each testbed host is measured as the machine"
    if h is None:
        return (f"no cgroup v1 controller ({', '.join(V1_CONTROLLERS)}) nor a cgroup v2 "
                f"hierarchy is mounted at {CGROUP_ROOT}{note}")
    tops = [h.root / c for c in h.controllers] if h.version == 1 else [h.root]
    blocked = [str(t) for t in tops if not os.access(t, os.W_OK)]  # EROFS too, even for root
    if blocked:
        return f"cannot write {', '.join(blocked)} (read-only, as in a container){note}"
    return None


def throttle_rule(disk: str) -> str:
    """A blkio.throttle.*_bps_device line that never throttles `disk` (MAJ:MIN)."""
    return f"{disk} {NO_LIMIT_BPS}\n"


def subtree_control(available: str, wanted: Sequence[str]) -> str:
    """What to write into a v2 cgroup.subtree_control to enable `wanted` where its
    cgroup.controllers (`available`) has them: "+cpu +memory"."""
    have = available.split()
    return " ".join(f"+{c}" for c in wanted if c in have)


def cpuset_values(parent: Path) -> dict[str, str]:
    """What a new v1 cpuset needs before a task may join it: its parent's cpus and mems (a
    new cpuset has none, and the kernel refuses a task in a cpuset without)."""
    values = {f: _read(parent / f).strip() for f in ("cpuset.cpus", "cpuset.mems")}
    empty = [f for f, v in values.items() if not v]
    if empty:
        raise RuntimeFailure(f"{parent} has no {' and '.join(empty)} to copy")
    return values


def make_testbed_cgroups(h: Hierarchy, tag: str, hosts: Sequence[str],
                         disks: Sequence[str]) -> dict[str, dict[str, Path]]:
    """Make `linkgrad-<tag>` and a cgroup per host in it; v1's blkio with a no-op rule for each
    of `disks` (MAJ:MIN). Returns host -> controller -> directory. An existing directory is
    refused (an earlier testbed of the tag, not removed)."""
    parents = tag_dirs(h, tag)
    for parent in distinct(parents):
        _mkdir(parent)
        if h.version == 2:
            enable = subtree_control(_read(parent / "cgroup.controllers"), h.controllers)
            if enable:
                _write(parent / "cgroup.subtree_control", enable)
    if h.version == 1 and "cpuset" in h.controllers:
        _copy_cpuset(h.root / "cpuset", h.root / "cpuset" / f"linkgrad-{tag}")
    made = {host: cgroup_dirs(h, tag, host) for host in hosts}
    for dirs in made.values():
        for d in distinct(dirs.values()):
            _mkdir(d)
        if h.version == 1 and "cpuset" in dirs:
            _copy_cpuset(dirs["cpuset"].parent, dirs["cpuset"])
        if h.version == 1 and "blkio" in dirs:
            for f in ("read_bps_device", "write_bps_device"):
                for disk in disks:
                    _write(dirs["blkio"] / f"blkio.throttle.{f}", throttle_rule(disk))
    return made


# a shell joins: `sh -c JOIN sh PROCS... -- ARGV...`
JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


def join_then_exec(dirs: dict[str, Path], argv: Sequence[str]) -> list[str]:
    """`argv` run inside the cgroups `dirs`: a shell writes its own pid into each one's
    cgroup.procs, then execs `argv` (the same pid). Joined before the exec, not by moving the
    started pid from outside: a server forks its workers or daemonizes at once, and a child
    made before its parent moved would stay outside. (A `preexec_fn` would do it in Python,
    but it is unsafe in a process with threads, and `setsid --fork` starts the daemons.)"""
    if not dirs:
        return list(argv)
    procs = [str(d / "cgroup.procs") for d in distinct(dirs.values())]
    return ["sh", "-c", JOIN, "sh", *procs, "--", *argv]


def leftover_cgroups(tag: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """The `linkgrad-<tag>` directories there are in any hierarchy at `root`, found by the
    name made for this tag (so a crashed run's are found without its state)."""
    candidates = [root / c / f"linkgrad-{tag}" for c in V1_CONTROLLERS]
    if (root / "cgroup.controllers").exists():  # a v2 root (in v1's tmpfs: no cgroup)
        candidates.append(root / f"linkgrad-{tag}")
    return [d for d in distinct(candidates) if d.is_dir()]


def remove_testbed_cgroups(tag: str, root: Path = CGROUP_ROOT, grace_s: float = 5.0
                           ) -> list[str]:
    """Remove `linkgrad-<tag>` and everything in it from every hierarchy at `root`. Returns
    what could not be removed (each with why); nothing there is no failure."""
    return [f for parent in leftover_cgroups(tag, root) for f in remove_tree(parent, grace_s)]


def remove_tree(top: Path, grace_s: float = 5.0) -> list[str]:
    """Remove the cgroup `top` and those below it, deepest first. A process still in one is
    a testbed host's (started in its cgroup, or by what was) that outlived the namespace's
    processes: it is killed, as they were. Returns what could not be removed."""
    failures = []
    for where, _, _ in os.walk(top, topdown=False):
        d = Path(where)
        deadline = time.monotonic() + grace_s
        while True:
            _kill(d)
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as e:  # EBUSY while a killed process is still exiting
                if time.monotonic() > deadline:
                    left = _read(d / "cgroup.procs").split()
                    failures.append(f"cgroup {d}: {e.strerror}"
                                    + (f" (processes {', '.join(left)} in it)" if left else ""))
                    break
                time.sleep(0.05)
    return failures


def _kill(d: Path) -> None:
    for pid in _read(d / "cgroup.procs").split():
        if int(pid) != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _copy_cpuset(parent: Path, child: Path) -> None:
    for f, value in cpuset_values(parent).items():
        _write(child / f, value)


def _mkdir(d: Path) -> None:
    try:
        d.mkdir()
    except FileExistsError as e:
        raise RuntimeFailure(f"cgroup {d} exists: an earlier testbed's? `linkgrad testbed "
                             "down` with its tag removes it") from e
    except OSError as e:
        raise RuntimeFailure(f"cannot make cgroup {d}: {e.strerror}") from e


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as e:
        raise RuntimeFailure(f"cannot write {text.strip()!r} to {path}: {e.strerror}") from e


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # gone meanwhile, or no such controller file: nothing in it
        return ""

"""A testbed for a test module (a tag of its own, made in a private root, removed after), and the
check that no injection rule is left in any of its hosts."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.description import DescribedTestbed
from testbed.lifecycle import down, up
from testbed.netns import TAG
from testbed.topology import DEFAULT, HostSpec, Topology

LINKGRAD = str(Path(sys.executable).parent / "linkgrad")
_CLAIMS: list[socket.socket] = []  # this process's tags, held until it ends
atexit.register(lambda: [claim.close() for claim in _CLAIMS])


def unique_tag(prefix: str) -> str:
    """A testbed tag that no other live process claimed and nothing on this machine uses:
    `prefix` (one lowercase letter naming the test) and three digits, tried from this process's
    id onwards, e.g. `r417`.

    Four characters is the testbed's limit (`testbed.netns.TAG`), and Linux's 15-character
    interface names are why: under Mininet the bridge's ports are `lgbr-<tag>-eth<n>`, 15
    characters with a 4-character tag and 10-50 hosts (the plain build's `lgbr-<tag>` and
    `lgv<tag><i>` are shorter). The digits keep an experiment's `testbed: <tag>` a YAML string
    (never `true` or `null`).

    The claim is an abstract Unix socket `linkgrad-test-tag-<tag>`: the kernel releases it when
    the process ends, even killed, and it leaves no file. A tag whose namespaces, bridge or veths
    exist (a crashed run's, or someone's `linkgrad testbed up`) is passed over, never removed.
    """
    if len(prefix) != 1 or not prefix.islower() or not prefix.isascii():
        raise ValueError(f"{prefix=} must be one lowercase letter")
    for i in range(1000):
        tag = f"{prefix}{(os.getpid() + i) % 1000:03d}"
        assert TAG.match(tag), tag
        claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            claim.bind(f"\0linkgrad-test-tag-{tag}")
        except OSError:  # another live process (or this one) has it
            claim.close()
            continue
        if _in_use(tag):
            claim.close()
            continue
        _CLAIMS.append(claim)
        return tag
    raise RuntimeError(f"every testbed tag {prefix}000-{prefix}999 is taken on this machine")


def _in_use(tag: str) -> bool:
    """Whether anything named for testbed `tag` exists (testbed.netns's names)."""
    return (any(Path("/run/netns").glob(f"lgtb-{tag}-*"))
            or Path(f"/sys/class/net/lgbr-{tag}").exists()
            or any(Path("/sys/class/net").glob(f"lgv{tag}*")))


def private_root() -> Path:
    """Under /var/tmp: the postgres and www-data users must reach the testbed's files, and
    pytest's own temporary directories are private to root."""
    root = Path(tempfile.mkdtemp(prefix="lgtest-", dir="/var/tmp"))
    root.chmod(0o755)
    return root


@contextmanager
def private_testbed(tag: str, topology: Topology = DEFAULT,
                    **kwargs: bool) -> Iterator[tuple[DescribedTestbed, Path]]:
    """The testbed `tag` up in a private root: yields its description and the root. However the
    body ends, takes down that tag in that root (nothing else), then removes the root."""
    root = private_root()
    try:
        info = up(topology, tag, root, **kwargs)  # a failed `up` undoes what it made itself
        try:
            yield info, root
        finally:
            down(tag, root=root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# the smallest testbed: a front (client, web, cache) and a back (app, db)
TWO_HOSTS = Topology(name="two", hosts=(HostSpec(name="front", roles=("client", "web", "cache")),
                                        HostSpec(name="back", roles=("app", "db"))))


def status_json(tag: str, root: Path) -> dict:
    """`linkgrad testbed status --json` of the testbed `tag` under `root`."""
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    return json.loads(subprocess.run([LINKGRAD, "testbed", "status", "--tag", tag, "--json"],
                                     capture_output=True, text=True, env=env, check=True,
                                     timeout=60).stdout)


def running_testbed(tag: str) -> Iterator[Path]:
    """Yields the root of a testbed `tag` that is up; always taken down (for a fixture)."""
    with private_testbed(tag) as (_, root):
        yield root


def linkgrad_run(experiment: Path, root: Path, timeout_s: float) -> dict:
    """`linkgrad run EXPERIMENT --json` against the testbeds under `root`: its JSON status
    (a failure is an assertion naming what it printed)."""
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    done = subprocess.run([LINKGRAD, "run", str(experiment), "--json"], capture_output=True,
                          text=True, timeout=timeout_s, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


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


def network_namespaces() -> set[str]:
    """The network namespaces some process is in now (`net:[inode]`), named or not."""
    found = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):  # gone meanwhile
                found.add(os.readlink(f"/proc/{pid}/ns/net"))
    return found


def processes_outside(namespaces: set[str]) -> list[str]:
    """The command lines of the processes in a network namespace not in `namespaces`: what a
    testbed left behind, found by where they are, not by what they are called (a namespace
    deleted by name keeps its processes, nameless)."""
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile
            if os.readlink(f"/proc/{pid}/ns/net") not in namespaces:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                left.append(f"{pid}: {args.decode(errors='replace').strip()}")
    return left


def namespace_commands(namespaces: list[str]) -> tuple[list[int], list[str]]:
    """The pids in `namespaces` and their command names."""
    done = [subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                           timeout=30, check=True).stdout for ns in namespaces]
    pids = [int(p) for out in done for p in out.split()]
    return pids, [Path(f"/proc/{p}/comm").read_text().strip() for p in pids]


def alive(pid: int) -> bool:
    """Running, or stopped: anything but gone or a zombie (an exited process that the init
    process has not reaped yet: it holds no namespace, socket or file)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")

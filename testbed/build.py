"""The thin executor for testbed plans: runs steps, starts services, tears everything down."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from linkgrad.errors import RuntimeFailure
from testbed.cgroup_mounts import host_mounts, mount_then_exec
from testbed.cgroups import CGROUP_ROOT, join_then_exec, remove_testbed_cgroups
from testbed.netns import HostPlan, Step, TestbedPlan
from testbed.private_dir import ensure_dir
from testbed.state import ServiceRecord, State


def sh(argv: Sequence[str], timeout_s: float = 30.0, **kw: object) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              check=False, **kw)  # type: ignore[call-overload]
    except subprocess.TimeoutExpired as e:
        raise RuntimeFailure(f"{' '.join(argv)} timed out after {timeout_s} s") from e
    if done.returncode != 0:
        raise RuntimeFailure(f"{' '.join(argv)} failed: {done.stderr.strip() or done.stdout}")
    return done.stdout


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeFailure(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def listening(namespace: str, port: int) -> bool:
    """Whether a TCP socket listens on `port` in the namespace (for a server that the root
    namespace may not connect to: `netns.only_from`)."""
    done = subprocess.run(["ip", "netns", "exec", namespace, "ss", "-Hltn", f"sport = :{port}"],
                          capture_output=True, text=True, timeout=10, check=False)
    return done.returncode == 0 and bool(done.stdout.strip())


def start_argv(namespace: str | None, cgroups: dict[str, Path], mounts: list[list[str]],
               pid_file: Path, argv: Sequence[str]) -> list[str]:
    """What `Builder.start` runs, one process throughout (each step execs the next): detached
    (setsid --fork); in the host's cgroups (`cgroups`), joined before anything of the daemon
    runs; in its namespace, with the cgroup hierarchies mounted there (`mounts`: `ip netns
    exec` hides the machine's); then a shell that writes its pid to `pid_file` and execs
    `argv`. So the pid file is there only once every step before it has succeeded."""
    daemon = ["sh", "-c", 'echo $$ > "$0"; exec "$@"', str(pid_file), *argv]
    if namespace is not None:
        daemon = ["ip", "netns", "exec", namespace, *mount_then_exec(mounts, daemon)]
    return ["setsid", "--fork", *join_then_exec(cgroups, daemon)]


class Builder:
    """Applies steps with their undo saved first; starts services inside namespaces."""

    def __init__(self, state: State) -> None:
        self.state = state

    def apply(self, step: Step) -> None:
        if step.undo is not None:
            self.state.undo.append(list(step.undo))
            self.state.save()
        try:
            sh(step.do)
        except RuntimeFailure:
            if step.undo is not None:
                self.state.undo.pop()
                self.state.save()
            raise

    def start(self, host: HostPlan | None, name: str, argv: Sequence[str],
              env: dict[str, str] | None = None) -> int:
        """Start a daemon in the host's namespace and cgroup (None: the root namespace):
        detached, its pid from a pid file (`start_argv`), so the caller keeps no child."""
        where = host.name if host else "root"
        cgroups = self.state.cgroups.get(host.name, {}) if host else {}
        mounts = host_mounts(Path("/proc/self/mountinfo").read_text()) if cgroups else []
        log = ensure_dir(self.state.directory / "logs", 0o700) / f"{where}-{name}.log"
        pid_file = log.with_suffix(".pid")
        pid_file.unlink(missing_ok=True)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        with open(fd, "ab") as out:
            subprocess.run(start_argv(host.namespace if host else None, cgroups, mounts,
                                      pid_file, argv),
                           stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           env={**os.environ, **(env or {})}, check=True, timeout=30)
        try:
            wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "",
                       f"{name} on {where} to start", timeout_s=10)
        except RuntimeFailure as e:  # e.g. a cgroup or a mount failed: its log says why
            said = log.read_text(errors="replace").strip().splitlines()[-1:]
            raise RuntimeFailure(f"{e}{': ' + said[0] if said else ''} ({log})") from e
        pid = int(pid_file.read_text())
        self.state.services[f"{where}/{name}"] = ServiceRecord(pid=pid, argv=tuple(argv),
                                                               log=str(log))
        self.state.save()
        return pid


def namespace_pids(namespace: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True,
                          timeout=10, check=False)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def kill_namespace(namespace: str, grace_s: float = 5.0,
                   spare: frozenset[int] = frozenset()) -> None:
    """Every process in the namespace is ours (we made the namespace): TERM, then KILL;
    but `spare` (Mininet's host shells, which its keeper ends itself)."""
    def ours() -> list[int]:
        return [p for p in namespace_pids(namespace) if p not in spare]

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in ours():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while ours() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not ours():
            return


def teardown(plan: TestbedPlan, state: State | None, cgroup_root: Path = CGROUP_ROOT
             ) -> list[str]:
    """Remove processes, then undo in reverse; by generated names when no state survived;
    the tag's cgroups in the hierarchies at `cgroup_root`.

    Returns what failed (everything is attempted; a half-removed testbed is worse)."""
    failures = []
    # the processes first, while their namespaces still have names: the Mininet keeper
    # deletes the names as it stops, and a server in a namespace nobody names any more
    # would never be found again
    keeper = state.services.get("root/mininet") if state else None
    # Mininet's host shells are left to its keeper, if it is there to end them
    shells = frozenset(keeper.shells or ()) if keeper and _alive(
        keeper.pid, "mininet_keeper") else frozenset()
    for host in plan.hosts:
        kill_namespace(host.namespace, spare=shells)
    if keeper is not None:  # it stops Mininet's own hosts, links and bridge on SIGTERM
        _stop_pid(keeper.pid, "mininet_keeper")
    # by the tag's name, whether the state recorded them or not (a crash before it did)
    failures += remove_testbed_cgroups(plan.tag, cgroup_root)
    undo = state.undo if state else _undo_by_names(plan)
    for argv in reversed(undo):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0 and "Cannot find" not in done.stderr \
                and "No such" not in done.stderr and "does not exist" not in done.stderr:
            failures.append(f"{' '.join(argv)}: {done.stderr.strip()}")
    if state is not None:
        shutil.rmtree(state.directory, ignore_errors=True)
    return failures


def _alive(pid: int, expected: str) -> bool:
    """Whether `pid` runs and is ours: `expected` in its command line (a pid is reused)."""
    try:
        return expected in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


def _stop_pid(pid: int, expected: str, grace_s: float = 20.0) -> None:
    """TERM (then KILL) one process of ours, if it still runs."""
    if not _alive(pid, expected):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _undo_by_names(plan: TestbedPlan) -> list[list[str]]:
    undo = [["ip", "link", "del", plan.bridge]]
    for h in plan.hosts:
        undo += [["ip", "netns", "del", h.namespace], ["ip", "link", "del", h.veth]]
    return undo



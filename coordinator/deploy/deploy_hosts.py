"""`linkgrad deploy` over SSH: every host probed, planned, and (unless a dry run) given the
wheelhouse and installed, `ssh.parallel` hosts at a time. A host that cannot be reached or
installed is a row of the table, never the end of the others' deploy.

Files travel by SFTP on the host's verified connection (`ssh.Connection`): a dependency
already there at its size is not sent again; every file lands under a temporary name and is
renamed, so hosts sharing a file system (a testbed's) never read half a file.
"""

from __future__ import annotations

import importlib.metadata
import json
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import paramiko

from coordinator.config.experiment import Experiment
from coordinator.deploy import install_on_host
from coordinator.deploy.host_facts import HostFacts, parse_facts, probe_script
from coordinator.deploy.plan import HostOutcome, HostPlan, plan_host
from coordinator.deploy.wheelhouse import (
    HostKind,
    Wheelhouse,
    build_linkgrad_wheel,
    cache_root,
    dependencies_for,
    project_root,
    source_digest,
)
from coordinator.live.fanout import each_host
from coordinator.live.ssh import Connection, Endpoint
from linkgrad.errors import RuntimeFailure

__all__ = ["Deployment", "deploy"]

INSTALL_TIMEOUT_S = 1800.0  # netfilterqueue's C build on a slow host, numpy unpacked


@dataclass
class Deployment:
    venv: str
    digest: str
    version: str
    outcomes: list[HostOutcome]


def _version() -> str:
    try:
        return importlib.metadata.version("linkgrad")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def _probe(end: Endpoint, timeout_s: float, venv: str) -> tuple[Connection, HostFacts]:
    conn = Connection(end, timeout_s)
    try:
        return conn, parse_facts(conn.run(["sh", "-c", probe_script(venv)], timeout_s=60))
    except BaseException:
        conn.close()
        raise


def _put(sftp: paramiko.SFTPClient, local: Path, remote: str, host: str,
         skip_same_size: bool) -> bool:
    """`local` at `remote` (True if it was sent), through a temporary name."""
    if skip_same_size:
        try:
            if sftp.stat(remote).st_size == local.stat().st_size:
                return False
        except OSError:
            pass
    part = f"{remote}.part-{host}"
    sftp.put(str(local), part)
    sftp.posix_rename(part, remote)
    return True


def _install(conn: Connection, plan: HostPlan, house: Wheelhouse, venv: str, digest: str
             ) -> tuple[str, float]:
    """Copy the wheelhouse and install; ("installed"|"present", seconds)."""
    wheels = f"{venv}.wheels"
    own_dir = f"{wheels}/linkgrad-{digest}"
    conn.run(["mkdir", "-p", own_dir])
    sftp = conn.client.open_sftp()
    try:
        for path in house.files()[1:]:
            _put(sftp, path, f"{wheels}/{path.name}", conn.name, skip_same_size=True)
        own = f"{own_dir}/{house.linkgrad_wheel.name}"
        _put(sftp, house.linkgrad_wheel, own, conn.name, skip_same_size=False)
        script = f"{wheels}/install_on_host.py"
        _put(sftp, Path(install_on_host.__file__), script, conn.name, skip_same_size=False)
    finally:
        sftp.close()
    argv = ["python3", script, venv, wheels, own, plan.manifest,
            "yes" if plan.injector else "no"]
    _, stdout, stderr = conn.client.exec_command(shlex.join(argv), timeout=INSTALL_TIMEOUT_S)
    out = stdout.read().decode()
    status = stdout.channel.recv_exit_status()
    last = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        answer = json.loads(last)
    except json.JSONDecodeError:
        answer = {"error": f"exit status {status}: {(stderr.read().decode() or out)[-400:]}"}
    if "error" in answer or status != 0:
        raise RuntimeFailure(str(answer.get("error", f"exit status {status}")))
    return str(answer["result"]), float(answer.get("seconds", 0.0))


def _wheelhouses(plans: list[HostPlan], digest: str, say: Callable[[str], None]
                 ) -> tuple[dict[str, Wheelhouse], dict[str, str]]:
    """A wheelhouse per host kind to install on; the kinds that could not get one, with why."""
    kinds: dict[str, HostKind] = {p.kind.key: p.kind for p in plans
                                  if p.action == "install" and p.kind is not None}
    if not kinds:
        return {}, {}
    root = project_root()
    cache = cache_root()
    say("building linkgrad's wheel")
    own = build_linkgrad_wheel(root, digest, cache)
    houses, failed = {}, {}
    for key, kind in sorted(kinds.items()):
        say(f"fetching the dependencies for {key}")
        try:
            houses[key] = Wheelhouse(own, dependencies_for(kind, own, cache))
        except RuntimeFailure as e:
            failed[key] = str(e)
    return houses, failed


def deploy(experiment: Experiment, ends: dict[str, Endpoint], venv: str, dry_run: bool,
           say: Callable[[str], None]) -> Deployment:
    """Probe every host, then (unless `dry_run`) install where needed. Every host's outcome,
    in the experiment's order."""
    assert experiment.ssh is not None
    ssh = experiment.ssh
    digest, version = source_digest(project_root()), _version()
    names = [h.name for h in experiment.hosts]
    conns: dict[str, Connection] = {}
    lock = threading.Lock()

    def keep(name: str, found: tuple[Connection, HostFacts]) -> None:
        with lock:
            conns[name] = found[0]

    try:
        say(f"probing {len(names)} host(s), {ssh.parallel} at a time")
        probed = each_host(names, lambda n: _probe(ends[n], ssh.connect_timeout_s, venv),
                           ssh.parallel, keep)
        outcomes: dict[str, HostOutcome] = {}
        for name in names:
            if name in probed.failed:
                outcomes[name] = HostOutcome(name, None, None, "failed",
                                             f"not reached: {probed.failed[name]}")
                continue
            facts = probed.succeeded[name][1]
            plan = plan_host(name, facts, venv, version, digest)
            result = {"present": "present", "cannot": "cannot",
                      "install": "would install" if dry_run else "to install"}[plan.action]
            outcomes[name] = HostOutcome(name, plan, facts, result, plan.why,
                                         warnings=list(plan.warnings))
        to_install = [o.plan for o in outcomes.values()
                      if o.plan is not None and o.result == "to install"]
        if to_install:
            houses, no_house = _wheelhouses(to_install, digest, say)

            def install(name: str) -> tuple[str, float]:
                plan = outcomes[name].plan
                assert plan is not None
                assert plan.kind is not None
                if plan.kind.key in no_house:
                    raise RuntimeFailure(no_house[plan.kind.key])
                started = time.monotonic()
                result = _install(conns[name], plan, houses[plan.kind.key], venv, digest)
                say(f"{name}: {result[0]} ({time.monotonic() - started:.0f} s)")
                return result

            say(f"installing on {len(to_install)} host(s), {ssh.parallel} at a time")
            done = each_host([p.name for p in to_install], install, ssh.parallel)
            for name, (result, seconds) in done.succeeded.items():
                outcomes[name].result, outcomes[name].seconds = result, seconds
            for name, error in done.failed.items():
                outcomes[name].result, outcomes[name].detail = "failed", str(error)
        return Deployment(venv, digest, version, [outcomes[n] for n in names])
    finally:
        each_host(list(conns), lambda n: conns[n].close(), 64)

"""Hosts behind a ProxyJump bastion whose sshd has `MaxStartups 1`: OpenSSH's `ssh -J`, one
bastion connection per host, is refused when several start at once; linkgrad's commands reach
every host through one shared bastion connection, its daemons run through it, and nothing is
left open on the bastion or running on the hosts afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.marks import TESTBED
from tests.netns_tools.testbeds import (
    LINKGRAD,
    TWO_HOSTS,
    private_testbed,
    status_json,
    unique_tag,
    wait_until_gone,
)

pytestmark = TESTBED
BASTION_PORT = 2222
ALIASES = 4  # ssh_config names per host: eight hosts' worth of connections at once


@pytest.fixture(scope="module")
def behind_bastion() -> Iterator[tuple[dict, Path, str]]:
    tag = unique_tag("j")
    with private_testbed(tag, TWO_HOSTS) as (_, root):
        info = status_json(tag, root)
        front = info["hosts"][0]
        ssh_dir = Path(info["ssh_config"]).parent
        # the bastion: a second sshd on the front host, taking one unauthenticated
        # connection at a time
        log = root / "bastion.log"
        with log.open("w") as out:
            bastion = subprocess.Popen(
                ["ip", "netns", "exec", front["namespace"], "/usr/sbin/sshd", "-D", "-e", "-f",
                 str(ssh_dir / "front_sshd_config"), "-o", f"Port={BASTION_PORT}", "-o",
                 "MaxStartups=1", "-o", f"PidFile={root / 'bastion.pid'}"],
                stdout=out, stderr=subprocess.STDOUT)
        try:
            known = root / "known_hosts"
            lines = (ssh_dir / "known_hosts").read_text().splitlines()
            front_key = next(line for line in lines if line.startswith("front,"))
            key = " ".join(front_key.split()[1:3])
            known.write_text("\n".join([*lines, f"[{front['address']}]:{BASTION_PORT} {key}"])
                             + "\n")
            identity = ssh_dir / "id_ed25519"
            blocks = [f"Host bastion\n    HostName {front['address']}\n    Port {BASTION_PORT}\n"
                      f"    User root\n    IdentityFile {identity}\n"
                      f"    UserKnownHostsFile {known}\n    BatchMode yes\n"]
            for h in info["hosts"]:
                for i in range(ALIASES):
                    blocks.append(f"Host {h['name']}-{i}\n    HostName {h['address']}\n"
                                  f"    User root\n    IdentityFile {identity}\n"
                                  f"    UserKnownHostsFile {known}\n    BatchMode yes\n"
                                  "    ProxyJump bastion\n")
            config = root / "jump_config"
            config.write_text("\n".join(blocks))
            deadline = time.monotonic() + 20
            while subprocess.run(["ssh", "-F", str(config), "bastion", "true"],
                                 capture_output=True, timeout=30).returncode != 0:
                assert time.monotonic() < deadline, (log.read_text(), bastion.poll())
                time.sleep(0.2)  # until it listens
            yield info, root, tag
        finally:
            bastion.terminate()
            bastion.wait(timeout=15)


def _experiment(info: dict, root: Path, names: list[str], parallel: int,
                python: str = str(Path(LINKGRAD).parent / "python")) -> Path:
    path = root / f"jump-{len(names)}.yaml"
    path.write_text(json.dumps({
        "name": "jump", "transactions": {"all": "^/"}, "hosts": [{"name": n} for n in names],
        "ssh": {"config": str(root / "jump_config"), "parallel": parallel,
                "python": python},
        "web_log": {"host": names[0], "path": info["web_log"]["path"]}}))
    return path


def _bastion_connections(info: dict) -> list[str]:
    out = subprocess.run(["ip", "netns", "exec", info["hosts"][0]["namespace"], "ss", "-Htn",
                          "state", "established", f"( sport = :{BASTION_PORT} )"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return out.splitlines()


def test_openssh_jumping_per_host_is_refused_past_maxstartups(behind_bastion):
    """The control: the same eight connections at once by OpenSSH, each through its own
    bastion connection, are not all let through."""
    info, root, _ = behind_bastion
    names = [f"{h['name']}-{i}" for h in info["hosts"] for i in range(ALIASES)]

    def ssh(name: str) -> int:
        return subprocess.run(["ssh", "-F", str(root / "jump_config"), name, "true"],
                              capture_output=True, timeout=60, check=False).returncode

    with ThreadPoolExecutor(len(names)) as pool:
        codes = list(pool.map(ssh, names))
    assert any(c != 0 for c in codes), codes
    assert "past MaxStartups" in (root / "bastion.log").read_text()


def test_every_host_through_one_bastion_connection(behind_bastion):
    info, root, tag = behind_bastion
    names = [f"{h['name']}-{i}" for h in info["hosts"] for i in range(ALIASES)]
    experiment = _experiment(info, root, names, parallel=len(names),
                             python=str(root / "venv" / "bin" / "python"))
    before = (root / "bastion.log").read_text().count("Accepted publickey")
    done = subprocess.run([LINKGRAD, "deploy", str(experiment), "--dry-run", "--json"],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "XDG_CACHE_HOME": str(root / "cache")})
    assert done.returncode == 0, done.stderr
    hosts = json.loads(done.stdout)["hosts"]
    assert [h["name"] for h in hosts] == names
    assert all(h["result"] != "failed" for h in hosts), hosts
    log = (root / "bastion.log").read_text()
    assert log.count("Accepted publickey") - before == 1  # one bastion connection for eight
    assert _bastion_connections(info) == []  # closed with the last host behind it
    wait_until_gone(tag)


def test_daemons_run_through_the_bastion_and_stop(behind_bastion):
    info, root, tag = behind_bastion
    names = [f"{h['name']}-0" for h in info["hosts"]]
    experiment = _experiment(info, root, names, parallel=10)
    done = subprocess.run([LINKGRAD, "profile", str(experiment), "--duration", "2", "--json"],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)})
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(done.stdout)["hosts"]) == sorted(names)
    assert _bastion_connections(info) == []
    wait_until_gone(tag, ("-m sniffer",))

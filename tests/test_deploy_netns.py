"""`linkgrad deploy` against real sshd hosts (a two-host testbed): a dry run changes nothing,
a deploy installs linkgrad with its injector (netfilterqueue built on the host) from a
wheelhouse built here, a second deploy finds every host current, a host that cannot be reached
is a failed row beside the others, and a venv deploy did not make is left alone. The testbed's
hosts share this machine's files, so the hosts install into one venv, one at a time."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.marks import TESTBED
from tests.netns_tools.testbeds import (
    LINKGRAD,
    TWO_HOSTS,
    private_testbed,
    status_json,
    unique_tag,
)

pytestmark = TESTBED


@pytest.fixture(scope="module")
def testbed() -> Iterator[tuple[dict, Path]]:
    tag = unique_tag("d")
    with private_testbed(tag, TWO_HOSTS) as (_, root):
        info = status_json(tag, root)
        yield info, root


def _experiment(info: dict, root: Path, venv: Path, extra: tuple[dict, ...] = ()) -> Path:
    path = root / f"deploy-{venv.name}.yaml"
    path.write_text(json.dumps({
        "name": "deploy", "transactions": {"all": "^/"},
        "hosts": [{"name": h["name"]} for h in info["hosts"]] + list(extra),
        "ssh": {"config": info["ssh_config"], "known_hosts": info["known_hosts"],
                "python": str(venv / "bin" / "python"), "connect_timeout_s": 2},
        "web_log": {"host": info["web_log"]["host"], "path": info["web_log"]["path"]}}))
    return path


def _deploy(experiment: Path, root: Path, *args: str) -> tuple[int, dict, str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(root / "cache")}
    done = subprocess.run([LINKGRAD, "deploy", str(experiment), "--json", *args],
                          capture_output=True, text=True, timeout=900, env=env, check=False)
    return done.returncode, json.loads(done.stdout) if done.stdout else {}, done.stderr


def test_dry_run_then_deploy_then_nothing_left_to_do(testbed):
    info, root = testbed
    venv = root / "venv"
    experiment = _experiment(info, root, venv)
    status, dry, _ = _deploy(experiment, root, "--dry-run")
    assert status == 0
    assert [h["result"] for h in dry["hosts"]] == ["would install"] * 2
    assert dry["hosts"][0]["features"]["sock_diag"] == "yes"
    assert not venv.exists()  # a dry run changes nothing

    status, done, err = _deploy(experiment, root)
    assert status == 0, (done, err)
    # the hosts share one file system: the first installs, the other finds it done
    assert sorted(h["result"] for h in done["hosts"]) == ["installed", "present"]
    assert all(h["ready"] for h in done["hosts"])
    python = venv / "bin" / "python"
    imported = subprocess.run([str(python), "-c", "import netfilterqueue, linkgrad, sniffer, "
                               "injector; print(linkgrad.__file__)"], capture_output=True,
                              text=True, timeout=60, check=True, cwd=root).stdout
    assert imported.startswith(str(venv))  # its own copy, not this checkout
    record = json.loads((venv / "linkgrad-deploy.json").read_text())
    assert record["source"] == done["source"]
    assert record["injector"] is True

    status, again, _ = _deploy(experiment, root)
    assert status == 0
    assert [h["result"] for h in again["hosts"]] == ["present"] * 2


def test_an_unreachable_host_is_a_failed_row_and_a_foreign_venv_is_left_alone(testbed):
    info, root = testbed
    foreign = root / "foreign"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(foreign)], check=True,
                   timeout=120)
    ghost = {"name": "ghost", "address": "192.0.2.1"}  # TEST-NET-1: nothing answers
    experiment = _experiment(info, root, foreign, (ghost,))
    status, done, _ = _deploy(experiment, root)
    assert status == 1
    rows = {h["name"]: h for h in done["hosts"]}
    assert rows["ghost"]["result"] == "failed"
    assert "not reached" in rows["ghost"]["detail"]
    for name in ("front", "back"):
        assert rows[name]["result"] == "cannot"
        assert "is there and deploy did not make it" in rows[name]["detail"]
    assert not (foreign / "linkgrad-deploy.json").exists()
    assert sorted(p.name for p in (foreign / "bin").iterdir() if p.name.startswith("pip")) == []


def test_a_host_without_linkgrad_is_told_to_deploy(testbed):
    info, root = testbed
    experiment = _experiment(info, root, root / "nowhere")
    done = subprocess.run([LINKGRAD, "profile", str(experiment), "--duration", "1"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "exit status 127)" in done.stderr  # the shell's word for it follows
    assert f"{root / 'nowhere' / 'bin' / 'python'}: " in done.stderr
    assert "`linkgrad deploy EXPERIMENT.yaml` puts it on every host" in done.stderr

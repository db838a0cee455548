"""Faults on a generated application of eight services (nine hosts), in the middle of
`linkgrad profile`: a sniffer killed on one host, and a host cut off (its SSH port dropped
both ways). Each ends in exit 1 naming that host, the other hosts' profiles kept and printed,
in bounded time, and no daemon left running on any host once its connection is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.topology import services_topology
from tests.marks import TESTBED
from tests.netns_tools.testbeds import (
    LINKGRAD,
    assert_no_rules,
    private_testbed,
    unique_tag,
    wait_until_gone,
)

pytestmark = TESTBED
TOPOLOGY = services_topology(8, seed=3)
VICTIM = "s5"
EXPERIMENT = "name: faults\ntestbed: {tag}\ntransactions: {{all: ^/}}\n"


@pytest.fixture(scope="module")
def testbed() -> Iterator[tuple[str, str, Path, Path]]:
    tag = unique_tag("f")
    with private_testbed(tag, TOPOLOGY) as (info, root):
        experiment = root / "faults.yaml"
        experiment.write_text(EXPERIMENT.format(tag=tag))
        yield tag, info.host(VICTIM).namespace, root, experiment


def _sniffers(namespace: str) -> list[int]:
    pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True,
                          check=True, timeout=30).stdout.split()
    found = []
    for pid in pids:
        try:
            if b"-m\0sniffer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def _profile_with(root: Path, experiment: Path, fault) -> tuple[int, dict, str, float]:
    """`profile --duration 8 --json`, `fault()` done once every host is profiling."""
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    started = time.monotonic()
    proc = subprocess.Popen([LINKGRAD, "profile", str(experiment), "--duration", "8", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    said = []
    for line in proc.stderr:  # "profiling N host(s)": every sniffer has started
        said.append(line)
        if line.startswith("profiling "):
            break
    time.sleep(2)
    fault()
    out, err = proc.communicate(timeout=300)
    return proc.returncode, json.loads(out) if out else {}, "".join(said) + err, \
        time.monotonic() - started


def _check_kept(report: dict) -> None:
    """The victim named among the problems, the other hosts' profiles there."""
    assert f"SNAP on {VICTIM}" in " ".join(report["problems"]), report["problems"]
    seen = {link["link"].split(":")[0] for link in report["links"]}
    assert len(seen - {VICTIM}) >= 6, seen


def test_a_sniffer_killed_on_one_host_loses_that_host_only(testbed):
    tag, namespace, root, experiment = testbed

    def kill() -> None:
        victims = _sniffers(namespace)
        assert victims
        for pid in victims:
            os.kill(pid, signal.SIGKILL)

    status, report, err, seconds = _profile_with(root, experiment, kill)
    assert status == 1, err
    _check_kept(report)
    assert seconds < 120
    wait_until_gone(tag, ("-m sniffer", "bpftrace"))
    assert_no_rules(tag)


def test_a_host_cut_off_halfway_is_named_and_its_sniffer_ends_when_it_is_back(testbed):
    tag, namespace, root, experiment = testbed
    rules = [["INPUT", "-p", "tcp", "--dport", "22", "-j", "DROP"],
             ["OUTPUT", "-p", "tcp", "--sport", "22", "-j", "DROP"]]

    def cut(action: str) -> None:
        for rule in rules:
            subprocess.run(["ip", "netns", "exec", namespace, "iptables", action, *rule],
                           check=True, timeout=30)

    try:
        status, report, err, seconds = _profile_with(root, experiment, lambda: cut("-I"))
    finally:
        cut("-D")
    assert status == 1, err
    _check_kept(report)
    assert seconds < 150  # the answer's timeout (30 s) and the stops', not TCP's minutes
    # back on the network, its sshd finds the coordinator's side gone (a reset) and the
    # sniffer, whose lease that connection was, ends with what it started
    wait_until_gone(tag, ("-m sniffer", "bpftrace"), timeout_s=60)
    assert_no_rules(tag)

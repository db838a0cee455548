"""`linkgrad bottleneck` on the testbed (root): a transfer from client to web with one resource
limited on purpose, and the t-test naming it (Kissel et al. §IV.C): the network (tbf on the
client's link), the disk (blkio on web's cgroup: the transfer writes with O_DIRECT) and the CPU
(busy loops on web's one core); and "statistically similar" where the disk read and the
network are limited to one rate. `benchmarks/bottleneck_table.py` runs the same cases many
times."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import impairments
from testbed.description import DescribedTestbed
from tests.marks import TESTBED
from tests.netns_tools.testbeds import LINKGRAD, private_testbed, unique_tag, wait_until_gone

pytestmark = TESTBED

# bytes/s: far below the testbed's disks (~1 GB/s) and veths (GB/s), and low enough that the
# receiver's CPU (woken per packet the tbf paces out: at 40 MB/s nearly busy in some VMs) stays
# well above it.
RATE = 20_000_000
SIZE = "128M"  # ~6.5 s at RATE: 13 intervals of 0.5 s
EXPERIMENT = "name: bottleneck\ntestbed: {tag}\ntransactions: {{all: ^/}}\n"


@pytest.fixture(scope="module")
def testbed() -> Iterator[tuple[DescribedTestbed, Path]]:
    tag = unique_tag("b")
    with private_testbed(tag) as (info, root):
        (root / "bottleneck.yaml").write_text(EXPERIMENT.format(tag=tag))
        yield info, root


def bottleneck(root: Path, *argv: str, size: str = SIZE, interval: str = "0.5"
               ) -> subprocess.CompletedProcess[str]:
    """`linkgrad bottleneck` from client to web, files in the testbed's root."""
    return subprocess.run(
        [LINKGRAD, "bottleneck", str(root / "bottleneck.yaml"), "--from",
         f"client:{root}/sent.bin", "--to", f"web:{root}/got.bin", "--size", size,
         "--interval", interval, "--json", *argv],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)})


def named(root: Path, **kwargs: str) -> dict:
    done = bottleneck(root, **kwargs)
    assert done.returncode == 0, done.stderr
    assert not list(root.glob("*.bin")), "the transfer's files are removed"
    return json.loads(done.stdout)


def tput(answer: dict, resource: str) -> float:
    return next(r["tput_i_bytes_per_s"] for r in answer["resources"]
                if r["resource"] == resource)


def test_a_rate_limited_link_is_the_network(testbed):
    info, root = testbed
    with impairments.link_rate(info.host("client").namespace, RATE):
        answer = named(root)
    assert answer["bottleneck"] == "network.receive", answer
    assert tput(answer, "network.receive") == pytest.approx(RATE, rel=0.15)  # headers: ~3%
    assert all(t["lower"] and t["p"] < 1e-4 for t in answer["tests"]), answer["tests"]


def test_a_throttled_disk_write_is_the_disk(testbed):
    info, root = testbed
    web = info.host("web").cgroups
    with impairments.disk_throttle(web["blkio"], impairments.disk_of(root), "write", RATE):
        answer = named(root)
    assert answer["bottleneck"] == "disk.write", answer
    assert tput(answer, "disk.write") == pytest.approx(RATE, rel=0.15)


def test_busy_loops_on_the_receiver_s_core_are_its_cpu(testbed):
    """web on core 1 with four busy loops of its own; client on core 0, so its CPU is not
    taken too (the machine has two)."""
    info, root = testbed
    with impairments.on_core(info.host("client").cgroups["cpuset"], 0), \
            impairments.busy_core(info.host("web").cgroups, 1, loops=4):
        answer = named(root, size="512M", interval="0.25")
    assert answer["bottleneck"] == "cpu.receiver", answer


def test_disk_read_and_network_at_one_rate_are_statistically_similar(testbed):
    """The disk read held at RATE and the link set to carry what that disk read gives (each
    measured alone first: a throttled disk reads a little over its rate, a link a little under
    it, by amounts that vary between machines), then a little either side of that: where the
    two cross, the tests cannot tell them apart and say so. One setting is a knife-edge (two
    alike resources are named apart at ALPHA by design, and the two limits interact), so the
    rates around it are tried in turn until one says "similar"; none must name a third."""
    info, root = testbed
    client = info.host("client")
    disk = impairments.disk_of(root)
    with impairments.disk_throttle(client.cgroups["blkio"], disk, "read", RATE):
        disk_read = tput(named(root), "disk.read")
    with impairments.link_rate(client.namespace, RATE):
        carried = tput(named(root), "network.receive") / RATE  # of its rate, what a link carries
    said = []
    for factor in (1.0, 1.04, 0.96, 1.08, 0.92):
        with impairments.disk_throttle(client.cgroups["blkio"], disk, "read", RATE), \
                impairments.link_rate(client.namespace, factor * disk_read / carried):
            answer = named(root)
        said.append((factor, answer["verdict"]))
        assert {answer["candidate"], *answer["similar"]} <= {"disk.read", "network.receive"}, said
        if answer["bottleneck"] is None:
            break
    assert answer["bottleneck"] is None, said
    assert {answer["candidate"], *answer["similar"]} == {"disk.read", "network.receive"}, said
    assert answer["verdict"].startswith("statistically similar: ")


def test_a_destination_that_cannot_be_made_fails_on_its_host_and_leaves_nothing(testbed):
    info, root = testbed
    done = subprocess.run(
        [LINKGRAD, "bottleneck", str(root / "bottleneck.yaml"), "--from",
         f"client:{root}/sent.bin", "--to", f"web:{root}/no-such-dir/got.bin"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)})
    assert done.returncode == 2, done.stderr
    assert "the receiver on web: cannot make" in done.stderr
    assert f"{root}/no-such-dir/got.bin" in done.stderr
    assert not (root / "sent.bin").exists()
    wait_until_gone(info.tag, ("sniffer.transfer",))

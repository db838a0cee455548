"""Bottlenecks put on a testbed host on purpose, for `linkgrad bottleneck`'s tests and its
benchmark (Kissel et al. §IV.C's three resources): a rate limit on the host's link (a `tbf`
qdisc on its eth0, so on what it sends), a disk throttle on its cgroup (v1 blkio: it limits
direct I/O, which the transfer does), and its CPU taken by busy loops (its cpuset cut to one
core, the loops in its cgroups there).

Each is a context manager: what it changes is read first, and put back however the body ends
(the loops it started are killed), so a failed test leaves the testbed as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from linkgrad.errors import RuntimeFailure
from testbed.cgroup_mounts import whole_disk
from testbed.cgroups import join_then_exec

__all__ = ["busy_core", "disk_of", "disk_throttle", "link_rate", "on_core", "tbf_argv"]

BURST_BYTES = 16 << 10  # tbf's bucket: a few segments, so the rate holds over a block
# tbf's queue, as the time its length takes at the rate: long enough to hold TCP's window.
# With 50 ms a disk ahead of the link, limited to about the same rate, was idle at times and
# read fast (the link below its rate in bursts: we take it the queue overflowed and TCP backed
# off); with 200 ms it was not (benchmarks/RESULTS.md, the bottleneck section).
QUEUE_LATENCY_MS = 200


def tbf_argv(namespace: str, rate_bytes_per_s: float, device: str = "eth0") -> list[str]:
    """`tc` adding a tbf qdisc at `rate_bytes_per_s` (tc's `bit`: bits per second; its `bps`
    would be bytes) on `device` in `namespace`."""
    return ["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", device, "root",
            "tbf", "rate", f"{round(rate_bytes_per_s * 8)}bit", "burst", str(BURST_BYTES),
            "latency", f"{QUEUE_LATENCY_MS}ms"]


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeFailure(f"{' '.join(argv)}: {done.stderr.strip()}")


@contextmanager
def link_rate(namespace: str, rate_bytes_per_s: float, device: str = "eth0") -> Iterator[None]:
    """What the host sends on `device` limited to `rate_bytes_per_s` (frames, headers too)."""
    _run(tbf_argv(namespace, rate_bytes_per_s, device))
    try:
        yield
    finally:
        _run(["ip", "netns", "exec", namespace, "tc", "qdisc", "del", "dev", device, "root"])


def disk_of(path: Path) -> str:
    """MAJ:MIN of the disk `path` is on (blkio takes rules per whole disk)."""
    dev = os.stat(path).st_dev
    disk = whole_disk(f"{os.major(dev)}:{os.minor(dev)}")
    if disk is None:
        raise RuntimeFailure(f"{path} is on no block device (tmpfs?): no disk to throttle")
    return disk


def _rule(blkio: Path, op: str, disk: str) -> str:
    """The cgroup's bytes/s rule for `disk` ("0": none)."""
    for line in (blkio / f"blkio.throttle.{op}_bps_device").read_text().splitlines():
        if line.split()[0] == disk:
            return line.split()[1]
    return "0"


@contextmanager
def disk_throttle(blkio: Path, disk: str, op: Literal["read", "write"], bytes_per_s: int
                  ) -> Iterator[None]:
    """The v1 blkio cgroup `blkio` may `op` at most `bytes_per_s` on `disk` (MAJ:MIN)."""
    rule = blkio / f"blkio.throttle.{op}_bps_device"
    before = _rule(blkio, op, disk)
    rule.write_text(f"{disk} {bytes_per_s}\n")
    try:
        yield
    finally:
        rule.write_text(f"{disk} {before}\n")


@contextmanager
def on_core(cpuset: Path, core: int) -> Iterator[None]:
    """The cpuset cgroup `cpuset` (and what is in it) on `core` alone."""
    cpus = cpuset / "cpuset.cpus"
    before = cpus.read_text().strip()
    cpus.write_text(str(core))
    try:
        yield
    finally:
        cpus.write_text(before)


@contextmanager
def busy_core(cgroups: dict[str, Path], core: int, loops: int) -> Iterator[None]:
    """The host whose cgroups are `cgroups` on `core` alone, with `loops` busy loops of its
    own there: what it runs gets a share of one core."""
    if "cpuset" not in cgroups:
        raise RuntimeFailure("the host has no cpuset cgroup of its own: no core to pin")
    with on_core(cgroups["cpuset"], core):
        argv = join_then_exec(cgroups, [sys.executable, "-c", "while True: pass"])
        started: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(loops):
                started.append(subprocess.Popen(argv))
            yield
        finally:
            for loop in started:
                loop.kill()
            for loop in started:
                loop.wait(timeout=30)

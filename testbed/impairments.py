"""Bottlenecks put on a testbed host on purpose, for `linkgrad bottleneck`'s tests and its
benchmark (Kissel et al. §IV.C's three resources): a rate limit on the host's link (a `tbf`
qdisc on its eth0, so on what it sends), a disk throttle on its cgroup (v1 blkio: it limits
direct I/O, which the transfer does), and its CPU taken by busy loops (its cpuset cut to one
core, the loops in its cgroups there). And SNAP's problems on one link, for
`benchmarks/explain_causes.py`: random loss (an iptables `statistic` rule; this kernel has no
netem), and a route of its own to the peer with TCP's metrics on it (`window`: the largest
window the host advertises; `initcwnd`: its first congestion window, and after an idle, the
one it restarts from; `advmss`: the segment size it asks the peer for). A route's metrics are
read when a connection opens: `close_connections` makes a persistent pool open new ones.

Each is a context manager: what it changes is read first, and put back however the body ends
(the loops it started are killed), so a failed test leaves the testbed as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from linkgrad.errors import RuntimeFailure
from testbed.cgroup_mounts import whole_disk
from testbed.cgroups import join_then_exec

__all__ = ["ROUTE_METRICS", "busy_core", "close_connections", "close_connections_argv",
           "disk_of", "disk_throttle", "link_rate", "on_core", "random_drop_argv",
           "random_loss", "route_argv", "route_metrics", "tbf_argv"]

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


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeFailure(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


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


# ip-route(8)'s TCP metrics and the least of each (quickack is 0 or 1). The kernel has floors
# of its own after: a sender's segment is at least net.ipv4.tcp_min_snd_mss (48 B) less its
# options, whatever MSS the peer advertised, and at least 68 B less its headers whatever
# window it offered (36 B with timestamps; a window below that stalls it until its persist
# timer).
ROUTE_METRICS = {"window": 1, "initcwnd": 1, "initrwnd": 1, "advmss": 1, "quickack": 0}


def random_drop_argv(namespace: str, source: str, probability: float,
                     op: Literal["-I", "-D"] = "-I") -> list[str]:
    """`iptables` inserting (`-I`, first in INPUT) or deleting (`-D`) a rule that drops each
    packet from `source` arriving in `namespace` with `probability`."""
    if not 0 < probability < 1:
        raise ValueError(f"{probability=} must be in (0, 1)")
    return ["ip", "netns", "exec", namespace, "iptables", "-w", "5", op, "INPUT", "-s", source,
            "-m", "statistic", "--mode", "random", "--probability", f"{probability:g}",
            "-j", "DROP"]


@contextmanager
def random_loss(namespace: str, source: str, probability: float) -> Iterator[None]:
    """What `namespace` receives from `source` lost with `probability` (each packet alone)."""
    _run(random_drop_argv(namespace, source, probability, "-I"))
    try:
        yield
    finally:
        _run(random_drop_argv(namespace, source, probability, "-D"))


def route_argv(namespace: str, destination: str, metrics: Mapping[str, int],
               device: str = "eth0") -> list[str]:
    """`ip route add` of a host route to `destination` on `device` carrying TCP `metrics`
    (ROUTE_METRICS' names): more specific than the subnet's, so only that peer is affected."""
    if not metrics:
        raise ValueError("no metrics: the route would change nothing")
    wrong = [f"{k}={v}" for k, v in metrics.items()
             if k not in ROUTE_METRICS or v < ROUTE_METRICS[k] or (k == "quickack" and v > 1)]
    if wrong:
        raise ValueError(f"route metrics {', '.join(wrong)}: each must be one of "
                         f"{sorted(ROUTE_METRICS)} at or above its least {ROUTE_METRICS}")
    return ["ip", "-n", namespace, "route", "add", f"{destination}/32", "dev", device,
            *(str(x) for k, v in metrics.items() for x in (k, v))]


@contextmanager
def route_metrics(namespace: str, destination: str, metrics: Mapping[str, int],
                  device: str = "eth0") -> Iterator[None]:
    """`namespace`'s traffic to `destination` routed with TCP `metrics` (new connections;
    `close_connections` for the open ones). A host route there already is not ours: refused."""
    argv = route_argv(namespace, destination, metrics, device)
    here = ["ip", "-n", namespace, "route", "show", "exact", f"{destination}/32"]
    if _run(here).strip():
        raise RuntimeFailure(f"{namespace} has a route to {destination}/32 already: "
                             "not ours to change")
    _run(argv)
    try:
        yield
    finally:
        _run(["ip", "-n", namespace, "route", "del", f"{destination}/32", "dev", device])


def close_connections_argv(namespace: str, destination: str, port: int) -> list[str]:
    """`ss -K`: abort `namespace`'s TCP connections to `destination`:`port` (sock_diag's
    destroy; the peer gets a reset)."""
    return ["ip", "netns", "exec", namespace, "ss", "-K", "-t", "dst", destination,
            "dport", "=", f":{port}"]


def close_connections(namespace: str, destination: str, port: int) -> None:
    """Abort `namespace`'s connections to `destination`:`port`: a pool (asyncpg's) opens new
    ones on its next use, which take the routes as they are now."""
    _run(close_connections_argv(namespace, destination, port))

"""The host probe's reading of /proc on this host (its network namespace's /proc/net) and of its
own cgroup: the files' text handed to `linkgrad.hostprobe`. A file that cannot be read leaves
its part None, and the rates then name it missing."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from linkgrad.hostprobe.cgroup import (
    CgroupCounters,
    own_cgroups,
    parse_blkio_v1,
    parse_cpu_stat_v2,
    parse_io_stat_v2,
)
from linkgrad.hostprobe.proc import (
    parse_diskstats,
    parse_meminfo,
    parse_net_dev,
    parse_proc_stat,
    parse_snmp,
)
from linkgrad.hostprobe.sample import HostReading

__all__ = ["V1_UNLIMITED", "read_cgroup", "read_host"]


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_host(proc: Path = Path("/proc"), clock: Callable[[], float] = time.time) -> HostReading:
    """One reading; /proc/stat and /proc/meminfo must be there (OSError otherwise)."""
    now = clock()
    stat = parse_proc_stat((proc / "stat").read_text())
    meminfo = parse_meminfo((proc / "meminfo").read_text())
    dev, disks = _text(proc / "net" / "dev"), _text(proc / "diskstats")
    snmp, netstat = _text(proc / "net" / "snmp"), _text(proc / "net" / "netstat")
    return HostReading(
        time_s=now, stat=stat, meminfo=meminfo,
        nics=parse_net_dev(dev) if dev is not None else None,
        disks=parse_diskstats(disks) if disks is not None else None,
        snmp={**parse_snmp(snmp), **(parse_snmp(netstat) if netstat else {})}
        if snmp is not None else None)


V1_UNLIMITED = 1 << 62  # memory.limit_in_bytes with no limit: a page-rounded LONG_MAX


def _v2_root(root: Path) -> Path | None:
    """Where the unified hierarchy is: the root itself (v2 only) or `unified` (hybrid)."""
    for where in (root, root / "unified"):
        if (where / "cgroup.controllers").exists():
            return where
    return None


def _int(path: Path) -> int | None:
    text = _text(path)
    return None if text is None or text.strip() == "max" else int(text)


def read_cgroup(root: Path = Path("/sys/fs/cgroup"), self_cgroup: Path = Path("/proc/self/cgroup"),
                clock: Callable[[], float] = time.time,
                ticks_per_s: int | None = None) -> CgroupCounters | None:
    """This process's own cgroups' counters (v1 controllers first, the unified hierarchy for
    what v1 does not give); None when every one is the machine's root: the host is the machine."""
    v1, v2 = own_cgroups(self_cgroup.read_text())
    ticks = ticks_per_s or os.sysconf("SC_CLK_TCK")
    now = clock()
    cpu = user = system = None
    memory = limit = None
    io = None
    if v1.get("cpuacct", "/") != "/":
        d = root / "cpuacct" / v1["cpuacct"].lstrip("/")
        usage = _int(d / "cpuacct.usage")
        cpu = None if usage is None else usage / 1e9
        stat = dict(line.split() for line in (_text(d / "cpuacct.stat") or "").splitlines())
        user = int(stat["user"]) / ticks if "user" in stat else None
        system = int(stat["system"]) / ticks if "system" in stat else None
    if v1.get("memory", "/") != "/":
        d = root / "memory" / v1["memory"].lstrip("/")
        memory, limit = _int(d / "memory.usage_in_bytes"), _int(d / "memory.limit_in_bytes")
        limit = None if limit is not None and limit >= V1_UNLIMITED else limit
    notes: list[str] = []
    if v1.get("blkio", "/") != "/":
        d = root / "blkio" / v1["blkio"].lstrip("/")
        rules = "".join(_text(d / f"blkio.throttle.{f}_device") or ""
                        for f in ("read_bps", "write_bps", "read_iops", "write_iops"))
        nbytes, ops = _text(d / "blkio.throttle.io_service_bytes"), \
            _text(d / "blkio.throttle.io_serviced")
        if not rules.strip():  # the kernel accounts a v1 cgroup's I/O in blk-throttle only
            notes.append("io: cgroup v1 counts a cgroup's block I/O only under a throttle "
                         "rule (blkio.throttle.*_device), and the host's has none")
        elif nbytes is not None:
            io = parse_blkio_v1(nbytes, ops or "")
    unified = _v2_root(root)
    if v2 not in (None, "/") and unified is not None:
        d = unified / v2.lstrip("/")
        if cpu is None and (text := _text(d / "cpu.stat")) is not None:
            cpu, user, system = parse_cpu_stat_v2(text)
        if memory is None and (memory := _int(d / "memory.current")) is not None:
            limit = _int(d / "memory.max")
        if io is None and (text := _text(d / "io.stat")) is not None:
            io = parse_io_stat_v2(text)
    if cpu is None and memory is None and io is None and not notes:
        return None
    return CgroupCounters(time_s=now, cpu_s=cpu, user_s=user, system_s=system,
                          memory_bytes=memory, memory_limit_bytes=limit, io=io,
                          notes=tuple(notes))

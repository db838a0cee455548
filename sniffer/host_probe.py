"""The host probe's reading of /proc on this host (its network namespace's /proc/net): the files'
text handed to `linkgrad.hostprobe`. A file that cannot be read leaves its part None, and the
rates then name it missing."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from linkgrad.hostprobe.proc import (
    parse_diskstats,
    parse_meminfo,
    parse_net_dev,
    parse_proc_stat,
    parse_snmp,
)
from linkgrad.hostprobe.sample import HostReading

__all__ = ["read_host"]


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

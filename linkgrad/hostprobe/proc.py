"""/proc's text, parsed (BLiPP's cpu, mem and net probes, Kissel et al. §III.C): pure functions
over a file's contents, so saved files read like live ones.

Counters come as the kernel keeps them (totals since boot); `linkgrad.hostprobe.sample` diffs
two readings. A field an older or newer kernel does not have is absent from the result, never 0:
what reads it says it is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CPU_MODES",
    "CpuTimes",
    "DiskCounters",
    "NicCounters",
    "ProcStat",
    "parse_diskstats",
    "parse_meminfo",
    "parse_net_dev",
    "parse_proc_stat",
    "parse_snmp",
]

# /proc/stat's cpu columns, in order (man 5 proc); a kernel may have fewer (guest: 2.6.24+)
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest",
             "guest_nice")


@dataclass(frozen=True)
class CpuTimes:
    """One CPU line of /proc/stat: ticks (USER_HZ) spent in each mode it has."""

    ticks: dict[str, int]  # mode -> ticks since boot; guest time is within user's

    def total(self) -> int:
        """All ticks: guest and guest_nice are counted in user and nice already."""
        return sum(v for k, v in self.ticks.items() if not k.startswith("guest"))


@dataclass(frozen=True)
class ProcStat:
    cpu: CpuTimes  # the machine
    cores: dict[str, CpuTimes]  # "cpu0" -> its times
    procs_running: int | None  # the run queue now (a gauge)
    procs_blocked: int | None  # waiting for I/O now


def parse_proc_stat(text: str) -> ProcStat:
    cpu, cores, gauges = None, {}, {}
    for line in text.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu"):
            times = CpuTimes(dict(zip(CPU_MODES, map(int, fields), strict=False)))
            if name == "cpu":
                cpu = times
            else:
                cores[name] = times
        elif name in ("procs_running", "procs_blocked") and fields:
            gauges[name] = int(fields[0])
    if cpu is None:
        raise ValueError("no 'cpu' line: not /proc/stat")
    return ProcStat(cpu, cores, gauges.get("procs_running"), gauges.get("procs_blocked"))


def parse_meminfo(text: str) -> dict[str, int]:
    """Field -> bytes (the kernel writes kB, meaning KiB), or a count for fields with no unit."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            out[key.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


@dataclass(frozen=True)
class NicCounters:
    rx_bytes: int
    rx_packets: int
    rx_errors: int
    rx_dropped: int
    tx_bytes: int
    tx_packets: int
    tx_errors: int
    tx_dropped: int


def parse_net_dev(text: str) -> dict[str, NicCounters]:
    """/proc/net/dev (of the reader's network namespace): interface -> its counters."""
    out = {}
    for line in text.splitlines()[2:]:  # two header lines
        name, _, rest = line.partition(":")
        f = [int(x) for x in rest.split()]
        if len(f) >= 12:
            out[name.strip()] = NicCounters(rx_bytes=f[0], rx_packets=f[1], rx_errors=f[2],
                                            rx_dropped=f[3], tx_bytes=f[8], tx_packets=f[9],
                                            tx_errors=f[10], tx_dropped=f[11])
    return out


@dataclass(frozen=True)
class DiskCounters:
    reads: int  # completed
    read_sectors: int  # of 512 bytes, whatever the device's own sector size
    writes: int
    write_sectors: int
    io_ms: int  # time the device had I/O in flight: its busy time


def parse_diskstats(text: str) -> dict[str, DiskCounters]:
    """/proc/diskstats: device -> counters, for devices that did any I/O since boot (loop and
    ram devices that never did are left out: they would only fill reports with zeros)."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 14:
            continue
        c = DiskCounters(reads=int(f[3]), read_sectors=int(f[5]), writes=int(f[7]),
                         write_sectors=int(f[9]), io_ms=int(f[12]))
        if c.reads or c.writes:
            out[f[2]] = c
    return out


def parse_snmp(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/snmp or /proc/net/netstat: each protocol's header line and value line paired
    (`{"Tcp": {"RetransSegs": 6, ...}, "TcpExt": {"DelayedACKs": ...}}`)."""
    out: dict[str, dict[str, int]] = {}
    lines = text.splitlines()
    for header, values in zip(lines[::2], lines[1::2], strict=False):
        name, _, keys = header.partition(":")
        vname, _, numbers = values.partition(":")
        if name != vname:
            raise ValueError(f"a {name} header followed by {vname} values")
        out[name] = dict(zip(keys.split(), map(int, numbers.split()), strict=False))
    return out

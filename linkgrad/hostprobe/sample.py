"""Two readings of a host's /proc, diffed into what it did between them: CPU shares per mode,
the run queue, memory, each NIC's and disk's rates and the host's TCP events per second.

Counters are never reported as totals since boot (they say nothing of the interval); a counter
that went backwards (an interface re-created, a counter reset) gives no rate for that interval,
and a field the kernel lacks is named in `missing`, never written 0.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from pydantic import BaseModel, ConfigDict

from linkgrad.hostprobe.proc import (
    CPU_MODES,
    CpuTimes,
    DiskCounters,
    NicCounters,
    ProcStat,
)

__all__ = ["SECTOR_BYTES", "TCP_COUNTERS", "DiskRates", "HostRates", "HostReading", "NicRates",
           "busy_share", "host_rates"]

SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors on every device
# The host's TCP events worth a rate (/proc/net/snmp's Tcp, /proc/net/netstat's TcpExt)
TCP_COUNTERS = (("Tcp", "InSegs"), ("Tcp", "OutSegs"), ("Tcp", "RetransSegs"),
                ("Tcp", "ActiveOpens"), ("Tcp", "PassiveOpens"), ("Tcp", "AttemptFails"),
                ("Tcp", "EstabResets"), ("Tcp", "OutRsts"), ("Tcp", "InErrs"),
                ("TcpExt", "DelayedACKs"), ("TcpExt", "ListenOverflows"),
                ("TcpExt", "ListenDrops"), ("TcpExt", "TCPTimeouts"))


@dataclass(frozen=True)
class HostReading:
    """One reading of the files, at `time_s` (what is None was not readable)."""

    time_s: float
    stat: ProcStat
    meminfo: dict[str, int]
    nics: dict[str, NicCounters] | None = None
    disks: dict[str, DiskCounters] | None = None
    snmp: dict[str, dict[str, int]] | None = None  # /proc/net/snmp and /proc/net/netstat


class _Rates(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NicRates(_Rates):
    rx_bytes_per_s: float
    tx_bytes_per_s: float
    rx_packets_per_s: float
    tx_packets_per_s: float
    dropped_per_s: float  # received and sent
    errors_per_s: float


class DiskRates(_Rates):
    read_bytes_per_s: float
    write_bytes_per_s: float
    reads_per_s: float
    writes_per_s: float
    busy: float  # share of the interval with I/O in flight (iostat's %util / 100)


class HostRates(_Rates):
    """What a host did from `from_s` to `to_s`."""

    from_s: float
    to_s: float
    cpu: dict[str, float]  # mode -> share of all the CPUs' time (modes sum to 1)
    cores_busy: dict[str, float]  # "cpu0" -> share of its time not idle nor in iowait
    procs_running: int | None  # at the end of the interval
    procs_blocked: int | None
    memory_used_bytes: int | None  # MemTotal - MemAvailable
    memory_total_bytes: int | None
    nics: dict[str, NicRates]
    disks: dict[str, DiskRates]
    tcp_per_s: dict[str, float]  # "RetransSegs", "DelayedACKs"... -> events per second
    missing: list[str]  # what this kernel or these files did not give, or a counter reset

    @property
    def cpu_busy(self) -> float | None:
        """All the CPUs' share neither idle nor in iowait; None when no tick was counted."""
        return busy_share(self.cpu) if self.cpu else None

    def network(self, which: str) -> float | None:
        """A NicRates field summed over every NIC but loopback (not the network); None
        without one."""
        nics = [n for name, n in self.nics.items() if name != "lo"]
        return sum(getattr(n, which) for n in nics) if nics else None


def busy_share(shares: dict[str, float]) -> float:
    """The share of CPU time neither idle nor waiting for I/O (iowait is idle time with I/O
    pending: the CPU could have run something else)."""
    return 1.0 - shares.get("idle", 0.0) - shares.get("iowait", 0.0)


def _shares(before: CpuTimes, after: CpuTimes) -> dict[str, float] | None:
    """Each mode's share of the ticks between two readings; None when a counter went back."""
    modes = [m for m in CPU_MODES if m in before.ticks and m in after.ticks
             and not m.startswith("guest")]
    deltas = {m: after.ticks[m] - before.ticks[m] for m in modes}
    total = sum(deltas.values())
    if total <= 0 or any(d < 0 for d in deltas.values()):
        return None
    return {m: d / total for m, d in deltas.items()}


def _deltas(before: NicCounters | DiskCounters, after: NicCounters | DiskCounters
            ) -> dict[str, int] | None:
    """Field -> increase between two counter records; None when one went backwards."""
    out = {f.name: getattr(after, f.name) - getattr(before, f.name) for f in fields(before)}
    return out if all(v >= 0 for v in out.values()) else None


def _nics(before: dict[str, NicCounters], after: dict[str, NicCounters], dt: float,
          missing: list[str]) -> dict[str, NicRates]:
    out = {}
    for name in sorted(before.keys() & after.keys()):
        d = _deltas(before[name], after[name])
        if d is None:
            missing.append(f"nic {name}: a counter went back (reset)")
            continue
        out[name] = NicRates(rx_bytes_per_s=d["rx_bytes"] / dt, tx_bytes_per_s=d["tx_bytes"] / dt,
                             rx_packets_per_s=d["rx_packets"] / dt,
                             tx_packets_per_s=d["tx_packets"] / dt,
                             dropped_per_s=(d["rx_dropped"] + d["tx_dropped"]) / dt,
                             errors_per_s=(d["rx_errors"] + d["tx_errors"]) / dt)
    return out


def _disks(before: dict[str, DiskCounters], after: dict[str, DiskCounters], dt: float,
           missing: list[str]) -> dict[str, DiskRates]:
    out = {}
    for name in sorted(before.keys() & after.keys()):
        d = _deltas(before[name], after[name])
        if d is None:
            missing.append(f"disk {name}: a counter went back (reset)")
            continue
        out[name] = DiskRates(read_bytes_per_s=d["read_sectors"] * SECTOR_BYTES / dt,
                              write_bytes_per_s=d["write_sectors"] * SECTOR_BYTES / dt,
                              reads_per_s=d["reads"] / dt, writes_per_s=d["writes"] / dt,
                              busy=min(d["io_ms"] / 1e3 / dt, 1.0))
    return out


def _tcp(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]], dt: float,
         missing: list[str]) -> dict[str, float]:
    out = {}
    for table, name in TCP_COUNTERS:
        a, b = before.get(table, {}).get(name), after.get(table, {}).get(name)
        if a is None or b is None:
            missing.append(f"tcp {name}: not in this kernel's /proc/net")
        elif b < a:
            missing.append(f"tcp {name}: the counter went back (reset)")
        else:
            out[name] = (b - a) / dt
    return out


def host_rates(before: HostReading, after: HostReading) -> HostRates:
    """What the host did between two readings (ValueError unless `after` is later)."""
    dt = after.time_s - before.time_s
    if not dt > 0:
        raise ValueError(f"the readings are not in time order ({before.time_s} to {after.time_s})")
    missing: list[str] = []
    cpu = _shares(before.stat.cpu, after.stat.cpu)
    if cpu is None:
        missing.append("cpu: no tick counted, or a counter went back")
    lacking = [m for m in CPU_MODES[:8] if m not in after.stat.cpu.ticks]
    if lacking:
        missing.append(f"cpu: this kernel has no {', '.join(lacking)} time")
    cores = {}
    for name in sorted(before.stat.cores.keys() & after.stat.cores.keys(),
                       key=lambda n: int(n[3:]) if n[3:].isdigit() else 0):
        shares = _shares(before.stat.cores[name], after.stat.cores[name])
        if shares is not None:
            cores[name] = busy_share(shares)
    mem = after.meminfo
    if "MemAvailable" not in mem:
        missing.append("memory: no MemAvailable (a kernel before 3.14)")
    used = mem["MemTotal"] - mem["MemAvailable"] if {"MemTotal", "MemAvailable"} <= mem.keys() \
        else None
    for what, value in (("nics", after.nics), ("disks", after.disks), ("tcp", after.snmp)):
        if value is None:
            missing.append(f"{what}: not readable")
    return HostRates(
        from_s=before.time_s, to_s=after.time_s, cpu=cpu or {}, cores_busy=cores,
        procs_running=after.stat.procs_running, procs_blocked=after.stat.procs_blocked,
        memory_used_bytes=used, memory_total_bytes=mem.get("MemTotal"),
        nics=_nics(before.nics or {}, after.nics or {}, dt, missing),
        disks=_disks(before.disks or {}, after.disks or {}, dt, missing),
        tcp_per_s=_tcp(before.snmp or {}, after.snmp or {}, dt, missing)
        if after.snmp is not None else {},
        missing=missing)

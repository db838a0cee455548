"""A host's load over a window of time (a link's measurement, the passive phase), from the host
probe's reports: each report's rates weighted by how much of the window it covers.

One number per resource, so a window's load reads in a line and compares with another's:
the machine's CPU, the host's own cgroup (its share of that CPU, on a testbed or in a
container), memory, the NICs (loopback left out: it is not the network), the busiest whole
disk (partitions would count its bytes twice) and TCP's retransmissions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from linkgrad.hostprobe.cgroup import CgroupRates
from linkgrad.hostprobe.sample import HostRates

__all__ = ["HostLoad", "ReportedRates", "load_during", "whole_disks"]


class ReportedRates(BaseModel):
    """What a host (and its own cgroup) did from `from_s` to `to_s`: one probe report."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    from_s: float
    to_s: float
    host: HostRates
    cgroup: CgroupRates | None = None


class HostLoad(BaseModel):
    """What a host did over a window, in time-weighted means (None: nothing reported it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seconds: float = Field(ge=0)  # of the window the reports covered
    cpu_busy: float | None = None  # the machine's CPUs: share not idle nor in iowait
    cpu_iowait: float | None = None
    cgroup_cpu_cores: float | None = None  # the host's own cgroup: cores kept busy
    memory_used_bytes: float | None = None
    cgroup_memory_bytes: float | None = None
    rx_bytes_per_s: float | None = None  # every NIC but loopback
    tx_bytes_per_s: float | None = None
    disk: str | None = None  # the busiest whole disk
    disk_busy: float | None = None
    disk_read_bytes_per_s: float | None = None  # of that disk
    disk_write_bytes_per_s: float | None = None
    cgroup_read_bytes_per_s: float | None = None  # the host's own block I/O, every device
    cgroup_write_bytes_per_s: float | None = None
    retransmits_per_s: float | None = None

    def describe(self) -> str:
        """One line, the host's own cgroup first where it has one (on a testbed every host
        sees the machine's CPU): "CPU 0.14 cores own (machine 60%), net 0.02/0.04 MB/s
        in/out, disk 0.00 MB/s own"."""
        parts = []
        if self.cgroup_cpu_cores is not None:
            machine = f" (machine {self.cpu_busy:.0%})" if self.cpu_busy is not None else ""
            parts.append(f"CPU {self.cgroup_cpu_cores:.2f} cores own{machine}")
        elif self.cpu_busy is not None:
            parts.append(f"CPU {self.cpu_busy:.0%}")
        if self.rx_bytes_per_s is not None and self.tx_bytes_per_s is not None:
            parts.append(f"net {self.rx_bytes_per_s / 1e6:.2f}/{self.tx_bytes_per_s / 1e6:.2f}"
                         " MB/s in/out")
        if self.cgroup_read_bytes_per_s is not None and self.cgroup_write_bytes_per_s is not None:
            own = (self.cgroup_read_bytes_per_s + self.cgroup_write_bytes_per_s) / 1e6
            parts.append(f"disk {own:.2f} MB/s own")
        elif self.disk is not None and self.disk_busy is not None:
            parts.append(f"{self.disk} {self.disk_busy:.0%} busy")
        if self.retransmits_per_s:
            parts.append(f"{self.retransmits_per_s:.1f} retransmits/s")
        return ", ".join(parts) or "nothing reported"


def whole_disks(names: Iterable[str]) -> list[str]:
    """The names that are not a partition of another name in the list (sda1 of sda,
    nvme0n1p2 of nvme0n1): a partition's I/O is its disk's too."""
    present = set(names)

    def partition(name: str) -> bool:
        stem = name.rstrip("0123456789")
        return stem != name and (stem in present or stem.removesuffix("p") in present)

    return sorted(name for name in present if not partition(name))


def _mean(spans: Sequence[tuple[float, ReportedRates]],
          value: Callable[[ReportedRates], float | None]) -> float | None:
    """The weighted mean of a value over the spans that have it."""
    pairs = [(w, v) for w, s in spans if (v := value(s)) is not None]
    total = sum(w for w, _ in pairs)
    return sum(w * v for w, v in pairs) / total if total > 0 else None


def load_during(spans: Iterable[ReportedRates], start_s: float, end_s: float) -> HostLoad | None:
    """The host's load from `start_s` to `end_s`; None when no report overlaps it."""
    weighted = [(overlap, s) for s in spans
                if (overlap := min(s.to_s, end_s) - max(s.from_s, start_s)) > 0]
    if not weighted:
        return None
    disks = whole_disks({d for _, s in weighted for d in s.host.disks})
    busy = {d: _mean(weighted, lambda s, d=d: s.host.disks[d].busy
                     if d in s.host.disks else None) for d in disks}
    disk = max(busy, key=lambda d: busy[d] or 0.0) if busy else None

    def of_disk(which: str) -> float | None:
        if disk is None:
            return None
        return _mean(weighted, lambda s: getattr(s.host.disks[disk], which)
                     if disk in s.host.disks else None)

    cg = [(w, s) for w, s in weighted if s.cgroup is not None]
    return HostLoad(
        seconds=sum(w for w, _ in weighted),
        cpu_busy=_mean(weighted, lambda s: s.host.cpu_busy),
        cpu_iowait=_mean(weighted, lambda s: s.host.cpu.get("iowait") if s.host.cpu else None),
        cgroup_cpu_cores=_mean(cg, lambda s: s.cgroup.cpu_cores if s.cgroup else None),
        memory_used_bytes=_mean(weighted, lambda s: s.host.memory_used_bytes),
        cgroup_memory_bytes=_mean(cg, lambda s: s.cgroup.memory_bytes if s.cgroup else None),
        rx_bytes_per_s=_mean(weighted, lambda s: s.host.network("rx_bytes_per_s")),
        tx_bytes_per_s=_mean(weighted, lambda s: s.host.network("tx_bytes_per_s")),
        disk=disk, disk_busy=busy.get(disk) if disk else None,
        disk_read_bytes_per_s=of_disk("read_bytes_per_s"),
        disk_write_bytes_per_s=of_disk("write_bytes_per_s"),
        cgroup_read_bytes_per_s=_mean(cg, lambda s: s.cgroup.own_io("read_bytes_per_s")
                                      if s.cgroup else None),
        cgroup_write_bytes_per_s=_mean(cg, lambda s: s.cgroup.own_io("write_bytes_per_s")
                                       if s.cgroup else None),
        retransmits_per_s=_mean(weighted, lambda s: s.host.tcp_per_s.get("RetransSegs")))

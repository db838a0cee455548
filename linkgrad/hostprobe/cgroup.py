"""A host that lives in a cgroup of its own (a container, a pod, a testbed host) measured as
that cgroup: its CPU time, memory and block I/O, from cgroup v1's controllers or v2's unified
files. Pure parsing and diffing; the sniffer reads the files.

Network namespaces share the machine's /proc/stat, so on a testbed every host would see the
same CPU; its cgroup is what is its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

__all__ = [
    "CgroupCounters",
    "CgroupIo",
    "CgroupRates",
    "IoRates",
    "cgroup_rates",
    "hosts_own",
    "own_cgroups",
    "parse_blkio_v1",
    "parse_cpu_stat_v2",
    "parse_io_stat_v2",
]


# systemd puts every process it starts in a cgroup: a login session's (an SSH command's, so
# the sniffer's), a system service's. Those are not the host's: a container's or a pod's are,
# even where systemd made them (docker-<id>.scope under system.slice).
_CONTAINER_PREFIXES = ("docker-", "libpod-", "crio-", "cri-containerd-", "lxc", "machine-")


def hosts_own(path: str) -> bool:
    """Whether a cgroup path is a host's own (a container, a pod, a VM's, a testbed host's)
    rather than the machine's root, a login session's or a system service's."""
    parts = path.strip("/").split("/")
    if parts == [""]:
        return False
    if any(p.startswith(_CONTAINER_PREFIXES) or p.startswith("kubepods") for p in parts):
        return True
    return parts[0] not in ("user.slice", "system.slice", "init.scope")


def own_cgroups(proc_self_cgroup: str) -> tuple[dict[str, str], str | None]:
    """/proc/PID/cgroup: (v1 controller -> path, the v2 path or None). Only the controllers
    a host is measured by are kept, and only where the path is the host's own (`hosts_own`):
    "/" is the machine's root, "/user.slice/.../session-4.scope" the SSH session's."""
    v1, v2 = {}, None
    for line in proc_self_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        if not hosts_own(path):
            path = "/"  # measured as the machine
        if not controllers:
            v2 = path
        for c in controllers.split(","):
            if c in ("cpuacct", "memory", "blkio"):
                v1[c] = path
    return v1, v2


@dataclass(frozen=True)
class CgroupIo:
    read_bytes: int
    write_bytes: int
    reads: int
    writes: int


@dataclass(frozen=True)
class CgroupCounters:
    """What a cgroup's files say at one time (None: that controller is not the host's own)."""

    time_s: float
    cpu_s: float | None = None  # CPU time used, all its processes, since the cgroup began
    user_s: float | None = None
    system_s: float | None = None
    memory_bytes: int | None = None
    memory_limit_bytes: int | None = None  # None: no limit
    io: dict[str, CgroupIo] | None = None  # "MAJ:MIN" -> counters
    notes: tuple[str, ...] = ()  # why a controller of its own gave nothing


def parse_blkio_v1(service_bytes: str, serviced: str) -> dict[str, CgroupIo]:
    """blkio.throttle.io_service_bytes and io_serviced: "MAJ:MIN Read N" lines per device."""
    def table(text: str) -> dict[tuple[str, str], int]:
        out = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3:
                out[(parts[0], parts[1])] = int(parts[2])
        return out

    nbytes, ops = table(service_bytes), table(serviced)
    return {dev: CgroupIo(read_bytes=nbytes.get((dev, "Read"), 0),
                          write_bytes=nbytes.get((dev, "Write"), 0),
                          reads=ops.get((dev, "Read"), 0), writes=ops.get((dev, "Write"), 0))
            for dev in sorted({d for d, _ in nbytes} | {d for d, _ in ops})}


def parse_io_stat_v2(text: str) -> dict[str, CgroupIo]:
    """io.stat: "MAJ:MIN rbytes=N wbytes=N rios=N wios=N dbytes=N dios=N" per device."""
    out = {}
    for line in text.splitlines():
        dev, *pairs = line.split()
        f = dict(p.split("=", 1) for p in pairs)
        out[dev] = CgroupIo(read_bytes=int(f.get("rbytes", 0)), write_bytes=int(f.get("wbytes", 0)),
                            reads=int(f.get("rios", 0)), writes=int(f.get("wios", 0)))
    return out


def parse_cpu_stat_v2(text: str) -> tuple[float, float | None, float | None]:
    """cpu.stat: (usage, user, system) in seconds."""
    f = {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}
    if "usage_usec" not in f:
        raise ValueError("no usage_usec: not a cgroup v2 cpu.stat")
    user, system = f.get("user_usec"), f.get("system_usec")
    return (f["usage_usec"] / 1e6, None if user is None else user / 1e6,
            None if system is None else system / 1e6)


class IoRates(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    read_bytes_per_s: float
    write_bytes_per_s: float
    reads_per_s: float
    writes_per_s: float


class CgroupRates(BaseModel):
    """What a host's cgroup did between two readings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    from_s: float
    to_s: float
    cpu_cores: float | None  # CPU seconds per second: 1.0 is one core kept busy
    user_cores: float | None
    system_cores: float | None
    memory_bytes: int | None
    memory_limit_bytes: int | None
    io: dict[str, IoRates]  # "MAJ:MIN" -> rates
    missing: list[str]

    def own_io(self, which: str) -> float | None:
        """An IoRates field summed over its devices; None when the host has no block I/O of
        its own (rather than none done: an empty io.stat before its first I/O is 0)."""
        if not self.io and any(m.startswith("io:") for m in self.missing):
            return None
        return sum(getattr(io, which) for io in self.io.values())


def _per_s(before: float | None, after: float | None, dt: float, what: str,
           missing: list[str]) -> float | None:
    if before is None or after is None:
        return None
    if after < before:
        missing.append(f"{what}: the counter went back (the cgroup was re-created)")
        return None
    return (after - before) / dt


def cgroup_rates(before: CgroupCounters, after: CgroupCounters) -> CgroupRates:
    dt = after.time_s - before.time_s
    if not dt > 0:
        raise ValueError(f"the readings are not in time order ({before.time_s} to {after.time_s})")
    missing: list[str] = list(after.notes)
    if after.cpu_s is None:
        missing.append("cpu: the host has no cgroup of its own for CPU")
    if after.memory_bytes is None:
        missing.append("memory: the host has no cgroup of its own for memory")
    if after.io is None and not any(n.startswith("io:") for n in after.notes):
        missing.append("io: the host has no cgroup of its own for block I/O")
    io = {}
    none = CgroupIo(0, 0, 0, 0)  # a device is listed from its first I/O in the cgroup on
    for dev in sorted((after.io or {}) if before.io is not None else ()):
        a, b = before.io.get(dev, none), (after.io or {})[dev]
        deltas = (b.read_bytes - a.read_bytes, b.write_bytes - a.write_bytes,
                  b.reads - a.reads, b.writes - a.writes)
        if min(deltas) < 0:
            missing.append(f"io {dev}: a counter went back")
            continue
        io[dev] = IoRates(read_bytes_per_s=deltas[0] / dt, write_bytes_per_s=deltas[1] / dt,
                          reads_per_s=deltas[2] / dt, writes_per_s=deltas[3] / dt)
    return CgroupRates(
        from_s=before.time_s, to_s=after.time_s,
        cpu_cores=_per_s(before.cpu_s, after.cpu_s, dt, "cpu", missing),
        user_cores=_per_s(before.user_s, after.user_s, dt, "cpu user", missing),
        system_cores=_per_s(before.system_s, after.system_s, dt, "cpu system", missing),
        memory_bytes=after.memory_bytes, memory_limit_bytes=after.memory_limit_bytes,
        io=io, missing=missing)

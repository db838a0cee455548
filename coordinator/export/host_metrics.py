"""The host probes' reports (`hosts.json`) in node_exporter's own names, `node_` made
`linkgrad_host_`, lower-cased (`node_memory_MemAvailable_bytes` is
`linkgrad_host_memory_memavailable_bytes`: promtool's lint refuses camelCase, node_exporter's
own included), and `experiment` and `host` labels added.

node_exporter's counters (`_total`, and the netstat collector's untyped `Tcp_*`) are totals
*since the run's probes started*, not since boot as node_exporter's are: each report's rates
integrated over its own span (CPU seconds per mode = the mode's share x the span x the number
of cores); a time no report covers (between two sessions of a resumed run) adds nothing.
Levels (memory, runnable processes) are per-phase means under a `phase` label (the probe's
context: "passive", "measure tcp app1:0 -> db:5432"), weighted by each report's span.

Where the probe measures less than node_exporter, the name says so rather than borrow
node_exporter's: CPU seconds have no `cpu` label (every core together: the probe has each
core's busy share, not its modes), and drops and errors are received and sent together
(`network_receive_and_transmit_{drop,errs}_total`, ours: node_exporter counts each way).
Disks are whole disks, as node_exporter's diskstats collector has them (a partition's I/O is
its disk's too: with both, `sum by (host)` would count it twice).

The host's own cgroup (a testbed host, a container) has no node_exporter name; it takes
cAdvisor's `container_*` names, `container_` made `linkgrad_host_cgroup_`. Its block devices
are the kernel's MAJ:MIN ("254:0"), as the cgroup's io.stat names them: the probe keeps no
device name for them (the host's /sys/dev/block/MAJ:MIN has it). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from coordinator.config.hosts_file import HostReport, HostsFile
from coordinator.export.metrics import Family
from linkgrad.hostprobe.load import whole_disks
from linkgrad.hostprobe.sample import TCP_COUNTERS

__all__ = ["host_families"]

SINCE = "since the run's probes started (not since boot)"
# name, help, extra label, what a report adds per label value: its rate times its span
Amounts = Callable[[HostReport, float], Iterator[tuple[str, float]]]


def _cpu(r: HostReport, span_s: float) -> Iterator[tuple[str, float]]:
    cores = len(r.host.cores_busy)  # no per-core line: the number of cores is not known
    for mode, share in r.host.cpu.items() if cores else ():
        yield mode, share * span_s * cores


def _nic(field: str) -> Amounts:
    return lambda r, span_s: ((dev, getattr(n, field) * span_s) for dev, n in r.host.nics.items())


def _disk(field: str) -> Amounts:
    """Whole disks only: node_exporter's diskstats leaves partitions out (sda1 is in sda)."""
    return lambda r, span_s: ((dev, getattr(r.host.disks[dev], field) * span_s)
                              for dev in whole_disks(r.host.disks))


def _cgroup_io(field: str) -> Amounts:
    return lambda r, span_s: ((dev, getattr(io, field) * span_s)
                              for dev, io in (r.cgroup.io if r.cgroup else {}).items())


DEVICE_MAJ_MIN = ("the device is the kernel's MAJ:MIN, as the cgroup's io.stat names it, "
                  "not node_exporter's name (/sys/dev/block/MAJ:MIN on the host has it)")

COUNTERS: tuple[tuple[str, str, str, Amounts], ...] = (
    ("cpu_seconds_total", "Seconds all the CPUs together spent in each mode (no cpu label: "
     "the probe has each core's busy share, not its modes)", "mode", _cpu),
    ("network_receive_bytes_total", "Bytes received", "device", _nic("rx_bytes_per_s")),
    ("network_transmit_bytes_total", "Bytes sent", "device", _nic("tx_bytes_per_s")),
    ("network_receive_packets_total", "Packets received", "device", _nic("rx_packets_per_s")),
    ("network_transmit_packets_total", "Packets sent", "device", _nic("tx_packets_per_s")),
    # linkgrad's own names: node_exporter's receive_drop and transmit_drop (errs) are each
    # way, the probe has them summed
    ("network_receive_and_transmit_drop_total", "Packets dropped, received and sent together "
     "(not node_exporter's: it counts receive_drop and transmit_drop apart)", "device",
     _nic("dropped_per_s")),
    ("network_receive_and_transmit_errs_total", "Errors, received and sent together "
     "(not node_exporter's: it counts receive_errs and transmit_errs apart)", "device",
     _nic("errors_per_s")),
    ("disk_read_bytes_total", "Bytes read from the whole disk", "device",
     _disk("read_bytes_per_s")),
    ("disk_written_bytes_total", "Bytes written to the whole disk", "device",
     _disk("write_bytes_per_s")),
    ("disk_reads_completed_total", "Reads completed on the whole disk", "device",
     _disk("reads_per_s")),
    ("disk_writes_completed_total", "Writes completed on the whole disk", "device",
     _disk("writes_per_s")),
    ("disk_io_time_seconds_total", "Seconds with I/O in flight on the whole disk", "device",
     _disk("busy")),
    ("cgroup_fs_reads_bytes_total", f"Bytes the host's own cgroup read ({DEVICE_MAJ_MIN})",
     "device", _cgroup_io("read_bytes_per_s")),
    ("cgroup_fs_writes_bytes_total", f"Bytes the host's own cgroup wrote ({DEVICE_MAJ_MIN})",
     "device", _cgroup_io("write_bytes_per_s")),
)

# name, help, the report's level (None: not reported)
LEVELS: tuple[tuple[str, str, Callable[[HostReport], float | None]], ...] = (
    ("memory_memtotal_bytes", "Memory in all (MemTotal)", lambda r: r.host.memory_total_bytes),
    ("memory_memavailable_bytes", "Memory available (MemAvailable)",
     lambda r: None if r.host.memory_total_bytes is None or r.host.memory_used_bytes is None
     else r.host.memory_total_bytes - r.host.memory_used_bytes),
    ("procs_running", "Processes runnable", lambda r: r.host.procs_running),
    ("procs_blocked", "Processes blocked on I/O", lambda r: r.host.procs_blocked),
    ("cgroup_memory_usage_bytes", "Memory the host's own cgroup used",
     lambda r: r.cgroup.memory_bytes if r.cgroup else None),
)


def _counters(hosts: HostsFile, experiment: str) -> list[Family]:
    out = []
    for name, text, label, amounts in COUNTERS:
        family = Family(f"linkgrad_host_{name}", "counter", f"{text}, {SINCE}",
                        ("experiment", "host", label))
        for host, series in sorted(hosts.hosts.items()):
            for r in series.reports:
                for value, amount in amounts(r, r.to_s - r.from_s):
                    family.add((experiment, host, value), amount)
        out.append(family)
    cgroup_cpu = Family("linkgrad_host_cgroup_cpu_usage_seconds_total", "counter",
                        f"CPU seconds the host's own cgroup used, {SINCE}",
                        ("experiment", "host"))
    for host, series in sorted(hosts.hosts.items()):
        for r in series.reports:
            if r.cgroup is not None and r.cgroup.cpu_cores is not None:
                cgroup_cpu.add((experiment, host), r.cgroup.cpu_cores * (r.to_s - r.from_s))
    return [*out, cgroup_cpu]


def _netstat(hosts: HostsFile, experiment: str) -> list[Family]:
    """node_exporter's netstat collector's `node_netstat_Tcp_RetransSegs` (untyped) and the
    like, lower-cased."""
    out = []
    for table, counter in TCP_COUNTERS:
        family = Family(f"linkgrad_host_netstat_{table}_{counter}".lower(), "untyped",
                        f"/proc/net's {table} {counter}, {SINCE}", ("experiment", "host"))
        for host, series in sorted(hosts.hosts.items()):
            for r in series.reports:
                if counter in r.host.tcp_per_s:
                    family.add((experiment, host), r.host.tcp_per_s[counter]
                               * (r.to_s - r.from_s))
        out.append(family)
    return out


def _levels(hosts: HostsFile, experiment: str) -> list[Family]:
    out = []
    for name, text, level in LEVELS:
        family = Family(f"linkgrad_host_{name}", "gauge", f"{text}: the phase's mean",
                        ("experiment", "host", "phase"))
        for host, series in sorted(hosts.hosts.items()):
            sums: dict[str, tuple[float, float]] = {}  # phase -> (span-weighted sum, span)
            for r in series.reports:
                value, span_s = level(r), r.to_s - r.from_s
                if value is not None and span_s > 0:
                    total, spans = sums.get(r.context, (0.0, 0.0))
                    sums[r.context] = (total + value * span_s, spans + span_s)
            for phase, (total, spans) in sums.items():
                family.samples[(experiment, host, phase)] = total / spans
        out.append(family)
    return out


def host_families(hosts: HostsFile, experiment: str) -> list[Family]:
    """Every host's families, labelled `experiment`; those no report gave a sample left out."""
    families = [*_counters(hosts, experiment), *_netstat(hosts, experiment),
                *_levels(hosts, experiment)]
    return [f for f in families if f.samples]

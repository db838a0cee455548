"""The sniffer's `probe` command: a thread sampling this host's /proc (and its own cgroup) at the
context's rate, with a `host` event every report interval and a last one when the context
changes or ends (protocol: linkgrad/protocol/hosts.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from linkgrad.calipers import Calipers
from linkgrad.errors import InputError, Problem
from linkgrad.hostprobe.cgroup import CgroupCounters, CgroupRates, cgroup_rates
from linkgrad.hostprobe.sample import HostRates, HostReading, host_rates
from linkgrad.protocol.hosts import HostReportEvent, Probe, Probing
from linkgrad.protocol.jsonlines import LineWriter, leave_signals_to_main_thread
from sniffer.host_probe import read_cgroup, read_host

__all__ = ["HostProber", "sampled_values"]


def sampled_values(host: HostRates, cgroup: CgroupRates | None) -> dict[str, float]:
    """One interval's values that calipers follow within a report."""
    out: dict[str, float] = {}
    if host.cpu_busy is not None:
        out["cpu_busy"] = host.cpu_busy
        out["cpu_iowait"] = host.cpu.get("iowait", 0.0)
    if host.procs_running is not None:
        out["procs_running"] = float(host.procs_running)
    if host.memory_used_bytes is not None:
        out["memory_used_bytes"] = float(host.memory_used_bytes)
    for name, n in host.nics.items():
        out[f"nic {name} rx_bytes_per_s"] = n.rx_bytes_per_s
        out[f"nic {name} tx_bytes_per_s"] = n.tx_bytes_per_s
    for name, d in host.disks.items():
        out[f"disk {name} busy"] = d.busy
        out[f"disk {name} read_bytes_per_s"] = d.read_bytes_per_s
        out[f"disk {name} write_bytes_per_s"] = d.write_bytes_per_s
    if "RetransSegs" in host.tcp_per_s:
        out["tcp RetransSegs_per_s"] = host.tcp_per_s["RetransSegs"]
    if cgroup is not None and cgroup.cpu_cores is not None:
        out["cgroup cpu_cores"] = cgroup.cpu_cores
    if cgroup is not None and cgroup.memory_bytes is not None:
        out["cgroup memory_bytes"] = float(cgroup.memory_bytes)
    return out


@dataclass
class _Report:
    """The readings of the report being made: its first, the latest, calipers per value."""

    first: HostReading
    first_cgroup: CgroupCounters | None
    last: HostReading
    last_cgroup: CgroupCounters | None
    samples: int = 1
    series: dict[str, Calipers] = field(default_factory=dict)


class HostProber:
    """One context at a time; `start` replaces a running one (after its last report)."""

    def __init__(self, out: LineWriter, read: Callable[[], HostReading] = read_host,
                 read_own: Callable[[], CgroupCounters | None] = read_cgroup) -> None:
        self.out, self.read, self.read_own = out, read, read_own
        self.request = Probe()
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.report: _Report | None = None
        self.lock = threading.Lock()  # the report: the sampling thread against stop()
        self.answer = Probing(context="", sample_interval_s=0.0, report_interval_s=0.0,
                              cgroup=False)

    def start(self, request: Probe) -> Probing:
        if request.report_interval_s < request.sample_interval_s:
            raise InputError(Problem(
                f"{request.report_interval_s:g} s is shorter than a sample "
                f"({request.sample_interval_s:g} s)", field="report_interval_s"))
        self.stop()
        first, own = self.read(), self.read_own()
        self.request, self.report = request, _Report(first, own, first, own)
        # an event of its own: a thread that outlived stop()'s join still sees its own set
        self.stopping = threading.Event()
        self.answer = Probing(context=request.context,
                              sample_interval_s=request.sample_interval_s,
                              report_interval_s=request.report_interval_s,
                              cgroup=own is not None, missing=self._missing(first, own))
        self.thread = threading.Thread(target=self._run, args=(self.stopping,),
                                       name="host probe", daemon=True)
        self.thread.start()
        return self.answer

    def stop(self) -> Probing:
        """End the running context with a last report (of what it has since the previous)."""
        if self.thread is None:
            return self.answer
        self.stopping.set()
        self.thread.join(timeout=30)
        self.thread = None
        with self.lock:
            report = self.report
            if report is not None:
                reading = self.read()
                # shorter than half a sample: too few ticks to say much
                if reading.time_s - report.last.time_s >= self.request.sample_interval_s / 2:
                    self._sample(reading)
            self._emit()
            self.report = None
        return self.answer

    def _missing(self, reading: HostReading, own: CgroupCounters | None) -> tuple[str, ...]:
        said = [f"{what}: not readable" for what, value in
                (("nics", reading.nics), ("disks", reading.disks), ("tcp", reading.snmp))
                if value is None]
        return (*said, *(own.notes if own is not None else ()))

    def _run(self, stopping: threading.Event) -> None:
        leave_signals_to_main_thread()
        sample_s, report_s = self.request.sample_interval_s, self.request.report_interval_s
        started = time.monotonic()
        next_sample, next_report = started + sample_s, started + report_s
        while not stopping.wait(max(0.0, next_sample - time.monotonic())):
            with self.lock:
                if stopping.is_set():
                    return
                self._sample()
                if time.monotonic() >= next_report - 1e-6:
                    self._emit()
                    next_report += report_s
            next_sample += sample_s

    def _sample(self, reading: HostReading | None = None) -> None:
        report = self.report
        if report is None:
            return
        reading, own = reading or self.read(), self.read_own()
        if reading.time_s <= report.last.time_s:
            return  # the clock did not move (a stop right after a sample)
        step = host_rates(report.last, reading)
        step_own = (cgroup_rates(report.last_cgroup, own)
                    if report.last_cgroup is not None and own is not None else None)
        for name, value in sampled_values(step, step_own).items():
            report.series.setdefault(name, Calipers()).add(value)
        report.last, report.last_cgroup, report.samples = reading, own, report.samples + 1

    def _emit(self) -> None:
        report = self.report
        if report is None or report.samples < 2:
            return
        own = (cgroup_rates(report.first_cgroup, report.last_cgroup)
               if report.first_cgroup is not None and report.last_cgroup is not None else None)
        self.out.write(HostReportEvent(
            context=self.request.context, from_s=report.first.time_s, to_s=report.last.time_s,
            samples=report.samples, host=host_rates(report.first, report.last), cgroup=own,
            series={k: c.summary() for k, c in sorted(report.series.items())}))
        self.report = _Report(report.last, report.last_cgroup, report.last, report.last_cgroup)

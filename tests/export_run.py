"""A small run directory with known numbers for `linkgrad export`'s tests, written by the run's
own writers: two links (one measured at two delays, whose second measurement is the run's last
state), a transaction without an estimate, SNAP seconds per phase, and two hosts' probe
reports over a passive and a measurement phase."""

from __future__ import annotations

from pathlib import Path

from coordinator.config.hosts_file import HostReport, HostSeries, HostsFile, ProbePhase
from coordinator.config.run_dir import RunDir
from coordinator.config.run_records import (
    LinkMeasurement,
    MeasuredLink,
    Perturbation,
    RunInjection,
    RunJournal,
)
from linkgrad.hostprobe.cgroup import CgroupRates, IoRates
from linkgrad.hostprobe.sample import DiskRates, HostRates, NicRates
from linkgrad.spectral.result import GradientResult

EXPERIMENT = "shop"
START = 1_795_000_000.0
LINK_A = "tcp app1:0 -> db:5432"
LINK_B = "tcp web:0 -> app1:8080"
MEASURE = f"measure {LINK_A}"
CORES = 2


def _measurement(label: str, link: MeasuredLink, start: float, delay_ms: float,
                 gradients: dict[str, tuple[float, float, float] | None],
                 snap: dict[str, dict[str, float]] | None = None,
                 planned_ms: float | None = None) -> LinkMeasurement:
    transactions = {name: GradientResult(gradient=g[0], ci95=(g[1], g[2]), requests=400)
                    if g else GradientResult(notes=["too few requests"])
                    for name, g in gradients.items()}
    return LinkMeasurement(
        record=RunInjection(start=start, period_s=8.0, cycles=4, magnitude_ms=delay_ms,
                            link=label),
        requested_ms=delay_ms, packets_delayed=100,
        perturbation=Perturbation(throughput_per_s=40.0, throughput_change=0.0,
                                  mean_response_ms=90.0, mean_response_change_ms=10.0),
        transactions=transactions, link=link, snap=snap, planned_ms=planned_ms)


def measurements() -> list[LinkMeasurement]:
    a = MeasuredLink(proto="tcp", src_host="app1", src_addr="10.0.0.3", src_port=0,
                     dst_host="db", dst_addr="10.0.0.5", dst_port=5432, label=LINK_A)
    b = MeasuredLink(proto="tcp", src_host="web", src_port=0, dst_host="app1", dst_port=8080,
                     label=LINK_B)  # no addresses: experiment.json's
    return [
        _measurement(LINK_A, a, START, 5.0, {"single": (0.5, 0.1, 0.9), "async": None},
                     planned_ms=5.0),
        _measurement(LINK_A, a, START + 100, 10.0,
                     {"single": (1.02, 0.9, 1.1), "async": None},
                     snap={"passive": {"delayed_ack": 3.5},
                           "measurement": {"app_limited": 7.25}}, planned_ms=10.0),
        _measurement(LINK_B, b, START + 200, 10.0, {"single": (2.0, 1.5, 2.5),
                                                    "async": (0.01, -0.1, 0.12)}),
    ]


def _report(context: str, from_s: float, used_bytes: int, cores: int = CORES,
            cgroup: bool = True) -> HostReport:
    """10 s of a host: CPU 25% user, 5% system; 1000 B/s in, 500 out on eth0; vda busy 10%
    writing 4096 B/s, all of it to its partition vda1; 0.5 retransmissions/s; its cgroup half
    a core, 100 MB and 2048 B/s written to 254:0 (vda)."""
    to_s = from_s + 10.0
    host = HostRates(
        from_s=from_s, to_s=to_s, cpu={"user": 0.25, "system": 0.05, "idle": 0.7},
        cores_busy={f"cpu{i}": 0.3 for i in range(cores)}, procs_running=3, procs_blocked=0,
        memory_used_bytes=used_bytes, memory_total_bytes=8_000_000_000,
        nics={"eth0": NicRates(rx_bytes_per_s=1000.0, tx_bytes_per_s=500.0, rx_packets_per_s=10.0,
                               tx_packets_per_s=5.0, dropped_per_s=0.0, errors_per_s=0.0)},
        disks={d: DiskRates(read_bytes_per_s=0.0, write_bytes_per_s=4096.0, reads_per_s=0.0,
                            writes_per_s=1.0, busy=0.1) for d in ("vda", "vda1")},
        tcp_per_s={"RetransSegs": 0.5, "InSegs": 20.0}, missing=[])
    group = CgroupRates(from_s=from_s, to_s=to_s, cpu_cores=0.5, user_cores=0.4,
                        system_cores=0.1, memory_bytes=100_000_000, memory_limit_bytes=None,
                        io={"254:0": IoRates(read_bytes_per_s=0.0, write_bytes_per_s=2048.0,
                                             reads_per_s=0.0, writes_per_s=0.5)},
                        missing=[]) if cgroup else None
    return HostReport(from_s=from_s, to_s=to_s, host=host, cgroup=group, context=context,
                      samples=10)


def hosts_file() -> HostsFile:
    t = START - 30
    return HostsFile(
        experiment=EXPERIMENT,
        phases=[ProbePhase(context="passive", start_s=t, end_s=t + 20),
                ProbePhase(context=MEASURE, start_s=t + 20, end_s=t + 30, links=[LINK_A])],
        hosts={"app1": HostSeries(reports=[_report("passive", t, 2_000_000_000),
                                           _report("passive", t + 10, 4_000_000_000),
                                           _report(MEASURE, t + 20, 6_000_000_000)]),
               "db": HostSeries(reports=[_report(MEASURE, t + 20, 1_000_000_000, cores=0,
                                                 cgroup=False)])})


def make_run(parent: Path, hosts: bool = True) -> Path:
    """The run directory `parent/shop-run`, as a run writes it."""
    out = RunDir(parent / "shop-run")
    out.write_measurements(EXPERIMENT, measurements())
    out.write("run.json", RunJournal(status="completed", started=START - 60, links_done=3,
                                     ended=START + 300))
    out.write("experiment.json", {"name": EXPERIMENT, "hosts": [
        {"name": "web", "address": "10.0.0.2"}, {"name": "app1", "address": "10.0.0.3"},
        {"name": "db", "address": "10.0.0.5"}]})
    if hosts:  # written as the run writes it: None said (HostRates needs its fields)
        out.write("hosts.json", hosts_file().model_dump(mode="json"))
    return out.path

"""A host's load over a window from the probe's reports (linkgrad.hostprobe.load)."""

from __future__ import annotations

import pytest

from coordinator.config.hosts_file import HostReport, HostSeries, HostsFile, ProbePhase
from linkgrad.hostprobe.cgroup import CgroupRates, IoRates
from linkgrad.hostprobe.load import ReportedRates, load_during, whole_disks
from linkgrad.hostprobe.sample import DiskRates, HostRates, NicRates


def _nic(rx: float, tx: float) -> NicRates:
    return NicRates(rx_bytes_per_s=rx, tx_bytes_per_s=tx, rx_packets_per_s=0,
                    tx_packets_per_s=0, dropped_per_s=0, errors_per_s=0)


def _disk(busy: float, write: float = 0.0) -> DiskRates:
    return DiskRates(read_bytes_per_s=0, write_bytes_per_s=write, reads_per_s=0,
                     writes_per_s=0, busy=busy)


def span(from_s: float, to_s: float, idle: float, rx: float = 0.0, busy: float = 0.0,
         cores: float | None = None, retrans: float | None = None) -> ReportedRates:
    host = HostRates(from_s=from_s, to_s=to_s, cpu={"user": 1 - idle, "idle": idle},
                     cores_busy={"cpu0": 1 - idle}, procs_running=1, procs_blocked=0,
                     memory_used_bytes=1000, memory_total_bytes=4000,
                     nics={"lo": _nic(1e9, 1e9), "eth0": _nic(rx, rx / 2)},
                     disks={"sda": _disk(busy, 1e6), "sda1": _disk(busy, 1e6),
                            "sdb": _disk(busy / 2)},
                     tcp_per_s={} if retrans is None else {"RetransSegs": retrans}, missing=[])
    cgroup = None if cores is None else CgroupRates(
        from_s=from_s, to_s=to_s, cpu_cores=cores, user_cores=None, system_cores=None,
        memory_bytes=500, memory_limit_bytes=None,
        io={"8:0": IoRates(read_bytes_per_s=10, write_bytes_per_s=20, reads_per_s=1,
                           writes_per_s=1)}, missing=[])
    return ReportedRates(from_s=from_s, to_s=to_s, host=host, cgroup=cgroup)


def test_each_report_counts_for_the_part_of_the_window_it_covers():
    spans = [span(0, 10, idle=1.0), span(10, 20, idle=0.0, rx=100.0)]
    load = load_during(spans, 5, 20)  # 5 s of the idle report, 10 of the busy one
    assert load is not None
    assert load.seconds == pytest.approx(15)
    assert load.cpu_busy == pytest.approx(10 / 15)
    assert load.rx_bytes_per_s == pytest.approx(100 * 10 / 15)  # loopback left out
    assert load.tx_bytes_per_s == pytest.approx(50 * 10 / 15)


def test_a_window_no_report_overlaps_has_no_load():
    assert load_during([span(0, 10, idle=0.5)], 10, 20) is None
    assert load_during([], 0, 1) is None


def test_the_busiest_whole_disk_is_named_and_its_partitions_not_counted_again():
    load = load_during([span(0, 10, idle=0.5, busy=0.4)], 0, 10)
    assert load is not None
    assert (load.disk, load.disk_busy, load.disk_write_bytes_per_s) == ("sda", 0.4, 1e6)


def test_the_cgroup_and_tcp_are_said_only_where_reported():
    bare = load_during([span(0, 10, idle=0.5)], 0, 10)
    assert bare is not None
    assert (bare.cgroup_cpu_cores, bare.cgroup_write_bytes_per_s, bare.retransmits_per_s) == (
        None, None, None)
    # the cgroup's mean covers only the reports that had it
    own = load_during([span(0, 10, idle=0.5), span(10, 20, idle=0.5, cores=0.8, retrans=3)],
                      0, 20)
    assert own is not None
    assert own.cgroup_cpu_cores == pytest.approx(0.8)
    assert own.cgroup_write_bytes_per_s == pytest.approx(20)
    assert own.retransmits_per_s == pytest.approx(3)
    assert own.describe().startswith("CPU 0.80 cores own (machine 50%), ")
    assert "disk 0.00 MB/s own" in own.describe()  # 30 B/s of its own, not the machine's sda
    assert bare.describe().startswith("CPU 50%, ")
    assert "sda 0% busy" in bare.describe()


def test_a_cgroup_without_block_io_of_its_own_says_none_not_zero():
    lacking = span(0, 10, idle=0.5, cores=0.1)
    assert lacking.cgroup is not None
    lacking = lacking.model_copy(update={"cgroup": lacking.cgroup.model_copy(update={
        "io": {}, "missing": ["io: cgroup v1 counts a cgroup's block I/O only under a rule"]})})
    idle = span(0, 10, idle=0.5, cores=0.1)
    assert idle.cgroup is not None
    idle = idle.model_copy(update={"cgroup": idle.cgroup.model_copy(update={"io": {}})})
    no_rule, quiet = load_during([lacking], 0, 10), load_during([idle], 0, 10)
    assert no_rule is not None
    assert quiet is not None
    assert no_rule.cgroup_write_bytes_per_s is None
    assert quiet.cgroup_write_bytes_per_s == 0.0  # an empty io.stat: no I/O yet


@pytest.mark.parametrize(("names", "whole"), [
    (["sda", "sda1", "sda2"], ["sda"]),
    (["nvme0n1", "nvme0n1p1", "nvme1n1"], ["nvme0n1", "nvme1n1"]),
    (["mmcblk0", "mmcblk0p1"], ["mmcblk0"]),
    (["dm-0", "dm-1", "loop0", "md0"], ["dm-0", "dm-1", "loop0", "md0"]),
    (["sda1"], ["sda1"]),  # a partition whose disk is not listed stands for it
])
def test_whole_disks(names, whole):
    assert whole_disks(names) == whole


def test_a_resumed_run_s_series_follow_the_earlier_session_s():
    def report(at: float, context: str) -> HostReport:
        s = span(at, at + 5, idle=0.5)
        return HostReport(context=context, samples=2, from_s=s.from_s, to_s=s.to_s,
                          host=s.host)

    earlier = HostsFile(experiment="x", phases=[ProbePhase(context="passive", start_s=0,
                                                           end_s=10)],
                        hosts={"a": HostSeries(reports=[report(0, "passive")]),
                               "b": HostSeries(reports=[report(0, "passive")])})
    later = HostsFile(experiment="x", phases=[ProbePhase(context="passive", start_s=100)],
                      hosts={"a": HostSeries(reports=[report(100, "passive")]),
                             "c": HostSeries(reports=[report(100, "passive")])})
    both = earlier.merged(later)
    assert [p.start_s for p in both.phases] == [0, 100]
    assert [r.from_s for r in both.hosts["a"].reports] == [0, 100]
    assert set(both.hosts) == {"a", "b", "c"}
    loads = both.hosts["a"].load_during(0, 200)
    assert loads is not None
    assert loads.seconds == 10  # each session's own report, nothing between

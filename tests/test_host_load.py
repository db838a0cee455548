"""A host's load over a window from the probe's reports (linkgrad.hostprobe.load)."""

from __future__ import annotations

import pytest

from linkgrad.hostprobe.cgroup import CgroupRates, IoRates
from linkgrad.hostprobe.load import Span, load_during, whole_disks
from linkgrad.hostprobe.sample import DiskRates, HostRates, NicRates


def _nic(rx: float, tx: float) -> NicRates:
    return NicRates(rx_bytes_per_s=rx, tx_bytes_per_s=tx, rx_packets_per_s=0,
                    tx_packets_per_s=0, dropped_per_s=0, errors_per_s=0)


def _disk(busy: float, write: float = 0.0) -> DiskRates:
    return DiskRates(read_bytes_per_s=0, write_bytes_per_s=write, reads_per_s=0,
                     writes_per_s=0, busy=busy)


def span(from_s: float, to_s: float, idle: float, rx: float = 0.0, busy: float = 0.0,
         cores: float | None = None, retrans: float | None = None) -> Span:
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
    return Span(from_s=from_s, to_s=to_s, host=host, cgroup=cgroup)


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
    assert "CPU 50% (own 0.80 cores)" in own.describe()


@pytest.mark.parametrize(("names", "whole"), [
    (["sda", "sda1", "sda2"], ["sda"]),
    (["nvme0n1", "nvme0n1p1", "nvme1n1"], ["nvme0n1", "nvme1n1"]),
    (["mmcblk0", "mmcblk0p1"], ["mmcblk0"]),
    (["dm-0", "dm-1", "loop0", "md0"], ["dm-0", "dm-1", "loop0", "md0"]),
    (["sda1"], ["sda1"]),  # a partition whose disk is not listed stands for it
])
def test_whole_disks(names, whole):
    assert whole_disks(names) == whole

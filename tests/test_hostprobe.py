"""The host probe's parsing and diffing, on recorded /proc files and on this machine's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from linkgrad.hostprobe.proc import parse_net_dev, parse_proc_stat, parse_snmp
from linkgrad.hostprobe.sample import HostReading, host_rates
from sniffer.host_probe import read_host

RECORDED = Path(__file__).parent / "data" / "proc"  # README.md there says what ran between


def _recorded(which: str, t: float) -> HostReading:
    return read_host(RECORDED / which, clock=lambda: t)


def test_recorded_readings_show_the_direct_write_the_refused_connect_and_busy_cores():
    rates = host_rates(_recorded("a", 0.0), _recorded("b", 3.0))
    assert rates.missing == []
    assert rates.disks["vda"].write_bytes_per_s * 3.0 >= 200 * 2**20  # dd's 200 MiB
    assert rates.tcp_per_s["AttemptFails"] * 3.0 == pytest.approx(1.0)  # curl refused once
    assert sum(rates.cpu.values()) == pytest.approx(1.0)
    assert set(rates.cores_busy) == {"cpu0", "cpu1"}
    assert rates.cpu["user"] > 0.5  # the busy loop and the test runs
    assert rates.memory_total_bytes == 24683652 * 1024
    assert rates.nics["lo"].rx_packets_per_s > 0
    assert "loop0" not in rates.disks  # never used: no zeros for it


def test_a_counter_that_goes_back_gives_no_rate_and_is_named():
    before, after = _recorded("a", 0.0), _recorded("b", 1.0)
    nics = dict(after.nics or {})
    lo = nics["lo"]
    nics["lo"] = type(lo)(**{**lo.__dict__, "rx_bytes": 0})  # the interface was re-created
    snmp = {**(after.snmp or {}), "Tcp": {**(after.snmp or {})["Tcp"], "RetransSegs": 0}}
    rates = host_rates(before, HostReading(1.0, after.stat, after.meminfo, nics, after.disks,
                                           snmp))
    assert "lo" not in rates.nics
    assert "RetransSegs" not in rates.tcp_per_s
    assert "nic lo: a counter went back (reset)" in rates.missing
    assert "tcp RetransSegs: the counter went back (reset)" in rates.missing


def test_what_an_old_kernel_lacks_is_named_missing_not_zero():
    old = "cpu  10 0 5 100\ncpu0 10 0 5 100\n"  # 2.4-era: four modes, no procs_ lines
    later = "cpu  20 0 10 120\ncpu0 20 0 10 120\n"
    mem = {"MemTotal": 1 << 30, "MemFree": 1 << 29}  # no MemAvailable (before 3.14)
    rates = host_rates(HostReading(0.0, parse_proc_stat(old), mem),
                       HostReading(1.0, parse_proc_stat(later), mem))
    assert rates.cpu == pytest.approx({"user": 10 / 35, "nice": 0.0, "system": 5 / 35,
                                       "idle": 20 / 35})
    assert "iowait" not in rates.cpu
    assert any("no iowait, irq, softirq, steal time" in m for m in rates.missing)
    assert rates.memory_used_bytes is None
    assert "memory: no MemAvailable (a kernel before 3.14)" in rates.missing
    assert rates.procs_running is None
    assert {"nics: not readable", "disks: not readable", "tcp: not readable"} <= set(rates.missing)


def test_readings_out_of_order_are_refused():
    a = _recorded("a", 5.0)
    with pytest.raises(ValueError, match="not in time order"):
        host_rates(a, a)


def test_parsers_refuse_what_is_not_their_file():
    with pytest.raises(ValueError, match="not /proc/stat"):
        parse_proc_stat("MemTotal: 1 kB\n")
    with pytest.raises(ValueError, match="header followed by"):
        parse_snmp("Tcp: A B\nUdp: 1 2\n")
    assert parse_net_dev("header\nheader\n") == {}


def test_this_machine_s_proc_read_twice_around_a_busy_loop():
    before = read_host()
    end = time.process_time() + 0.3
    while time.process_time() < end:  # CPU time, so at least 30 ticks of it go by
        pass
    rates = host_rates(before, read_host())
    assert rates.cpu["user"] + rates.cpu["system"] > 0
    assert rates.memory_used_bytes is not None
    assert rates.memory_used_bytes > 0
    assert "lo" in rates.nics
    assert "Tcp" in (before.snmp or {})

"""The injector's watchdog on real packets (root; CI runs them): a daemon stopped by SIGSTOP
holds its link for at most about a second, not for as long as it is stopped, and neither it
nor its watchdog leaves anything behind however it ends."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linkgrad.protocol.injector import Add, HealthRequest
from testbed.pairs.hosts import TOOLS, Hosts, InjectorProcess
from tests.marks import IPTABLES
from tests.netns_tools.pairs import echo_pair

pytestmark = IPTABLES

UDP_PORT = 7203
STOPPED_S = 3.0


@pytest.fixture
def pair():
    with echo_pair([], [UDP_PORT]) as hosts:
        yield hosts


def _children(pid: int) -> list[int]:
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()]


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _probe_in_background(hosts: Hosts, count: int, interval_s: float) -> subprocess.Popen:
    b = hosts.addresses["b"]
    return hosts.popen("a", sys.executable, str(TOOLS / "probe.py"), "udp", b, str(UDP_PORT),
                       str(count), str(interval_s), stdout=subprocess.PIPE)


def _constant(dst: str, magnitude_ms: float) -> Add:
    """The injector's `add` of a constant delay on UDP to `dst`."""
    return Add.model_validate({"link": {"proto": "udp", "dst": dst},
                               "schedule": {"kind": "constant", "magnitude_ms": magnitude_ms}})


def _stall_under_traffic(hosts: Hosts, queue: str, then: str) -> tuple[InjectorProcess, dict]:
    """A 5 ms delay on a UDP link at 200 probes/s; the daemon stopped for 3 s in the middle,
    then continued or killed. Returns the daemon and the probe's result."""
    daemon = InjectorProcess(hosts, "a", "--queue", queue)
    daemon.ok(_constant(f"{hosts.addresses['b']}:{UDP_PORT}", 5))
    watchdog = _children(daemon.proc.pid)
    assert len(watchdog) == 1
    daemon.watchdog_pid = watchdog[0]  # type: ignore[attr-defined]
    probe = _probe_in_background(hosts, 1000, 0.005)  # 5 s
    time.sleep(1.0)
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        # the watchdog takes over while the daemon is still stopped: its rules go
        _wait(lambda: f"LINKGRAD-Q{queue}" not in hosts.iptables_rules("a"), STOPPED_S - 0.5,
              f"the stopped daemon's rules stayed for {STOPPED_S - 0.5} s")
        time.sleep(max(0.0, stopped_at + STOPPED_S - time.monotonic()))
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT if then == "cont" else signal.SIGKILL)
        if then == "kill":
            os.kill(daemon.proc.pid, signal.SIGCONT)  # (a stopped process dies only then)
    out, _ = probe.communicate(timeout=30)
    return daemon, json.loads(out)


def _assert_held_at_most_a_second(result: dict) -> None:
    rtts = [r for r in result["rtt"] if r == r]  # NaN: lost
    assert len(rtts) >= 990, f"{1000 - len(rtts)} probes lost"  # fail-open, not dropped
    # released within STALL_S + TICK_S + the rules' removal (about 0.6 s), not after the 3 s
    # the daemon was stopped
    assert max(rtts) < 1.0, max(rtts)
    # after the take-over the link is undelayed: the probes' last second saw no 5 ms
    assert statistics.median(result["rtt"][-200:]) < 0.004


def test_a_stopped_daemon_lets_its_link_go_within_a_second_and_stops_when_continued(pair):
    daemon, result = _stall_under_traffic(pair, "5600", "cont")
    _assert_held_at_most_a_second(result)
    stopped = daemon.client.wait_for("stopped", timeout_s=15)
    assert stopped["reason"].startswith("stalled: no progress for")
    assert "LINKGRAD-Q5600" in stopped["reason"]
    assert daemon.proc.wait(timeout=15) == 0
    daemon.client.close()  # it confirmed it stopped: no error
    _wait(lambda: _gone(daemon.watchdog_pid), 10, "the watchdog outlived its daemon")
    assert "LINKGRAD" not in pair.iptables_rules("a")


def test_a_stopped_daemon_killed_leaves_nothing(pair):
    daemon, result = _stall_under_traffic(pair, "5610", "kill")
    _assert_held_at_most_a_second(result)
    assert daemon.proc.wait(timeout=15) == -signal.SIGKILL
    _wait(lambda: _gone(daemon.watchdog_pid), 10, "the watchdog outlived its daemon")
    assert "LINKGRAD" not in pair.iptables_rules("a")


def test_a_killed_daemon_lets_its_held_packets_pass(pair):
    """SIGKILL with packets held 300 ms: the watchdog accepts them (the kernel would drop them
    with the queue) and removes the chain."""
    b = pair.addresses["b"]
    daemon = InjectorProcess(pair, "a", "--queue", "5620")
    daemon.ok(_constant(f"{b}:{UDP_PORT}", 300))
    watchdog = _children(daemon.proc.pid)
    probe = _probe_in_background(pair, 100, 0.01)  # 1 s
    time.sleep(0.5)
    os.kill(daemon.proc.pid, signal.SIGKILL)
    result = json.loads(probe.communicate(timeout=30)[0])
    assert all(r == r for r in result["rtt"]), "a held packet was lost"
    _wait(lambda: all(map(_gone, watchdog)), 10, "the watchdog outlived its daemon")
    assert "LINKGRAD" not in pair.iptables_rules("a")


def test_a_daemon_at_work_is_no_stall(pair):
    """A 700 ms delay holds packets longer than the stall limit: the threads beat on."""
    b = pair.addresses["b"]
    daemon = InjectorProcess(pair, "a", "--queue", "5630", "--max-magnitude-ms", "1000")
    try:
        daemon.ok(_constant(f"{b}:{UDP_PORT}", 700))
        result = json.loads(_probe_in_background(pair, 100, 0.02).communicate(timeout=30)[0])
        assert statistics.median(result["rtt"]) == pytest.approx(0.7, abs=0.05)
        assert daemon.ok(HealthRequest()).links == 1
    finally:
        daemon.stop()
    assert "LINKGRAD" not in pair.iptables_rules("a")

"""The injector on real packets between network namespaces (root; CI runs them)."""

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

from linkgrad.protocol.base import ErrorInfo, Reply
from linkgrad.protocol.injector import Add, HealthRequest, SetSchedule, StatsRequest
from linkgrad.protocol.jsonlines import DidNotStart
from testbed.pairs.hosts import Hosts, InjectorProcess, Probe, make_routed
from tests.marks import IPTABLES
from tests.netns_tools.pairs import echo_pair

pytestmark = IPTABLES

TCP_DELAYED, TCP_OTHER, UDP_PORT = 7101, 7102, 7103


@pytest.fixture
def pair():
    with echo_pair([TCP_DELAYED, TCP_OTHER], [UDP_PORT]) as hosts:
        yield hosts


@pytest.fixture
def daemon(pair):
    client = InjectorProcess(pair, "a", "--queue", "5200")
    yield client
    client.stop()


def added_ms(probe: Probe, base: Probe) -> float:
    return (statistics.median(probe.rtt) - statistics.median(base.rtt)) * 1e3


def constant(ms: float) -> dict:
    return {"kind": "constant", "magnitude_ms": ms}


def add(link: dict, schedule: dict) -> Add:
    return Add.model_validate({"link": link, "schedule": schedule})


def refused(reply: Reply) -> ErrorInfo:
    """The error of a reply that must be one."""
    assert not reply.ok, reply
    assert reply.error is not None, reply
    return reply.error


def test_constant_delay_on_that_link_only(pair, daemon):
    b = pair.addresses["b"]
    base_tcp = pair.probe("a", "tcp", b, TCP_DELAYED, 20, 0.01)
    base_udp = pair.probe("a", "udp", b, UDP_PORT, 20, 0.01)
    daemon.ok(add({"proto": "tcp", "dst": f"{b}:{TCP_DELAYED}"}, constant(20)))
    daemon.ok(add({"proto": "udp", "dst": f"{b}:{UDP_PORT}"}, constant(10)))
    daemon.ok(add({"proto": "icmp", "dst": b}, constant(15)))
    tcp_added = added_ms(pair.probe("a", "tcp", b, TCP_DELAYED, 20, 0.01), base_tcp)
    assert tcp_added == pytest.approx(20, abs=1.0)
    assert added_ms(pair.probe("a", "udp", b, UDP_PORT, 20, 0.01), base_udp) == pytest.approx(
        10, abs=1.0)
    other = pair.probe("a", "tcp", b, TCP_OTHER, 20, 0.01)  # same hosts, another port
    assert statistics.median(other.rtt) * 1e3 < 1.0
    ping = pair.exec("a", "ping", "-c", "5", "-i", "0.05", "-q", b).stdout
    avg_ms = float(ping.strip().splitlines()[-1].split("=")[1].split("/")[1])
    # ping's own average: at least the 15 ms asked, plus a busy machine's wake-ups (16.2
    # in one CI run), and not a unit off
    assert 14 <= avg_ms < 20, avg_ms
    stats = daemon.ok(StatsRequest(link_id=1)).links["1"].schedules["0"]["constant"]
    assert stats.actual.count >= 20  # at least the 20 data segments (ACKs piggyback)
    assert stats.actual.mean_ms == pytest.approx(tcp_added, abs=0.5)  # it tells the truth
    assert stats.error.min_ms is not None
    assert stats.error.min_ms >= 0  # never released before its time


def test_a_daemon_on_the_receiver_delays_the_link_once(pair):
    """Held at the receiver's INPUT, as a network would hold it; a packet to one's own address
    passes OUTPUT and INPUT (on lo) but is held once."""
    b = pair.addresses["b"]
    base = pair.probe("a", "tcp", b, TCP_DELAYED, 20, 0.01)
    own_base = pair.probe("b", "tcp", b, TCP_DELAYED, 20, 0.01)
    receiver = InjectorProcess(pair, "b", "--queue", "5400")
    try:
        receiver.ok(add({"proto": "tcp", "dst": f"{b}:{TCP_DELAYED}"}, constant(20)))
        assert added_ms(pair.probe("a", "tcp", b, TCP_DELAYED, 20, 0.01), base) == pytest.approx(
            20, abs=1.0)
        assert added_ms(pair.probe("b", "tcp", b, TCP_DELAYED, 20, 0.01), own_base) == (
            pytest.approx(20, abs=1.0))
    finally:
        receiver.stop()
    assert "LINKGRAD" not in pair.iptables_rules("b")


def _edges(probe: Probe, magnitude_s: float, base_s: float, min_run: int = 10
           ) -> tuple[list[float], list[float]]:
    """Send times where the added delay switches on (first delayed) and off (last delayed).
    A run of fewer than `min_run` delayed probes is a stall of the machine, not the wave (a
    busy CI machine once delayed a few probes by 8 ms half a second before the wave began)."""
    delayed = [r - base_s > 0.9 * magnitude_s for r in probe.rtt]
    i = 0
    while i < len(delayed):
        j = i
        while j < len(delayed) and delayed[j] == delayed[i]:
            j += 1
        if delayed[i] and j - i < min_run:
            delayed[i:j] = [False] * (j - i)
        i = j
    rising = [probe.sent[i] for i in range(1, len(delayed)) if delayed[i] and not delayed[i - 1]]
    falling = [probe.sent[i - 1] for i in range(1, len(delayed))
               if delayed[i - 1] and not delayed[i]]
    return rising, falling


def test_square_wave_edges_are_on_schedule_and_order_holds(pair, daemon):
    b = pair.addresses["b"]
    base = statistics.median(pair.probe("a", "udp", b, UDP_PORT, 50, 0.002).rtt)
    start = time.time() + 0.6
    period, magnitude_ms = 0.4, 8.0
    daemon.ok(add({"proto": "udp", "dst": f"{b}:{UDP_PORT}"},
                  {"kind": "square", "start": start, "period_s": period,
                   "magnitude_ms": magnitude_ms, "cycles": 3}))
    probe = pair.probe("a", "udp", b, UDP_PORT, 1000, 0.002)  # 2 s at 500/s
    rising, falling = _edges(probe, magnitude_ms / 1e3, base)
    want_rising = [start + i * period for i in range(3)]
    want_falling = [start + i * period + period / 2 for i in range(3)]
    assert len(rising) == 3
    assert len(falling) == 3
    # A probe every 2 ms: the first delayed probe goes out within one interval after a rising
    # edge, the last delayed one within one interval before a falling edge. Beyond that, the
    # median edge is within 1 ms of schedule, and on a loaded machine none is off by 3 ms.
    interval = 0.002
    errors = [max(0.0, want - got, got - want - interval)
              for got, want in zip(rising, want_rising, strict=True)]
    errors += [max(0.0, want - interval - got, got - want)
               for got, want in zip(falling, want_falling, strict=True)]
    assert statistics.median(errors) <= 0.001, errors
    assert max(errors) <= 0.003, errors
    assert probe.seq is not None
    assert list(probe.seq) == sorted(probe.seq)  # in-flow order across every edge
    assert len(probe.seq) == 1000  # nothing lost


def _assert_clean(hosts: Hosts) -> None:
    assert "LINKGRAD" not in hosts.iptables_rules("a")
    b = hosts.addresses["b"]
    assert statistics.median(hosts.probe("a", "tcp", b, TCP_DELAYED, 5, 0.0).rtt) < 0.002


@pytest.mark.parametrize("how", ["stop", "stdin", "sigterm", "sigkill"])
def test_nothing_is_left_after_the_daemon_ends(pair, daemon, how):
    b = pair.addresses["b"]
    daemon.ok(add({"proto": "tcp", "dst": f"{b}:{TCP_DELAYED}"}, constant(50)))
    assert "LINKGRAD-Q5200" in pair.iptables_rules("a")
    proc = daemon.proc
    if how == "stop":
        assert daemon.request("stop").ok
    elif how == "stdin":
        proc.stdin.close()
    else:
        # the daemon is python under `ip netns exec` (which execs): the same pid
        os.kill(proc.pid, signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    proc.wait(timeout=15)
    if how != "sigkill":
        assert daemon.client.wait_for("stopped")["reason"]
    deadline = time.monotonic() + 10
    while "LINKGRAD" in pair.iptables_rules("a") and time.monotonic() < deadline:
        time.sleep(0.05)  # after SIGKILL the watchdog removes them; give it its moment
    _assert_clean(pair)


def test_stale_rules_of_a_killed_daemon_are_removed_at_start(pair):
    pair.exec("a", "iptables", "-N", "LINKGRAD-Q5300")
    pair.exec("a", "iptables", "-I", "OUTPUT", "1", "-j", "LINKGRAD-Q5300")
    pair.exec("a", "iptables", "-A", "LINKGRAD-Q5300", "-p", "tcp", "-j", "NFQUEUE",
              "--queue-num", "5301", "--queue-bypass")
    client = InjectorProcess(pair, "a", "--queue", "5300")
    try:
        assert client.ready.stale_removed is True
        assert "5301" not in pair.iptables_rules("a")
    finally:
        client.stop()


def test_a_queue_in_use_is_a_clear_error(pair, daemon):
    with pytest.raises(DidNotStart, match="in use") as failed:
        InjectorProcess(pair, "a", "--queue", "5200")
    assert failed.value.said["event"] == "error"
    assert pair.procs[-1].wait(timeout=15) == 1
    assert daemon.ok(HealthRequest()).chain == "LINKGRAD-Q5200"  # the first is untouched


def test_bad_requests_get_input_errors_and_the_daemon_lives_on(pair, daemon):
    b = pair.addresses["b"]
    error = refused(daemon.request("add", link={"proto": "tcp", "dst": f"{b}:{TCP_DELAYED}"},
                                   schedule={"kind": "square", "magnitude_ms": 900,
                                             "period_s": 1, "cycles": 2}))
    assert error.kind == "input"
    assert "cap" in error.message
    error = refused(daemon.request("add", link={"proto": "tcp", "dst": "not-an-ip"},
                                   schedule=constant(5)))
    assert "not an IPv4 or IPv6 address" in error.message
    error = refused(daemon.request("add", link={"proto": "tcp", "dst": b},
                                   schedule={"kind": "constant", "magnitud_ms": 5}))
    assert "magnitud_ms" in error.message
    assert refused(daemon.request("bogus")).kind == "input"
    assert daemon.ok(HealthRequest()).links == 0


def test_forwarded_packets_are_delayed_by_a_daemon_on_the_router():
    hosts = make_routed()
    try:
        hosts.echo_servers("b", [TCP_DELAYED], [])
        b = hosts.addresses["b"]
        base = hosts.probe("a", "tcp", b, TCP_DELAYED, 20, 0.01)
        router = InjectorProcess(hosts, "r", "--queue", "5400")
        router.ok(add({"proto": "tcp", "src": hosts.addresses["a"],
                       "dst": f"{b}:{TCP_DELAYED}"}, constant(12)))
        delayed = hosts.probe("a", "tcp", b, TCP_DELAYED, 20, 0.01)
        assert added_ms(delayed, base) == pytest.approx(12, abs=1.0)
        router.stop()
        assert "LINKGRAD" not in hosts.iptables_rules("r")
    finally:
        hosts.remove()


def test_a_stalled_daemon_fails_open(pair):
    """SIGSTOP the daemon: the kernel queue fills, then packets pass instead of dropping."""
    b = pair.addresses["b"]
    client = InjectorProcess(pair, "a", "--queue", "5500", "--max-queue-len", "16")
    try:
        client.ok(add({"proto": "udp", "dst": f"{b}:{UDP_PORT}"}, constant(1)))
        os.kill(client.proc.pid, signal.SIGSTOP)
        try:
            probe = pair.probe("a", "udp", b, UDP_PORT, 200, 0.001)
        finally:
            os.kill(client.proc.pid, signal.SIGCONT)
        answered = sum(1 for r in probe.rtt if r == r)  # not NaN
        assert answered >= 200 - 16 - 5  # all but the queued ones came back while stalled
    finally:
        client.stop()
    assert subprocess.run(["true"], check=True)


def _inject(hosts: Hosts, *args: str) -> subprocess.Popen[str]:
    linkgrad = str(Path(sys.executable).parent / "linkgrad")
    return hosts.popen("a", linkgrad, "inject", *args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)


def test_linkgrad_inject_runs_in_the_foreground_and_reports_on_sigterm(pair):
    b = pair.addresses["b"]
    proc = _inject(pair, "--proto", "udp", "--dst", f"{b}:{UDP_PORT}", "--square", "0.2:6",
                   "--duration", "30", "--queue", "5700", "--json")
    pair.wait_for_rules("a", "LINKGRAD-Q5700")
    probe = pair.probe("a", "udp", b, UDP_PORT, 200, 0.002)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err

    stats = json.loads(out)["schedules"]["0"]
    # the square wave's 6 ms was applied (not 0, not another level): never early; how much
    # late a busy machine releases packets is measured by benchmarks/injector_accuracy.py, not
    # asserted here (a clean-clone CI run once read 6.58 ms while three runs alone read 6.0)
    assert 5.7 <= stats["on"]["actual"]["mean_ms"] <= 8.0, stats
    # every probe answered went through the injector (a loaded machine may lose one: seen
    # 199 of 200 once in CI); the stats counted 198 of 200 answered once in CI, cause not
    # found yet: the whole report is in the message if it happens again
    answered = sum(1 for r in probe.rtt if r == r)
    assert answered >= 190
    counted = stats["on"]["actual"]["count"] + stats["off"]["actual"]["count"]
    assert counted >= 0.99 * answered, (counted, answered, out)
    assert "LINKGRAD" not in pair.iptables_rules("a")


def _kernel_has_netem(hosts: Hosts) -> bool:
    probe = hosts.exec("a", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms",
                       check=False)
    if probe.returncode == 0:
        hosts.exec("a", "tc", "qdisc", "del", "dev", "lo", "root")
        return True
    assert "qdisc kind is unknown" in probe.stderr, probe.stderr
    return False


def test_netem_backend_on_a_kernel_without_it_says_so_and_falls_back(pair):
    if _kernel_has_netem(pair):
        pytest.skip("this kernel has sch_netem; the fallback is for kernels without it")
    b = pair.addresses["b"]
    dev = f"{pair.tag}ab"
    proc = _inject(pair, "--backend", "netem", "--dev", dev, "--proto", "udp", "--dst",
                   f"{b}:{UDP_PORT}", "--constant", "7", "--duration", "30", "--queue", "5800",
                   "--json")
    pair.wait_for_rules("a", "LINKGRAD-Q5800")  # the nfqueue fallback started
    pair.probe("a", "udp", b, UDP_PORT, 20, 0.005)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert "no sch_netem" in err
    assert "falling back to the nfqueue backend" in err
    # the fallback held packets about the 7 ms asked: not less, and not a unit off; a busy
    # machine's NFQUEUE round trip adds to it (8.1 in one CI run)
    actual = json.loads(out)["schedules"]["0"]["constant"]["actual"]["mean_ms"]
    assert 6.7 <= actual < 14, actual


def test_netem_backend_square_wave_on_an_interface(pair):
    if not _kernel_has_netem(pair):
        pytest.skip("this kernel has no sch_netem (tc: 'Specified qdisc kind is unknown')")
    b = pair.addresses["b"]
    base = statistics.median(pair.probe("a", "udp", b, UDP_PORT, 50, 0.002).rtt)
    proc = _inject(pair, "--backend", "netem", "--dev", f"{pair.tag}ab", "--square", "0.4:8",
                   "--cycles", "3", "--json")
    deadline = time.monotonic() + 10
    while "netem" not in pair.exec("a", "tc", "qdisc", "show").stdout:
        assert time.monotonic() < deadline, "netem qdisc never appeared"
        time.sleep(0.01)
    probe = pair.probe("a", "udp", b, UDP_PORT, 550, 0.002)  # 1.1 s of the 1.2 s wave
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    delayed = [r - base > 0.007 for r in probe.rtt]
    assert 0.3 < sum(delayed) / len(delayed) < 0.7
    assert json.loads(out)["edge_lateness"]["count"] == 5  # 6 edges; the first is the add
    assert "qdisc netem" not in pair.exec("a", "tc", "qdisc", "show").stdout


def test_schedule_changes_at_run_time_and_loss_mode(pair, daemon):
    b = pair.addresses["b"]
    base = pair.probe("a", "udp", b, UDP_PORT, 20, 0.005)
    link = daemon.ok(add({"proto": "udp", "dst": f"{b}:{UDP_PORT}"}, constant(12))).link_id
    assert added_ms(pair.probe("a", "udp", b, UDP_PORT, 20, 0.005), base) == pytest.approx(
        12, abs=1.0)
    assert daemon.ok(SetSchedule.model_validate(
        {"link_id": link, "schedule": {"kind": "off"}})).schedule_id == 1
    assert added_ms(pair.probe("a", "udp", b, UDP_PORT, 20, 0.005), base) < 0.5
    daemon.ok(SetSchedule.model_validate(
        {"link_id": link,
         "schedule": {"kind": "constant", "magnitude_ms": 3, "loss_fraction": 0.5}}))
    lossy = pair.probe("a", "udp", b, UDP_PORT, 400, 0.002)
    answered = [r for r in lossy.rtt if r == r]
    assert 0.4 < len(answered) / 400 < 0.6
    assert statistics.median(answered) - statistics.median(base.rtt) == pytest.approx(
        0.003, abs=0.001)
    stats = daemon.ok(StatsRequest(link_id=link)).links[str(link)]
    assert stats.dropped == 400 - len(answered)
    assert set(stats.schedules) == {"0", "1", "2"}  # statistics kept per schedule

"""IPv6 on real sockets in namespaces (root; issue 13). A server listening on [::] (as Java
and Go servers do) in b, clients in a over IPv4 and over IPv6: the sniffers count the IPv4
client's connection, which b holds as an IPv4-mapped AF_INET6 socket, as the IPv4 link it is,
to its last segment, and the IPv6 one as a `tcp6` link of the hosts' IPv6 addresses (which the
ready line names). The injector delays each through its own rules (iptables, ip6tables), and
a square wave on the IPv6 link is measured by our estimator."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from linkgrad.graph import GraphLink, build_graph
from linkgrad.protocol.injector import SquareSchedule
from linkgrad.protocol.sniffer import ReportEvent
from linkgrad.spectral.estimate import log_gradients, settings_for_log
from linkgrad.spectral.result import GradientResult
from linkgrad.square_wave import SquareWave
from testbed.pairs.hosts import Hosts, make_pair
from tests.marks import NETNS

pytestmark = NETNS

PORT = 7401
# echo on [::] with IPV6_V6ONLY off: IPv4 clients arrive as ::ffff:a.b.c.d
DUAL_STACK_ECHO = """
import socket, threading
srv = socket.create_server(("::", PORT), family=socket.AF_INET6, dualstack_ipv6=True)
print("ready", flush=True)
def serve(conn):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)
while True:
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
""".replace("PORT", str(PORT))


def _ipv6(hosts: Hosts) -> dict[str, str]:
    """A ULA /64 of this test's own on the pair's veth (no duplicate detection to wait for)."""
    net = f"fd6c:{os.getpid() % 0xFFFF:x}:{hosts.tag[-1]}"  # unique per process and pair
    out = {}
    for host, peer, n in (("a", "b", 1), ("b", "a", 2)):
        out[host] = str(ipaddress.IPv6Address(f"{net}::{n}"))  # as the kernel writes it
        hosts.exec(host, "ip", "-6", "addr", "add", f"{out[host]}/64", "dev",
                   f"{hosts.tag}{host}{peer}", "nodad")
    return out


class Daemon:
    """A daemon in a namespace over JSON lines; reports kept as they come."""

    def __init__(self, hosts: Hosts, host: str, module: str) -> None:
        self.proc = hosts.popen(host, sys.executable, "-m", module, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        self.reports: list[dict[str, Any]] = []
        self.ready = self.next()
        assert self.ready["event"] == "ready", self.ready

    def next(self) -> dict[str, Any]:
        while True:
            line = self.proc.stdout.readline()
            assert line, f"the daemon ended (exit status {self.proc.wait(timeout=15)})"
            message = json.loads(line)
            if message.get("event") != "report":
                return message
            self.reports.append(message)

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps({"id": 1, **request}) + "\n")
        self.proc.stdin.flush()
        reply = self.next()
        assert reply["ok"], reply
        return reply["result"]

    def end(self) -> None:
        self.proc.stdin.close()  # the lease: a sniffer's last report, then "stopped"
        assert self.next()["event"] == "stopped"
        assert self.proc.wait(timeout=15) == 0


def _held_by(injector: Daemon, ids: dict[str, int]) -> dict[str, int]:
    """Packets each link (name -> link id) has had delayed so far, every phase."""
    links = injector.ask({"cmd": "stats"})["links"]
    return {name: sum(p["actual"]["count"] for phases in links[str(i)]["schedules"].values()
                      for p in phases.values()) for name, i in ids.items()}


def _wait_closed(hosts: Hosts, host: str) -> None:
    """Until `host` holds no connection of PORT (the server's end is freed when the client's
    last ACK has come through the injector): then no packet of it is still held."""
    deadline = time.monotonic() + 10.0
    while [line for line in hosts.exec(host, "ss", "-Htna", f"sport = :{PORT}").stdout
           .splitlines() if not line.startswith("LISTEN")]:
        assert time.monotonic() < deadline, "the probe's connection never closed"
        time.sleep(0.02)


@pytest.fixture
def dual() -> Iterator[tuple[Hosts, dict[str, str]]]:
    """A pair with IPv6 addresses too, and the dual-stack echo server on b."""
    hosts = make_pair()
    try:
        v6 = _ipv6(hosts)
        server = hosts.popen("b", sys.executable, "-c", DUAL_STACK_ECHO, stdout=subprocess.PIPE)
        assert server.stdout.readline().strip() == "ready"
        yield hosts, v6
    finally:
        hosts.remove()


def _rules(hosts: Hosts, host: str) -> str:
    return hosts.iptables_rules(host) + hosts.exec(host, "ip6tables", "-S").stdout


def test_both_families_are_sniffed_and_each_link_delayed_by_its_own_rules(dual):
    hosts, v6 = dual
    sniffers = {h: Daemon(hosts, h, "sniffer") for h in ("a", "b")}
    assert v6["b"] in sniffers["b"].ready["ipv6_addresses"]
    assert "::1" not in sniffers["b"].ready["ipv6_addresses"]
    for sniffer in sniffers.values():  # 2 s: each connection lives far less, so only
        sniffer.ask({"cmd": "watch", "interval_s": 2.0})  # the closing notice counts it
    hosts.probe("a", "tcp", hosts.addresses["b"], PORT, 30, 0.005)
    hosts.probe("a", "tcp", v6["b"], PORT, 20, 0.005)
    for sniffer in sniffers.values():
        sniffer.end()
    names = {hosts.addresses["a"]: "a", hosts.addresses["b"]: "b", v6["a"]: "a", v6["b"]: "b"}
    graph = build_graph([(h, ReportEvent.model_validate(r)) for h, s in sniffers.items()
                         for r in s.reports], names, threshold=1)
    found = {g.label: (g.messages, g.src_addr) for g in graph}
    # b's end of the IPv4 connection is an AF_INET6 socket: counted as IPv4, to the last
    assert found[f"tcp b:{PORT} -> a:0"] == (30, hosts.addresses["b"])
    assert found[f"tcp a:0 -> b:{PORT}"] == (30, hosts.addresses["a"])
    assert found[f"tcp6 a:0 -> b:{PORT}"] == (20, v6["a"])
    assert found[f"tcp6 b:{PORT} -> a:0"] == (20, v6["b"])

    # both a->b links, delayed where they are received: 20 ms over IPv4, 30 ms over IPv6
    injector = Daemon(hosts, "b", "injector")
    ids = {}
    for label, delay_ms in ((f"tcp a:0 -> b:{PORT}", 20.0), (f"tcp6 a:0 -> b:{PORT}", 30.0)):
        link = next(g for g in graph if g.label == label).injector_link()
        ids[label[:4].strip()] = injector.ask({
            "cmd": "add", "link": link.model_dump(exclude_none=True),
            "schedule": {"kind": "constant", "magnitude_ms": delay_ms, "duration_s": 60.0}})[
                "link_id"]
    rules = _rules(hosts, "b")
    assert f"-s {hosts.addresses['a']}/32 -d {hosts.addresses['b']}/32 -p tcp" in rules
    assert f"-s {v6['a']}/128 -d {v6['b']}/128 -p tcp" in rules
    before = _held_by(injector, ids)
    rtt4 = hosts.probe("a", "tcp", hosts.addresses["b"], PORT, 10, 0.0).rtt
    _wait_closed(hosts, "b")
    after4 = _held_by(injector, ids)
    rtt6 = hosts.probe("a", "tcp", v6["b"], PORT, 10, 0.0).rtt
    _wait_closed(hosts, "b")
    after6 = _held_by(injector, ids)
    injector.end()
    assert "LINKGRAD" not in _rules(hosts, "b")  # both chains gone
    assert min(rtt4) >= 0.020  # every echo waited its delay (a lower bound, not a timing)
    assert min(rtt6) >= 0.030
    assert after4["tcp"] - before["tcp"] >= 10  # the ten requests at least (and the ACKs)
    assert after4["tcp6"] == before["tcp6"]  # IPv4 packets never reach ip6tables' rule
    assert after6["tcp6"] - after4["tcp6"] >= 10
    assert after6["tcp"] == after4["tcp"]


def test_a_square_wave_on_an_ipv6_link_is_measured(dual):
    """The gradient of a probe's round trip on the link a->b over IPv6 is 1 (one crossing):
    requests over IPv6 while the injector puts a square wave on the link, our estimator on
    their response times, as a run does."""
    hosts, v6 = dual
    link = GraphLink("tcp", "a", v6["a"], 0, "b", v6["b"], PORT, messages=1)
    injector = Daemon(hosts, "b", "injector")
    wave = SquareWave(time.time() + 4.0, 1.0, 8, 0.010)  # 4 s of training, then 8 s
    added = injector.ask({"cmd": "add", "link": link.injector_link().model_dump(
        exclude_none=True), "schedule": SquareSchedule.of(wave).model_dump()})
    # 6000 requests 2 ms apart, plus their round trips: at least 12 s, past the wave's end
    probe = hosts.probe("a", "tcp", v6["b"], PORT, 6000, 0.002)
    stats = injector.ask({"cmd": "remove", "link_id": added["link_id"]})["stats"]
    injector.end()
    on = stats["schedules"]["0"]["on"]["actual"]
    assert on["count"] > 100
    t, y = np.array(probe.sent), np.array(probe.rtt)
    assert t[-1] > wave.end_s, "the probe ended before the wave"
    measured = SquareWave(wave.start_s, wave.period_s, wave.cycles, on["mean_ms"] / 1e3)
    result = log_gradients(t, y, {"echo": np.arange(len(t))}, measured,
                           settings_for_log(1e-6))["echo"]
    estimate = GradientResult.of(result).model_dump(mode="json")
    lo, hi = estimate["ci95"]
    # within 5%: the interval is ~0.01 wide here, and the round trips gained ~1% more than
    # the mean delay the injector reports (1.008 in five runs here)
    assert abs(estimate["gradient"] - 1.0) < 0.05, estimate
    assert hi - lo < 0.2, estimate


NO_IP6TABLES = """
from linkgrad.errors import RuntimeFailure
from injector.engine import Engine
from injector.link import Link, parse_endpoint
from injector.schedule import Constant

def link(dst):
    return Link("tcp", parse_endpoint("10.0.0.1" if "." in dst else "fd00::1", "src"),
                parse_endpoint(dst, "dst"))

with Engine(queue_base=5660, ip6tables="false") as engine:  # every ip6tables call fails
    try:
        engine.add_link(link("[fd00::2]:80"), Constant(0.005, 0.0, 1.0))
    except RuntimeFailure as e:
        print("refused:", e)
    engine.add_link(link("10.0.0.2:80"), Constant(0.005, 0.0, 1.0))
    print("ipv4 added")
"""


def test_where_ip6tables_fails_ipv4_links_are_still_delayed_and_ipv6_ones_refused(dual):
    hosts, _ = dual
    out = hosts.exec("a", sys.executable, "-c", NO_IP6TABLES).stdout.splitlines()
    assert out[0].startswith("refused: cannot delay tcp [fd00::1]:0 -> [fd00::2]:80: "
                             "ip6tables fails on this host (false -w 5 -N LINKGRAD-Q5660 failed")
    assert out[1] == "ipv4 added"
    assert "LINKGRAD" not in _rules(hosts, "a")


def test_a_killed_injectors_ipv6_chain_is_removed_by_its_watchdog(dual):
    hosts, v6 = dual
    injector = Daemon(hosts, "b", "injector")
    injector.ask({"cmd": "add", "link": {"proto": "tcp", "src": v6["a"],
                                         "dst": f"[{v6['b']}]:{PORT}"},
                  "schedule": {"kind": "constant", "magnitude_ms": 5.0, "duration_s": 60.0}})
    assert f"-s {v6['a']}/128 -d {v6['b']}/128 -p tcp" in _rules(hosts, "b")
    injector.proc.kill()
    injector.proc.wait(timeout=15)
    deadline = time.monotonic() + 10.0
    while "LINKGRAD" in _rules(hosts, "b"):  # both chains, the jumps to them
        assert time.monotonic() < deadline, _rules(hosts, "b")
        time.sleep(0.05)
    rtt = hosts.probe("a", "tcp", v6["b"], PORT, 5, 0.0).rtt  # and the link still works
    assert len(rtt) == 5

"""IPv6 on real sockets in namespaces (root; issue 13). A server listening on [::] (as Java
and Go servers do) in b, clients in a over IPv4 and over IPv6: the sniffers count the IPv4
client's connection, which b holds as an IPv4-mapped AF_INET6 socket, as the IPv4 link it is,
to its last segment; the IPv6 connection is reported with the hosts' IPv6 addresses, which the
ready line names, and the graph marks it as not measurable. The IPv4 link found that way is
then delayed by the real injector, and the IPv6 connection's packets are not touched."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from typing import Any

from common.protocol.sniffer import ReportEvent
from coordinator.core.graph import build_graph, ipv6_warning
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


def _held(injector: Daemon) -> int:
    """Packets the injector has delayed so far, every link and phase."""
    links = injector.ask({"cmd": "stats"})["links"]
    return sum(p["actual"]["count"] for s in links.values()
               for phases in s["schedules"].values() for p in phases.values())


def _wait_closed(hosts: Hosts, host: str) -> None:
    """Until `host` holds no connection of PORT (the server's end is freed when the client's
    last ACK has come through the injector): then no packet of it is still held."""
    deadline = time.monotonic() + 10.0
    while [line for line in hosts.exec(host, "ss", "-Htna", f"sport = :{PORT}").stdout
           .splitlines() if not line.startswith("LISTEN")]:
        assert time.monotonic() < deadline, "the probe's connection never closed"
        time.sleep(0.02)


def test_ipv4_clients_of_a_server_on_any_ipv6_address_are_measured_and_ipv6_is_named():
    hosts = make_pair()
    try:
        v6 = _ipv6(hosts)
        server = hosts.popen("b", sys.executable, "-c", DUAL_STACK_ECHO, stdout=subprocess.PIPE)
        assert server.stdout.readline().strip() == "ready"
        sniffers = {h: Daemon(hosts, h, "sniffer") for h in ("a", "b")}
        assert v6["b"] in sniffers["b"].ready["ipv6_addresses"]
        assert "::1" not in sniffers["b"].ready["ipv6_addresses"]
        for sniffer in sniffers.values():  # 2 s: each connection lives far less, so only
            sniffer.ask({"cmd": "watch", "interval_s": 2.0})  # the closing notice counts it
        hosts.probe("a", "tcp", hosts.addresses["b"], PORT, 30, 0.005)
        hosts.probe("a", "tcp", v6["b"], PORT, 20, 0.005)
        for sniffer in sniffers.values():
            sniffer.end()
        names = {hosts.addresses["a"]: "a", hosts.addresses["b"]: "b", v6["a"]: "a",
                 v6["b"]: "b"}
        graph = build_graph([(h, ReportEvent.model_validate(r)) for h, s in sniffers.items()
                             for r in s.reports], names, threshold=1)
        found = {(g.label, g.ipv6): (g.messages, g.src_addr) for g in graph}
        # b's end of the IPv4 connection is an AF_INET6 socket: counted as IPv4, to the last
        assert found[(f"tcp b:{PORT} -> a:0", False)] == (30, hosts.addresses["b"])
        assert found[(f"tcp a:0 -> b:{PORT}", False)] == (30, hosts.addresses["a"])
        assert found[(f"tcp a:0 -> b:{PORT}", True)] == (20, v6["a"])
        assert found[(f"tcp b:{PORT} -> a:0", True)] == (20, v6["b"])
        warning = ipv6_warning(graph)
        assert warning is not None
        assert warning.startswith("IPv6 between a->b, b->a: 2 links not measured")

        # the IPv4 link found on the [::] server, delayed where it is received
        link = next(g for g in graph if g.label == f"tcp a:0 -> b:{PORT}" and not g.ipv6)
        injector = Daemon(hosts, "b", "injector")
        injector.ask({"cmd": "add", "link": link.injector_link().model_dump(exclude_none=True),
                      "schedule": {"kind": "constant", "magnitude_ms": 20.0,
                                   "duration_s": 60.0}})
        rtt = hosts.probe("a", "tcp", hosts.addresses["b"], PORT, 10, 0.0)["rtt"]
        _wait_closed(hosts, "b")
        held = _held(injector)
        hosts.probe("a", "tcp", v6["b"], PORT, 10, 0.0)  # IPv6: not the link's packets
        _wait_closed(hosts, "b")
        assert _held(injector) == held
        injector.end()
    finally:
        hosts.remove()
    assert min(rtt) >= 0.020  # every echo waited its 20 ms (a lower bound, not a timing)
    assert held >= 10  # the ten requests at least (and the handshake, the ACKs)

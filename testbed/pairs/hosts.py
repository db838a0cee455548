"""Namespaces joined by veth (and optionally a router), made and removed by these tests only."""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).parent  # probe.py, echo_server.py, blast.py
_counter = itertools.count()


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=check)


@dataclass
class Hosts:
    """Namespaces named lgt<pid><n>x; `undo` removes exactly what was made, in reverse."""

    tag: str
    addresses: dict[str, str] = field(default_factory=dict)  # host -> address
    undo: list[tuple[str, ...]] = field(default_factory=list)
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def ns(self, host: str) -> str:
        return f"{self.tag}{host}"

    def exec(self, host: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh("ip", "netns", "exec", self.ns(host), *args, check=check)

    def popen(self, host: str, *args: str, **kw: Any) -> subprocess.Popen[str]:
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *args], text=True, **kw)
        self.procs.append(proc)
        return proc

    def probe(self, host: str, kind: str, dst: str, port: int, count: int,
              interval_s: float) -> dict[str, Any]:
        out = self.exec(host, sys.executable, str(TOOLS / "probe.py"), kind, dst, str(port),
                        str(count), str(interval_s))
        return json.loads(out.stdout)

    def echo_servers(self, host: str, tcp: list[int], udp: list[int]) -> None:
        proc = self.popen(host, sys.executable, str(TOOLS / "echo_server.py"),
                          ",".join(map(str, tcp)), ",".join(map(str, udp)),
                          stdout=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"

    def iptables_rules(self, host: str) -> str:
        return self.exec(host, "iptables", "-S").stdout

    def wait_for_rules(self, host: str, chain: str, timeout_s: float = 10.0) -> None:
        """Until `chain` is in the host's rules (a daemon or `linkgrad inject` has started)."""
        deadline = time.monotonic() + timeout_s
        while chain not in self.iptables_rules(host):
            assert time.monotonic() < deadline, f"{chain} never appeared on {host}"
            time.sleep(0.05)

    def remove(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None and not pipe.closed:
                    pipe.close()
        while self.undo:
            sh(*self.undo.pop(), check=False)


def _add_ns(hosts: Hosts, name: str) -> None:
    sh("ip", "netns", "add", hosts.ns(name))
    hosts.undo.append(("ip", "netns", "del", hosts.ns(name)))
    hosts.exec(name, "ip", "link", "set", "lo", "up")


def _veth(hosts: Hosts, a: str, b: str, addr_a: str, addr_b: str) -> None:
    ia, ib = f"{hosts.tag}{a}{b}", f"{hosts.tag}{b}{a}"
    sh("ip", "link", "add", ia, "netns", hosts.ns(a), "type", "veth", "peer", "name", ib,
       "netns", hosts.ns(b))
    for host, dev, addr in ((a, ia, addr_a), (b, ib, addr_b)):
        hosts.exec(host, "ip", "addr", "add", addr, "dev", dev)
        hosts.exec(host, "ip", "link", "set", dev, "up")


def make_pair() -> Hosts:
    """Hosts a (10.231.n.1) and b (10.231.n.2) on one veth."""
    n = next(_counter)
    hosts = Hosts(f"lgt{os.getpid() % 10000}{n}")
    try:
        for name in ("a", "b"):
            _add_ns(hosts, name)
        net = f"10.231.{(os.getpid() + n) % 250}"
        _veth(hosts, "a", "b", f"{net}.1/24", f"{net}.2/24")
        hosts.addresses = {"a": f"{net}.1", "b": f"{net}.2"}
    except BaseException:
        hosts.remove()
        raise
    return hosts


def make_routed() -> Hosts:
    """a — r — b: two subnets joined by router r, which forwards."""
    n = next(_counter)
    hosts = Hosts(f"lgt{os.getpid() % 10000}{n}")
    try:
        for name in ("a", "r", "b"):
            _add_ns(hosts, name)
        x = (os.getpid() + n) % 120
        left, right = f"10.232.{x}", f"10.232.{x + 128}"
        _veth(hosts, "a", "r", f"{left}.1/24", f"{left}.254/24")
        _veth(hosts, "r", "b", f"{right}.254/24", f"{right}.2/24")
        hosts.exec("r", "sysctl", "-qw", "net.ipv4.ip_forward=1")
        hosts.exec("a", "ip", "route", "add", "default", "via", f"{left}.254")
        hosts.exec("b", "ip", "route", "add", "default", "via", f"{right}.254")
        hosts.addresses = {"a": f"{left}.1", "b": f"{right}.2", "r": f"{left}.254"}
    except BaseException:
        hosts.remove()
        raise
    return hosts


class DaemonClient:
    """`python -m injector` in a namespace, spoken to in JSON lines."""

    def __init__(self, hosts: Hosts, host: str, *args: str) -> None:
        self.proc = hosts.popen(host, sys.executable, "-m", "injector", *args,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._next = itertools.count(1)
        self.ready = self.read()

    def read(self, timeout_s: float = 15.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        assert ready, "daemon said nothing"
        line = self.proc.stdout.readline()
        assert line, f"daemon exited with {self.proc.wait(5)}"
        return json.loads(line)

    def request(self, cmd: str, **fields: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        request_id = next(self._next)
        self.proc.stdin.write(json.dumps({"id": request_id, "cmd": cmd, **fields}) + "\n")
        self.proc.stdin.flush()
        reply = self.read()
        assert reply["id"] == request_id
        return reply

    def ok(self, cmd: str, **fields: Any) -> dict[str, Any]:
        reply = self.request(cmd, **fields)
        assert reply["ok"], reply
        return reply["result"]

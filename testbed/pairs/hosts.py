"""Namespaces joined by veth (and optionally a router), made and removed by these tests only."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from linkgrad.protocol import jsonlines
from linkgrad.protocol.base import Reply, Request, Result
from linkgrad.protocol.injector import InjectorReady
from testbed.process_channel import ProcessChannel

R = TypeVar("R", bound=Result)

TOOLS = Path(__file__).parent  # probe.py, echo_server.py, blast.py
_counter = itertools.count()


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=check)


class Probe(BaseModel):
    """What probe.py printed: each probe's send time and round trip (unix s, s; NaN: no
    answer), and for UDP the sequence numbers echoed, in their order of arrival."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    sent: tuple[float, ...]
    rtt: tuple[float, ...]
    seq: tuple[int, ...] | None = None  # UDP only


@dataclass
class Hosts:
    """Namespaces named lgt<pid><n>x; `undo` removes exactly what was made, in reverse."""

    tag: str
    addresses: dict[str, str] = field(default_factory=dict)  # host -> address
    undo: list[tuple[str, ...]] = field(default_factory=list)
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)

    def ns(self, host: str) -> str:
        return f"{self.tag}{host}"

    def exec(self, host: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh("ip", "netns", "exec", self.ns(host), *args, check=check)

    def popen(self, host: str, *args: str, **kw: Any) -> subprocess.Popen[Any]:
        kw.setdefault("text", True)
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(host), *args], **kw)
        self.procs.append(proc)
        return proc

    def probe(self, host: str, kind: str, dst: str, port: int, count: int,
              interval_s: float) -> Probe:
        out = self.exec(host, sys.executable, str(TOOLS / "probe.py"), kind, dst, str(port),
                        str(count), str(interval_s))
        return Probe.model_validate(json.loads(out.stdout))  # json: its NaNs are no JSON

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


class InjectorProcess:
    """`python -m injector` in a namespace, through `linkgrad.protocol.jsonlines`' client. `request`
    sends any fields (the tests send bad ones on purpose) and gives the reply, whatever it
    says; `ok` a typed request's result (RuntimeFailure with the daemon's error if none)."""

    def __init__(self, hosts: Hosts, host: str, *args: str) -> None:
        self.proc = hosts.popen(host, sys.executable, "-m", "injector", *args,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=False)
        self.client = jsonlines.DaemonClient(ProcessChannel(self.proc),
                                             f"injector on {host}", InjectorReady,
                                             ready_timeout_s=15.0)
        self.ready = self.client.ready

    def request(self, cmd: str, **fields: Any) -> Reply:
        return self.client.send({"cmd": cmd, **fields})

    def ok(self, request: Request[R]) -> R:
        return self.client.call(request)

    def stop(self) -> None:
        """End the lease (EOF on its stdin) and wait for the daemon to exit."""
        self.client.channel.close_input()
        self.proc.wait(timeout=15)
        self.client.reader.join(timeout=15)
        self.client.channel.close()

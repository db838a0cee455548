"""Turning a topology into namespaces on a bridge: a pure plan of steps, each with its undo.

Names are generated from the testbed's tag, so everything made can be found and removed by
ownership: namespaces `lgtb-<tag>-<host>`, bridge `lgbr-<tag>`, root-side veths `lgv<tag><i>`.
The bridge carries the gateway address (.254) so the coordinator in the root namespace reaches
every host directly.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from testbed.topology import Topology

TAG = re.compile(r"^[a-z0-9]{1,4}$")


@dataclass(frozen=True)
class HostPlan:
    name: str
    namespace: str
    address: str
    veth: str  # root-side end; the host sees eth0
    roles: tuple[str, ...]


@dataclass(frozen=True)
class TestbedPlan:
    tag: str
    subnet: str
    bridge: str
    gateway: str
    hosts: tuple[HostPlan, ...]

    def host(self, name: str) -> HostPlan:
        return next(h for h in self.hosts if h.name == name)

    def with_role(self, role: str) -> list[HostPlan]:
        return [h for h in self.hosts if role in h.roles]


@dataclass(frozen=True)
class Step:
    do: tuple[str, ...]
    undo: tuple[str, ...] | None = None


def plan_testbed(topology: Topology, tag: str, subnet: ipaddress.IPv4Network) -> TestbedPlan:
    if not TAG.match(tag):
        raise ValueError(f"{tag=} must be 1-4 lowercase letters or digits")
    addresses = list(subnet.hosts())
    hosts = tuple(
        HostPlan(h.name, f"lgtb-{tag}-{h.name}", str(addresses[i]), f"lgv{tag}{i}", h.roles)
        for i, h in enumerate(topology.hosts)
    )
    return TestbedPlan(tag, str(subnet), f"lgbr-{tag}", str(addresses[-1]), hosts)


def network_steps(plan: TestbedPlan) -> list[Step]:
    prefix = ipaddress.IPv4Network(plan.subnet).prefixlen
    steps = [
        Step(("ip", "link", "add", plan.bridge, "type", "bridge"),
             ("ip", "link", "del", plan.bridge)),
        Step(("ip", "addr", "add", f"{plan.gateway}/{prefix}", "dev", plan.bridge)),
        Step(("ip", "link", "set", plan.bridge, "up")),
    ]
    for h in plan.hosts:
        ns = ("ip", "-n", h.namespace)
        steps += [
            Step(("ip", "netns", "add", h.namespace), ("ip", "netns", "del", h.namespace)),
            Step(("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns",
                  h.namespace), ("ip", "link", "del", h.veth)),
            Step(("ip", "link", "set", h.veth, "master", plan.bridge, "up")),
            Step((*ns, "addr", "add", f"{h.address}/{prefix}", "dev", "eth0")),
            Step((*ns, "link", "set", "eth0", "up")),
            Step((*ns, "link", "set", "lo", "up")),
            Step((*ns, "route", "add", "default", "via", plan.gateway)),
        ]
    return steps


def only_from(host: HostPlan, port: int, sources: tuple[str, ...]) -> list[Step]:
    """Steps that let only `sources` reach TCP `port` on `host`, for a server with no
    authentication of its own (memcached): any local user reaches every host from the root
    namespace, by the bridge. In the raw table, which sees a packet before the injector's
    NFQUEUE jump in filter (a queued packet that is accepted skips the rest of filter). They
    go with the namespace, so they have no undo."""
    raw = ("ip", "netns", "exec", host.namespace, "iptables", "-w", "5", "-t", "raw",
           "-A", "PREROUTING", "-p", "tcp", "--dport", str(port))
    return [*(Step((*raw, "-s", source, "-j", "ACCEPT")) for source in sources),
            Step((*raw, "-j", "DROP"))]

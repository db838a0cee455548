"""The communication graph from the sniffers' reports (thesis §3.1.3): pure functions.

Each host reports its own sockets. A link's messages are taken from its sending side (where
the source address is the reporter's), so the two ends of one connection are not added twice;
the receiving side only names the destination process. Only links between the experiment's
hosts count, and never SSH (port 22): that is the coordinator itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from common.protocol.injector import LinkSpec
from common.protocol.sniffer import Report

SSH_PORT = 22


@dataclass(frozen=True)
class GraphLink:
    proto: str
    src_host: str
    src_addr: str
    src_port: int
    dst_host: str
    dst_addr: str
    dst_port: int
    messages: int
    src_process: str | None = None
    dst_process: str | None = None

    @property
    def label(self) -> str:
        return (f"{self.proto} {self.src_host}:{self.src_port} -> "
                f"{self.dst_host}:{self.dst_port}")

    @property
    def hosts(self) -> str:
        return f"{self.src_host}->{self.dst_host}"

    def injector_link(self) -> LinkSpec:
        """What the injector matches: packets this link sends."""
        src = self.src_addr + (f":{self.src_port}" if self.src_port else "")
        dst = self.dst_addr + (f":{self.dst_port}" if self.dst_port else "")
        return LinkSpec(proto=self.proto, src=src, dst=dst)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


def build_graph(reports: Iterable[tuple[str, Report]], hosts: dict[str, str],
                threshold: int) -> list[GraphLink]:
    """`reports`: (reporting host, sniffer report); `hosts`: address -> host name."""
    messages: dict[tuple[Any, ...], int] = {}
    process: dict[tuple[str, int], str] = {}  # (addr, port) -> process name, any side
    for reporter, report in reports:
        own = next((a for a, n in hosts.items() if n == reporter), None)
        for link in report.links:
            src, dst = link.src, link.dst
            for end in (src, dst):
                if end.process:
                    process[(end.addr, end.port)] = end.process
            if src.addr != own or src.addr not in hosts or dst.addr not in hosts:
                continue
            if SSH_PORT in (src.port, dst.port):
                continue
            key = (link.proto, src.addr, src.port, dst.addr, dst.port)
            messages[key] = messages.get(key, 0) + (link.messages or 0)
    return sorted(
        (GraphLink(proto, hosts[sa], sa, sp, hosts[da], da, dp, n,
                   process.get((sa, sp)), process.get((da, dp)))
         for (proto, sa, sp, da, dp), n in messages.items() if n >= threshold),
        key=lambda g: (-g.messages, g.label))


def application(links: list[GraphLink], processes: Iterable[str],
                ports: Iterable[int]) -> list[GraphLink]:
    """Links between two of the application's nodes: an end is one when its process (named as
    /proc/PID/comm names it) or its port (not an ephemeral one) is listed. Nothing listed:
    every link is the application's."""
    names, numbers = set(processes), set(ports)
    if not names and not numbers:
        return list(links)

    def node(process: str | None, port: int) -> bool:
        return process in names or (port != 0 and port in numbers)

    return [g for g in links if node(g.src_process, g.src_port) and node(g.dst_process, g.dst_port)]


def select(links: list[GraphLink], include: Iterable[str],
           exclude: Iterable[str]) -> list[GraphLink]:
    """Links whose `src->dst` hosts or label match an include (all if none) and no exclude."""
    inc, exc = [re.compile(p) for p in include], [re.compile(p) for p in exclude]

    def hit(patterns: list[re.Pattern[str]], g: GraphLink) -> bool:
        return any(p.search(g.hosts) or p.search(g.label) for p in patterns)

    return [g for g in links if (not inc or hit(inc, g)) and not hit(exc, g)]

"""The communication graph from the sniffers' reports (thesis §3.1.3): pure functions.

Each host reports its own sockets. A link's messages are taken from its sending side (where
the source address is the reporter's), so the two ends of one connection are not added twice;
the receiving side only names the destination process. Only links between the experiment's
hosts count, and never SSH (port 22): that is the coordinator itself.

Hosts are named by their addresses, IPv6 ones included: the experiment gives each host's IPv4
address, its sniffer its IPv6 ones. A link between IPv6 addresses is a link like any other
(the injector delays it through ip6tables); an IPv4-mapped address, `::ffff:a.b.c.d`, arrives
from the sniffer as the IPv4 link it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from linkgrad.protocol.injector import LinkSpec
from linkgrad.protocol.sniffer import Report

__all__ = [
    "SELECTOR_SYNTAX",
    "SSH_PORT",
    "GraphLink",
    "Selector",
    "application",
    "build_graph",
    "explain_selection",
    "parse_selector",
    "select",
]

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
        """`tcp app1:0 -> db:5432`; `tcp6 ...` over IPv6 (two hosts may talk both, on one
        port: they are two links, measured apart)."""
        return (f"{self.proto}{'6' if self.ipv6 else ''} {self.src_host}:{self.src_port} -> "
                f"{self.dst_host}:{self.dst_port}")

    @property
    def ipv6(self) -> bool:
        return ":" in self.src_addr

    @property
    def hosts(self) -> str:
        return f"{self.src_host}->{self.dst_host}"

    def injector_link(self) -> LinkSpec:
        """What the injector matches: packets this link sends."""
        return LinkSpec(proto=self.proto, src=_endpoint(self.src_addr, self.src_port),
                        dst=_endpoint(self.dst_addr, self.dst_port))


def _endpoint(addr: str, port: int) -> str:
    """`ADDR[:PORT]`, an IPv6 address in brackets when a port follows (port 0: any)."""
    if not port:
        return addr
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"  # IPv6 has colons


def build_graph(reports: Iterable[tuple[str, Report]], hosts: dict[str, str],
                threshold: int) -> list[GraphLink]:
    """`reports`: (reporting host, sniffer report); `hosts`: address -> host name (a host
    may have several: its IPv4 address and its IPv6 ones)."""
    messages: dict[tuple[Any, ...], int] = {}
    process: dict[tuple[str, int], str] = {}  # (addr, port) -> process name, any side
    for reporter, report in reports:
        own = {a for a, n in hosts.items() if n == reporter}
        for link in report.links:
            src, dst = link.src, link.dst
            for end in (src, dst):
                if end.process:
                    process[(end.addr, end.port)] = end.process
            if src.addr not in own or dst.addr not in hosts:
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


SELECTOR_SYNTAX = ("SRC->DST with a host name, HOST:PORT or * on each side (app1->db, *->web, "
                   "db:5432->*), or re:REGEX")
_HOST_SIDE = re.compile(r"(?P<host>[A-Za-z0-9_.-]+|\*)?(?::(?P<port>\d{1,5}))?")


@dataclass(frozen=True)
class Selector:
    """A link selector of `parameters.include`/`exclude`, parsed (`parse_selector`).

    `SRC->DST`: each side a host name (matched exactly), `*` (any host) or nothing (the same),
    optionally `:PORT` (exactly; 0 is an ephemeral port). A '^' before and a '$' after are
    allowed and change nothing: the match is exact already. `re:REGEX`: the regex is searched
    in the link's hosts "src->dst" and in its label "tcp src:port -> dst:port"; only this form
    can match hosts by part of their name."""

    text: str  # as written
    src_host: str | None = None  # None: any
    src_port: int | None = None
    dst_host: str | None = None
    dst_port: int | None = None
    regex: re.Pattern[str] | None = None

    @property
    def host_names(self) -> tuple[str, ...]:
        """The hosts it names (they must be the experiment's); none for a regex."""
        return tuple(h for h in (self.src_host, self.dst_host) if h is not None)

    @property
    def meaning(self) -> str:
        """How it was read: `*->web` for '->web', `re:...` for a regex."""
        if self.regex is not None:
            return f"re:{self.regex.pattern}"

        def side(host: str | None, port: int | None) -> str:
            return (host or "*") + (f":{port}" if port is not None else "")

        return f"{side(self.src_host, self.src_port)}->{side(self.dst_host, self.dst_port)}"

    def matches(self, g: GraphLink) -> bool:
        if self.regex is not None:
            return bool(self.regex.search(g.hosts) or self.regex.search(g.label))
        return ((self.src_host is None or g.src_host == self.src_host)
                and (self.src_port is None or g.src_port == self.src_port)
                and (self.dst_host is None or g.dst_host == self.dst_host)
                and (self.dst_port is None or g.dst_port == self.dst_port))


def parse_selector(text: str) -> Selector:
    """`SRC->DST` or `re:REGEX` (see Selector); ValueError saying what is expected."""
    if text.startswith("re:"):
        try:
            return Selector(text, regex=re.compile(text[3:]))
        except (re.error, OverflowError, RecursionError) as e:  # too large or deep for re
            raise ValueError(f"{text!r}: bad regex after 're:': {e}") from None
    body = text.strip()
    body = body[1:] if body.startswith("^") else body
    body = body[:-1] if body.endswith("$") else body
    parsed = [m for side in body.split("->") if (m := _HOST_SIDE.fullmatch(side.strip()))]
    if len(parsed) != 2 or body.count("->") != 1:
        raise ValueError(f"{text!r} is not a link selector: expected {SELECTOR_SYNTAX}")
    src, dst = parsed

    def host(m: re.Match[str]) -> str | None:
        return None if m["host"] in (None, "*") else m["host"]

    def port(m: re.Match[str]) -> int | None:
        if m["port"] is None:
            return None
        if int(m["port"]) > 65535:
            raise ValueError(f"{text!r}: port {m['port']} is above 65535")
        return int(m["port"])

    return Selector(text, host(src), port(src), host(dst), port(dst))


def select(links: list[GraphLink], include: Iterable[str],
           exclude: Iterable[str]) -> list[GraphLink]:
    """Links matched by an include (all if none) and by no exclude (selectors: `Selector`)."""
    inc, exc = [parse_selector(p) for p in include], [parse_selector(p) for p in exclude]
    return [g for g in links if (not inc or any(s.matches(g) for s in inc))
            and not any(s.matches(g) for s in exc)]


def explain_selection(links: list[GraphLink], include: Iterable[str],
                      exclude: Iterable[str]) -> list[str]:
    """What each selector matched among `links` (the graph), one line each, then how many are
    measured: 'include 'app1->db' (app1->db): 1 link: tcp app1:0 -> db:5432'. A selector
    that matches nothing says so."""
    include, exclude = list(include), list(exclude)
    lines = [] if include else ["include: none given, so every link"]
    for what, patterns in (("include", include), ("exclude", exclude)):
        for text in patterns:
            s = parse_selector(text)
            hits = [g.label for g in links if s.matches(g)]
            read = f" ({s.meaning})" if s.meaning != text else ""
            found = (f"{len(hits)} link{'s' if len(hits) != 1 else ''}: " + ", ".join(hits)
                     if hits else "matches no link of the graph")
            lines.append(f"{what} {text!r}{read}: {found}")
    chosen = select(links, include, exclude)
    lines.append(f"measuring {len(chosen)} of {len(links)} links")
    return lines

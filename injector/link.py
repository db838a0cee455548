"""A link as the injector matches it: protocol plus source and destination address and port.

Port 0 means any port (an ephemeral port is written as 0). An address may be a host or a
CIDR network, IPv4 or IPv6 (both ends of one version: ip6tables holds the IPv6 rules). A link
with neither address would delay a whole protocol: refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from linkgrad.errors import InputError, Problem
from linkgrad.protocol.fields import family, parse_endpoint_text

PROTOCOLS = ("tcp", "udp", "icmp")


@dataclass(frozen=True)
class Endpoint:
    address: str | None = None  # "10.0.0.2" or "10.0.0.0/24"; None: any
    port: int = 0  # 0: any

    def __str__(self) -> str:
        address = self.address or "*"
        return f"[{address}]:{self.port}" if ":" in address else f"{address}:{self.port}"


@dataclass(frozen=True)
class Link:
    proto: str
    src: Endpoint
    dst: Endpoint

    def __post_init__(self) -> None:
        problems = link_problems(self)
        if problems:
            raise InputError(problems)

    def __str__(self) -> str:
        return f"{self.proto} {self.src} -> {self.dst}"

    @property
    def version(self) -> int:
        """4 or 6: the IP version of its addresses (checked to agree)."""
        return family(self.src.address or self.dst.address or "0.0.0.0")


def link_problems(link: Link) -> list[Problem]:
    """Cross-field checks, all of them, before anything reaches the kernel."""
    problems = []
    if link.proto not in PROTOCOLS:
        problems.append(Problem(f"protocol {link.proto!r} is not one of {PROTOCOLS}",
                                field="proto"))
    if link.proto == "icmp" and (link.src.port or link.dst.port):
        problems.append(Problem("icmp has no ports", field="proto"))
    if link.src.address is None and link.dst.address is None:
        problems.append(Problem("give a source or destination address: a link without one "
                                "would delay the whole protocol", field="dst"))
    versions = {family(a) for a in (link.src.address, link.dst.address) if a}
    if len(versions) > 1:
        problems.append(Problem("src and dst are of different IP versions (IPv4 and IPv6): no "
                                "packet has both", field="dst"))
    for name, end in (("src", link.src), ("dst", link.dst)):
        if not 0 <= end.port <= 65535:
            problems.append(Problem(f"port {end.port} is outside 0-65535", field=name))
    return problems


def parse_endpoint(text: str, field: str) -> Endpoint:
    """`IP`, `IP:PORT`, `NET/PREFIX` or `NET/PREFIX:PORT`, IPv6 with a port in brackets
    (`[fd00::3]:5432`; IPv4-mapped IPv6 is its IPv4 address); the protocol's own parser, so the
    CLI and the daemon refuse the same things."""
    try:
        address, port = parse_endpoint_text(text)
    except ValueError as e:
        raise InputError(Problem(str(e), field=field)) from e
    return Endpoint(address, port)

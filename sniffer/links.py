"""From socket snapshots to links with message counts: pure functions (thesis §3.1.1).

A node is (host address, process); a link is one direction of a conversation between two
nodes: (protocol, src node, src port, dst node, dst port), with an ephemeral port (the host's
`ip_local_port_range`) written 0 so one logical link is one record however often it is
reconnected. A host sees only its own end of each socket, so the remote process is unknown
here (pid None); the coordinator joins both ends' reports.

IPv6 sockets are read too. An IPv4-mapped address (`::ffff:10.0.0.2`, what a server listening
on `[::]` sees of an IPv4 client) is written as the IPv4 address it is: its packets are IPv4 on
the wire, so it is the IPv4 link, and the injector delays it as one. Native IPv6 ends keep their
address (compressed form); the coordinator tells them apart.

Messages are data segments (`tcpi_data_segs_out` / `_in`): one socket contributes its
sent segments to local->remote and its received ones to remote->local. Counts are deltas since
the previous snapshot, per socket (keyed by inode and the 4-tuple, so a reused inode is a new
socket).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from linkgrad.protocol.sniffer import LinkCount, LinkEnd


@dataclass(frozen=True)
class SocketRecord:
    proto: str  # "tcp" | "udp"
    local_addr: str
    local_port: int
    remote_addr: str
    remote_port: int
    inode: int
    segs_out: int | None  # data segments sent (TCP), None when the kernel gives no counter
    segs_in: int | None
    listening: bool = False
    # the kernel's socket cookie, the same in a dump and in the socket's closing notice (0:
    # not known); two connections of one 4-tuple in turn (TIME_WAIT reuse) differ by it
    cookie: int = field(default=0, compare=False)

    @property
    def key(self) -> tuple[object, ...]:
        return (self.proto, self.inode, *self.addresses)

    @property
    def identity(self) -> tuple[object, ...]:
        """What a closing notice is matched by: the cookie where known, else the addresses."""
        return (self.proto, "cookie", self.cookie) if self.cookie else (self.proto,
                                                                         *self.addresses)

    @property
    def addresses(self) -> tuple[object, ...]:
        return (self.local_addr, self.local_port, self.remote_addr, self.remote_port)


@dataclass(frozen=True)
class Process:
    pid: int
    name: str


@dataclass(frozen=True)
class Link:
    proto: str
    src_addr: str
    src_pid: int | None
    src_process: str | None
    src_port: int  # 0: ephemeral
    dst_addr: str
    dst_pid: int | None
    dst_process: str | None
    dst_port: int

    def count(self, messages: int | None) -> LinkCount:
        """The link as a report carries it, with the messages it carried."""
        return LinkCount(proto=self.proto,
                         src=LinkEnd(addr=self.src_addr, port=self.src_port, pid=self.src_pid,
                                     process=self.src_process),
                         dst=LinkEnd(addr=self.dst_addr, port=self.dst_port, pid=self.dst_pid,
                                     process=self.dst_process),
                         messages=messages)


def plain_address(addr: str) -> str:
    """`addr` as one spelling per host: an IPv4-mapped IPv6 address as its IPv4 address, an
    IPv6 address compressed (`::1`), anything else as given."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def is_ipv6(addr: str) -> bool:
    """Whether `addr` is a native IPv6 address (not an IPv4-mapped one, see `plain_address`)."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None


def logical_port(port: int, ephemeral: tuple[int, int]) -> int:
    lo, hi = ephemeral
    return 0 if lo <= port <= hi else port


def link_counts(
    previous: dict[tuple[object, ...], SocketRecord],
    current: Iterable[SocketRecord],
    owners: dict[int, Process],
    ephemeral: tuple[int, int],
) -> dict[Link, int | None]:
    """Messages per link since `previous` (None for UDP: seen, but not counted by the kernel)."""
    counts: dict[Link, int | None] = {}
    for s in current:
        if s.listening or s.remote_port == 0:
            continue
        owner = owners.get(s.inode)
        pid, name = (owner.pid, owner.name) if owner else (None, None)
        local_port = logical_port(s.local_port, ephemeral)
        remote_port = logical_port(s.remote_port, ephemeral)
        out = Link(s.proto, s.local_addr, pid, name, local_port, s.remote_addr, None, None,
                   remote_port)
        back = Link(s.proto, s.remote_addr, None, None, remote_port, s.local_addr, pid, name,
                    local_port)
        before = previous.get(s.key)
        for link, now, then in ((out, s.segs_out, before.segs_out if before else 0),
                                (back, s.segs_in, before.segs_in if before else 0)):
            if now is None:
                counts.setdefault(link, None)
                continue
            delta = max(0, now - (then or 0))
            counts[link] = (counts.get(link) or 0) + delta
    return counts


def match_closed(closed: Iterable[SocketRecord],
                 previous: dict[tuple[object, ...], SocketRecord]) -> list[SocketRecord]:
    """Closed sockets (reported by the kernel with inode 0) under the key they had in
    `previous`, matched by their cookie (their addresses where it is not known), so only what
    they sent since is counted; one never seen counts whole."""
    earlier = {s.identity: s for s in previous.values()}
    out = []
    for s in closed:
        before = earlier.get(s.identity)
        out.append(replace(s, inode=before.inode) if before else s)
    return out


def active(counts: dict[Link, int | None], threshold: int = 1) -> dict[Link, int | None]:
    """Links that carried at least `threshold` messages (UDP links, uncounted, are kept)."""
    return {link: n for link, n in counts.items() if n is None or n >= threshold}

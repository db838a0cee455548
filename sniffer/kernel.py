"""The kernel's view: sockets by sock_diag (pyroute2's DiagSocket, not `ss` parsing), socket
owners from /proc/PID/fd, the ephemeral port range, the host's IPv6 addresses. One netlink dump
per protocol and address family per poll, plus the kernel's notices of TCP sockets it destroys,
with their final counters. IPv6 sockets are read as well as IPv4 ones: a server listening on
`[::]` (Java's and Go's default) holds its IPv4 clients' connections as AF_INET6 sockets with
IPv4-mapped addresses, which an IPv4-only dump never sees."""

from __future__ import annotations

import os
import queue
import socket
import threading
from pathlib import Path
from typing import Any

from common.jsonlines import leave_signals_to_main_thread
from sniffer.links import Process, SocketRecord, is_ipv6, plain_address

SS_ALL = (1 << 12) - 1
SS_LISTEN = 10
INET_DIAG_INFO = 2  # extension bit for struct tcp_info
NETLINK_SOCK_DIAG = 4
SKNLGRP_INET_TCP_DESTROY = 1  # sock_diag multicast groups: TCP sockets as they are freed,
SKNLGRP_INET6_TCP_DESTROY = 3  # IPv4 and IPv6 (include/uapi/linux/sock_diag.h)
FAMILIES = (socket.AF_INET, socket.AF_INET6)


def ephemeral_range(proc: Path = Path("/proc")) -> tuple[int, int]:
    lo, hi = (proc / "sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(lo), int(hi)


def dump_sockets() -> list[SocketRecord]:
    """Every TCP and UDP socket of this network namespace, IPv4 and IPv6 (the two families
    hold disjoint sockets: an IPv4-mapped connection is in the AF_INET6 dump only)."""
    from pyroute2 import DiagSocket
    from pyroute2.netlink.exceptions import NetlinkError

    records = []
    with DiagSocket() as ds:
        ds.bind()
        for family in FAMILIES:
            for proto, number in (("tcp", socket.IPPROTO_TCP), ("udp", socket.IPPROTO_UDP)):
                extensions = 1 << (INET_DIAG_INFO - 1) if proto == "tcp" else 0
                try:
                    found = ds.get_sock_stats(family=family, states=SS_ALL, protocol=number,
                                              extensions=extensions)
                except NetlinkError:
                    if family == socket.AF_INET:
                        raise
                    continue  # a kernel without IPv6 (ipv6.disable=1): no IPv6 socket to see
                records += [r for msg in found if (r := _record(msg, proto)) is not None]
    return records


def _record(msg: Any, proto: str) -> SocketRecord | None:
    info = msg.get_attr("INET_DIAG_INFO") if proto == "tcp" else None
    if proto == "tcp" and info is None:
        return None  # TIME_WAIT and the like: no counters, no more data
    return SocketRecord(proto, plain_address(msg["idiag_src"]), msg["idiag_sport"],
                        plain_address(msg["idiag_dst"]), msg["idiag_dport"], msg["idiag_inode"],
                        info["tcpi_data_segs_out"] if info else None,
                        info["tcpi_data_segs_in"] if info else None,
                        listening=msg["idiag_state"] == SS_LISTEN)


def ipv6_addresses() -> tuple[str, ...]:
    """This host's global and link-local IPv6 addresses (not ::1, which every host has): the
    coordinator names the hosts of an IPv6 link by them."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = (a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(family=socket.AF_INET6))
        return tuple(sorted({plain_address(a) for a in found if a and is_ipv6(a)} - {"::1"}))


class ClosedSockets:
    """TCP sockets as the kernel frees them, with their last tcp_info (what `ss -E` shows).

    Without it, what a connection sends after the last poll is lost, and a connection shorter
    than a poll interval (one per request, as many PHP and CGI apps open to their database) is
    never seen at all. The kernel reports them with inode 0: the fd is gone by then.
    """

    def __init__(self) -> None:
        self.records: list[SocketRecord] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.started: queue.Queue[BaseException | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        if (error := self.started.get(timeout=10)) is not None:
            raise error

    def _read(self) -> None:
        # a plain netlink socket, messages parsed by pyroute2's marshal: pyroute2 0.9's own
        # socket buffers multicast messages in its event loop, where select() cannot see them
        from pyroute2.netlink.diag import MarshalDiag

        leave_signals_to_main_thread()
        try:
            diag = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
            diag.bind((0, (1 << (SKNLGRP_INET_TCP_DESTROY - 1))
                       | (1 << (SKNLGRP_INET6_TCP_DESTROY - 1))))
            diag.settimeout(0.2)
        except OSError as e:
            self.started.put(e)
            return
        self.started.put(None)
        marshal = MarshalDiag()
        with diag:
            while not self.stopping.is_set():
                try:
                    data = diag.recv(1 << 20)
                except TimeoutError:
                    continue
                for msg in marshal.parse(data):
                    if msg.get("idiag_family") in FAMILIES and (r := _record(msg, "tcp")):
                        with self.lock:
                            self.records.append(r)

    def drain(self) -> list[SocketRecord]:
        with self.lock:
            records, self.records = self.records, []
        return records

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)


def socket_owners(proc: Path = Path("/proc")) -> dict[int, Process]:
    """inode -> the process holding it (the first found; a forked socket has several)."""
    owners: dict[int, Process] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
            fds = os.listdir(entry / "fd")
        except OSError:
            continue  # gone, or not ours to read
        for fd in fds:
            try:
                target = os.readlink(entry / "fd" / fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                owners.setdefault(int(target[8:-1]), Process(int(entry.name), name))
    return owners

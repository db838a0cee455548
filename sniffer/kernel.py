"""The kernel's view: sockets by sock_diag (pyroute2's DiagSocket, not `ss` parsing), socket
owners from /proc/PID/fd, the ephemeral port range. One netlink dump per protocol per poll."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from sniffer.links import Process, SocketRecord

SS_ALL = (1 << 12) - 1
SS_LISTEN = 10
INET_DIAG_INFO = 2  # extension bit for struct tcp_info


def ephemeral_range(proc: Path = Path("/proc")) -> tuple[int, int]:
    lo, hi = (proc / "sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(lo), int(hi)


def dump_sockets() -> list[SocketRecord]:
    """Every IPv4 TCP and UDP socket of this network namespace."""
    from pyroute2 import DiagSocket

    records = []
    with DiagSocket() as ds:
        ds.bind()
        for proto, number in (("tcp", socket.IPPROTO_TCP), ("udp", socket.IPPROTO_UDP)):
            extensions = 1 << (INET_DIAG_INFO - 1) if proto == "tcp" else 0
            for msg in ds.get_sock_stats(family=socket.AF_INET, states=SS_ALL, protocol=number,
                                         extensions=extensions):
                info = msg.get_attr("INET_DIAG_INFO") if proto == "tcp" else None
                if proto == "tcp" and info is None:
                    continue  # TIME_WAIT and the like: no counters, no more data
                records.append(SocketRecord(
                    proto, msg["idiag_src"], msg["idiag_sport"], msg["idiag_dst"],
                    msg["idiag_dport"], msg["idiag_inode"],
                    info["tcpi_data_segs_out"] if info else None,
                    info["tcpi_data_segs_in"] if info else None,
                    listening=msg["idiag_state"] == SS_LISTEN))
    return records


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

"""The kernel's view: sockets by sock_diag (`sniffer.sockdiag`, not `ss` parsing), socket
owners from /proc/PID/fd, the ephemeral port range, the host's IPv6 addresses. One netlink dump
per protocol and address family per poll, plus the kernel's notices of TCP sockets it destroys,
with their final counters. IPv6 sockets are read as well as IPv4 ones: a server listening on
`[::]` (Java's and Go's default) holds its IPv4 clients' connections as AF_INET6 sockets with
IPv4-mapped addresses, which an IPv4-only dump never sees."""

from __future__ import annotations

import collections
import errno
import ipaddress
import os
import queue
import select
import socket
import string
import threading
import time
from pathlib import Path

import numpy as np

from linkgrad.protocol.jsonlines import leave_signals_to_main_thread
from sniffer import tcp_info
from sniffer.links import Process, SocketRecord, is_ipv6, plain_address
from sniffer.sockdiag import (
    NETLINK_SOCK_DIAG,
    TCP_EXTENSIONS,
    SockDiag,
    SocketTable,
    address_text,
    parse_datagram,
)

SS_LISTEN = 10
MAX_CLOSED_TABLES = 100_000  # notices kept between two SNAP polls (each a few sockets)
SKNLGRP_INET_TCP_DESTROY = 1  # sock_diag multicast groups: TCP sockets as they are freed,
SKNLGRP_INET6_TCP_DESTROY = 3  # IPv4 and IPv6 (include/uapi/linux/sock_diag.h)
FAMILIES = (socket.AF_INET, socket.AF_INET6)


def ephemeral_range(proc: Path = Path("/proc")) -> tuple[int, int]:
    lo, hi = (proc / "sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(lo), int(hi)


def dump_sockets() -> list[SocketRecord]:
    """Every TCP and UDP socket of this network namespace, IPv4 and IPv6 (the two families
    hold disjoint sockets: an IPv4-mapped connection is in the AF_INET6 dump only)."""
    records = []
    with SockDiag() as diag:
        for family in FAMILIES:
            for proto, number in (("tcp", socket.IPPROTO_TCP), ("udp", socket.IPPROTO_UDP)):
                extensions = TCP_EXTENSIONS if proto == "tcp" else 0
                try:
                    table = diag.dump(family, number, extensions=extensions)
                except OSError:
                    if family == socket.AF_INET:
                        raise
                    continue  # a kernel without IPv6 (ipv6.disable=1): no IPv6 socket to see
                records += socket_records(table, proto)
    return records


def socket_records(table: SocketTable, proto: str) -> list[SocketRecord]:
    """The rows of `table` as records; TCP rows without tcp_info (TIME_WAIT and the like: no
    counters, no more data) left out."""
    counted = proto == "tcp" and tcp_info.has(table.info, "data_segs_out")
    out = []
    for row, info, has_info in zip(table.diag.tolist(), table.info, table.has_info,
                                   strict=True):
        family, state, _, _, sport, dport, src, dst, _, cookie, _, _, _, _, inode = row
        if proto == "tcp" and not has_info:
            continue
        out.append(SocketRecord(proto, address_text(family, src), sport,
                                address_text(family, dst), dport, inode,
                                int(info["data_segs_out"]) if counted else None,
                                int(info["data_segs_in"]) if counted else None,
                                listening=state == SS_LISTEN, cookie=int(cookie)))
    return out


def ipv6_addresses(if_inet6: Path = Path("/proc/net/if_inet6")) -> tuple[str, ...]:
    """This host's global and link-local IPv6 addresses (not ::1, which every host has): the
    coordinator names the hosts of an IPv6 link by them. Read from /proc/net/if_inet6 (this
    network namespace's, one address per line as 32 hex digits first), not pyroute2's
    RTM_GETADDR: importing pyroute2 takes ~0.2 s of the sniffer's start, which fifty hosts
    starting at once on one machine pay fifty times. No file (IPv6 disabled): none."""
    try:
        lines = if_inet6.read_text().splitlines()
    except FileNotFoundError:
        return ()
    found = set()
    for line in lines:
        digits = line.split()[0] if line.split() else ""
        if len(digits) == 32 and all(c in string.hexdigits for c in digits):
            found.add(plain_address(str(ipaddress.IPv6Address(int(digits, 16)))))
    return tuple(sorted(a for a in found - {"::1"} if is_ipv6(a)))


class ClosedSockets:
    """TCP sockets as the kernel frees them, with their last tcp_info (what `ss -E` shows).

    Without it, what a connection sends after the last poll is lost, and a connection shorter
    than a poll interval (one per request, as many PHP and CGI apps open to their database) is
    never seen at all. The kernel reports them with inode 0: the fd is gone by then.
    """

    def __init__(self) -> None:
        self.records: list[SocketRecord] = []
        # their whole statistics, kept only while SNAP profiles (None: not asked for)
        self.tables: list[tuple[float, SocketTable]] | None = None
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.started: queue.Queue[BaseException | None] = queue.Queue()
        self.diag: socket.socket | None = None
        # what went wrong reading notices (an overflow of the kernel's queue, a bad datagram):
        # a socket whose notice is lost counts to the last dump that saw it, a shorter one not
        self.lost: collections.Counter[str] = collections.Counter()
        self.heard = 0  # notices read
        self.wake_read, self.wake_write = os.pipe()  # `close` ends the reader's wait at once
        self.closing = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        try:
            error = self.started.get(timeout=10)
        except queue.Empty:
            error = OSError("the closed-socket reader did not start in 10 s")
        if error is not None:
            self.close()  # a reader starting late ends at once
            raise error

    def losses(self) -> int:
        """Times notices were lost so far, of every kind."""
        with self.lock:  # the reader thread adds kinds as it meets them
            return sum(self.lost.values())

    def _read(self) -> None:
        leave_signals_to_main_thread()
        try:
            diag = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
            diag.bind((0, (1 << (SKNLGRP_INET_TCP_DESTROY - 1))
                       | (1 << (SKNLGRP_INET6_TCP_DESTROY - 1))))
            diag.setblocking(False)
        except OSError as e:
            self.started.put(e)
            return
        self.diag = diag
        self.started.put(None)
        try:
            while not self.stopping.is_set():
                select.select([diag, self.wake_read], [], [], 0.2)
                with self.lock:
                    self._take_queued()
        finally:
            with self.lock:
                self.diag = None
                diag.close()

    def _take_queued(self) -> None:
        """Every notice the kernel has queued, read under the lock: so a `drain` misses none
        that came before it, even when this thread lags (a daemon's last report, under load)."""
        while self.diag is not None:
            try:
                data = self.diag.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # ENOBUFS: the kernel dropped notices; the next ones still come
                self.lost["overrun" if e.errno == errno.ENOBUFS else f"recv: {e}"] += 1
                if e.errno != errno.ENOBUFS:
                    return
                continue
            try:
                table = parse_datagram(data)
            except (ValueError, OSError) as e:  # one bad datagram must not end the notices
                self.lost[f"parse: {e}"] += 1
                continue
            table = table[np.isin(table.diag["family"], FAMILIES)]
            self.records += socket_records(table, "tcp")
            self.heard += len(table.diag)
            if self.tables is not None and len(self.tables) < MAX_CLOSED_TABLES:
                self.tables.append((time.time(), table))

    def settle(self, least_s: float = 0.1, quiet_s: float = 0.05, most_s: float = 0.5) -> None:
        """At least `least_s`, then until no notice has come for `quiet_s` (`most_s` in all):
        the kernel sends a freed socket's notice from a work queue, tens of milliseconds later
        on a busy host, so a last report made at once would miss connections closed just
        before it."""
        started = time.monotonic()
        time.sleep(least_s)
        while True:
            with self.lock:
                before = self.heard
                self._take_queued()
            if time.monotonic() - started + quiet_s > most_s:
                return
            time.sleep(quiet_s)
            with self.lock:
                self._take_queued()
                if self.heard == before:
                    return

    def drain(self) -> list[SocketRecord]:
        with self.lock:
            self._take_queued()
            records, self.records = self.records, []
        return records

    def keep_tables(self, keep: bool) -> None:
        """Whether to keep the closed sockets' statistics for `drain_tables` (SNAP)."""
        with self.lock:
            self.tables = [] if keep else None

    def drain_tables(self) -> list[tuple[float, SocketTable]]:
        """(when it was heard, the sockets) since the last call."""
        with self.lock:
            self._take_queued()
            tables, self.tables = self.tables or [], [] if self.tables is not None else None
        return tables

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        os.write(self.wake_write, b"x")
        self.stopping.set()
        self.thread.join(timeout=5)
        if not self.thread.is_alive():  # a stuck reader keeps its pipe: never a reused fd
            os.close(self.wake_read)
            os.close(self.wake_write)


def socket_owners(proc: Path = Path("/proc"), netns: int | None = -1) -> dict[int, Process]:
    """inode -> the process holding it (the first found; a forked socket has several).
    `netns`: only processes in that network namespace (-1: this process's; None: all). A
    socket stays in the namespace its process made it in, nearly always the one the process
    is in, and the sockets looked up are this namespace's: on a machine of many namespaces
    (a testbed of fifty hosts) the other processes' descriptors are not read, which cost the
    machine more than SNAP did. A process whose namespace cannot be read is looked at."""
    if netns == -1:
        try:
            netns = (proc / "self" / "ns" / "net").stat().st_ino
        except OSError:  # a /proc without it: every process
            netns = None
    owners: dict[int, Process] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        if netns is not None:
            try:
                if (entry / "ns" / "net").stat().st_ino != netns:
                    continue
            except OSError:
                pass  # gone (then so are its fds), or not ours to read: looked at below
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

"""sock_diag (NETLINK_SOCK_DIAG, sock_diag(7)) read directly: one dump of a family and
protocol, or exact lookups of chosen sockets, parsed in batches into numpy arrays.

Why not pyroute2's `DiagSocket`: it builds a Python object per socket and per attribute
(~70-100 µs a socket here, ten times `ss -tin`), and its tcp_info stops at the 5.4 layout. Here
each reply is cut into its fixed 72-byte `inet_diag_msg` and its attributes with `struct`, and
the headers and tcp_info blobs of a whole dump become structured arrays in one `np.frombuffer`
each (`sniffer.tcp_info`).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from dataclasses import dataclass

import numpy as np

from sniffer import tcp_info

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
INET_DIAG_INFO, INET_DIAG_CONG, INET_DIAG_SKMEMINFO = 2, 4, 7
SS_ALL = (1 << 12) - 1
SKMEMINFO_WORDS = 9  # rmem_alloc rcvbuf wmem_alloc sndbuf fwd_alloc wmem_queued optmem backlog
# drops (`ss -m`: r rb t tb f w o bl d)

_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_NLA = struct.Struct("=HH")  # len, type
_REQ = struct.Struct("=BBBBI")  # inet_diag_req_v2: family, protocol, ext, pad, states; sockid
_HEADER_SIZE = 72
_DONE_SIZE = 20  # nlmsghdr and an int
LOOKUP_BATCH = 100  # lookups sent at once

# struct inet_diag_msg; ports and addresses in network order, as the kernel keeps them
DIAG_MSG = np.dtype([
    ("family", "u1"), ("state", "u1"), ("timer", "u1"), ("retrans", "u1"),
    ("sport", ">u2"), ("dport", ">u2"), ("src", "V16"), ("dst", "V16"), ("ifindex", "=u4"),
    ("cookie", "=u8"), ("expires", "=u4"), ("rqueue", "=u4"), ("wqueue", "=u4"),
    ("uid", "=u4"), ("inode", "=u4")])
assert DIAG_MSG.itemsize == _HEADER_SIZE


@dataclass(frozen=True)
class SocketTable:
    """Sockets of one dump or lookup, a row each.

    `diag`: the `inet_diag_msg` headers (DIAG_MSG). `info`: tcp_info (a `tcp_info.dtype_for`
    of the length the kernel returned; zeros where `has_info` is false: TIME_WAIT, SYN_RECV,
    UDP). `skmem`: SK_MEMINFO words (n x 9, -1 where the kernel gave fewer or none).
    """

    diag: np.ndarray
    info: np.ndarray
    has_info: np.ndarray
    skmem: np.ndarray

    def __len__(self) -> int:
        return len(self.diag)

    def __getitem__(self, rows: np.ndarray | slice) -> SocketTable:
        return SocketTable(self.diag[rows], self.info[rows], self.has_info[rows],
                           self.skmem[rows])


def _extensions(*attributes: int) -> int:
    return sum(1 << (a - 1) for a in attributes)


TCP_EXTENSIONS = _extensions(INET_DIAG_INFO, INET_DIAG_SKMEMINFO)


class SockDiag:
    """A NETLINK_SOCK_DIAG socket of this network namespace, kept open across polls."""

    def __init__(self, rcvbuf_bytes: int = 1 << 20) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf_bytes)
        self.sock.settimeout(5.0)
        self.sock.bind((0, 0))
        self.seq = 0

    def __enter__(self) -> SockDiag:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def dump(self, family: int, protocol: int = socket.IPPROTO_TCP, states: int = SS_ALL,
             extensions: int = TCP_EXTENSIONS) -> SocketTable:
        """Every socket of `family` and `protocol` in one of `states` (a bit per TCP state)."""
        self.seq += 1
        request = _request(family, protocol, extensions, states, bytes(48),
                           NLM_F_REQUEST | NLM_F_DUMP, self.seq)
        self.sock.send(request)
        return self._replies(until_done=True)

    def lookup(self, family: int, ids: list[bytes], protocol: int = socket.IPPROTO_TCP,
               extensions: int = TCP_EXTENSIONS) -> SocketTable:
        """The sockets named by `ids` (48-byte `inet_diag_sockid`s, see `sockid`), a send per
        LOOKUP_BATCH: the kernel answers each request with the socket or ENOENT (closed since)
        into our receive buffer before we read any, and more than ~300 answers overflow the
        default one (ENOBUFS)."""
        tables = []
        for at in range(0, len(ids), LOOKUP_BATCH):
            self.seq += 1
            chunk = ids[at:at + LOOKUP_BATCH]
            self.sock.send(b"".join(_request(family, protocol, extensions, SS_ALL, i,
                                             NLM_F_REQUEST, self.seq) for i in chunk))
            tables.append(self._replies(until_done=False, expected=len(chunk)))
        return concat_tables(tables) if tables else empty_table()

    def _replies(self, until_done: bool, expected: int = 0) -> SocketTable:
        batch = _Batch()
        answered = 0
        while (until_done and not batch.done) or (not until_done and answered < expected):
            data = self.sock.recv(1 << 17)
            answered += batch.feed(data, self.seq)
        return batch.table()


def _request(family: int, protocol: int, extensions: int, states: int, sockid: bytes,
             flags: int, seq: int) -> bytes:
    body = _REQ.pack(family, protocol, extensions, 0, states) + sockid
    return _NLMSG.pack(_NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY, flags, seq, 0) + body


def sockid(row: np.void) -> bytes:
    """The `inet_diag_sockid` that names the socket of a `diag` row in a lookup."""
    return row.tobytes()[4:52]


class _Batch:
    """Replies gathered for one request: header bytes, tcp_info blobs, SKMEMINFO words."""

    def __init__(self) -> None:
        self.headers = bytearray()
        # attribute payloads, in runs of rows: (rows, bytes per row (0: absent), the bytes)
        self.infos: list[tuple[int, int, bytes]] = []
        self.skmem: list[tuple[int, int, bytes]] = []
        self.done = False

    def feed(self, data: bytes, seq: int | None) -> int:
        """Parse one datagram; returns how many requests it answered (socket or error).
        Messages of another sequence number are ignored (a late answer to an earlier request);
        `seq` None takes all (the kernel's multicast notices carry 0)."""
        if (uniform := self._uniform(data, seq)) is not None:
            return uniform
        answered, offset = 0, 0
        while offset + _NLMSG.size <= len(data):
            length, kind, _, got_seq, _ = _NLMSG.unpack_from(data, offset)
            if length < _NLMSG.size:
                break
            body = offset + _NLMSG.size
            if seq is None or got_seq == seq:
                answered += self._message(data, kind, body, offset + length)
            offset += (length + 3) & ~3
        return answered

    def _uniform(self, data: bytes, seq: int | None) -> int | None:
        """A datagram of sockets with one layout (a dump: same length, same attributes, the
        same header but for the socket), cut as a 2-D array instead of message by message:
        a quarter of the per-socket cost. None: not such a datagram (the general path)."""
        if len(data) < _NLMSG.size:
            return None
        length, kind, _, got_seq, _ = _NLMSG.unpack_from(data, 0)
        n, tail = divmod(len(data), length) if length >= _NLMSG.size else (0, 0)
        if (kind != SOCK_DIAG_BY_FAMILY or n < 2 or length % 4 or tail not in (0, _DONE_SIZE)
                or length < _NLMSG.size + _HEADER_SIZE or seq not in (None, got_seq)):
            return None
        layout = _attributes(data, _NLMSG.size + _HEADER_SIZE, length)
        if layout is None:
            return None
        rows = np.frombuffer(data, np.uint8, n * length).reshape(n, length)
        same = [slice(0, _NLMSG.size), *(slice(o, o + _NLA.size) for o, _, _ in layout)]
        if any((rows[:, c] != rows[0, c]).any() for c in same):
            return None
        self.headers += rows[:, _NLMSG.size:_NLMSG.size + _HEADER_SIZE].tobytes()
        found = {kind: (o + _NLA.size, o + size) for o, size, kind in layout}
        for name, target in ((INET_DIAG_INFO, self.infos), (INET_DIAG_SKMEMINFO, self.skmem)):
            a, b = found.get(name, (0, 0))
            target.append((n, b - a, rows[:, a:b].tobytes()))
        if tail:  # NLMSG_DONE, after the last socket
            self.feed(data[n * length:], seq)
        return n

    def _message(self, data: bytes, kind: int, body: int, end: int) -> int:
        if kind == NLMSG_DONE:
            self.done = True
            return 0
        if kind == NLMSG_ERROR:
            code = -struct.unpack_from("=i", data, body)[0]
            if code in (0, errno.ENOENT):  # ack, or a looked-up socket that has closed
                return 1
            raise OSError(code, f"sock_diag: {os.strerror(code)}")
        if kind != SOCK_DIAG_BY_FAMILY:
            return 0
        self.headers += data[body:body + _HEADER_SIZE]
        info = skmem = None
        attr = body + _HEADER_SIZE
        while attr + _NLA.size <= end:
            size, atype = _NLA.unpack_from(data, attr)
            if size < _NLA.size:
                break
            payload = data[attr + _NLA.size:attr + size]
            if atype == INET_DIAG_INFO:
                info = payload
            elif atype == INET_DIAG_SKMEMINFO:
                skmem = payload
            attr += (size + 3) & ~3
        self.infos.append((1, len(info), info) if info else (1, 0, b""))
        self.skmem.append((1, len(skmem), skmem) if skmem else (1, 0, b""))
        return 1

    def table(self) -> SocketTable:
        diag = np.frombuffer(bytes(self.headers), dtype=DIAG_MSG)
        has_info = np.repeat(np.array([size > 0 for _, size, _ in self.infos], dtype=bool),
                             [n for n, _, _ in self.infos]).reshape(-1)
        info_blobs, length = _stacked(self.infos)
        info = (tcp_info.parse(info_blobs, length) if length
                else np.zeros(len(diag), dtype=tcp_info.dtype_for(1)))
        return SocketTable(diag, info, has_info, _words(self.skmem))


def _attributes(data: bytes, start: int, end: int) -> list[tuple[int, int, int]] | None:
    """(offset, length, type) of each attribute between `start` and `end`; None if they do
    not fill it exactly."""
    found, at = [], start
    while at + _NLA.size <= end:
        size, kind = _NLA.unpack_from(data, at)
        if size < _NLA.size:
            return None
        found.append((at, size, kind))
        at += (size + 3) & ~3
    return found if at == end else None


def _words(parts: list[tuple[int, int, bytes]]) -> np.ndarray:
    """SK_MEMINFO words, a row per socket, -1 where the kernel gave none (or fewer: `drops`
    came in 4.7)."""
    out = np.full((sum(n for n, _, _ in parts), SKMEMINFO_WORDS), -1, dtype=np.int64)
    row = 0
    for n, size, data in parts:
        if size >= 4:
            kept = min(size // 4, SKMEMINFO_WORDS)
            words = np.frombuffer(data, dtype="=u4").reshape(n, size // 4)
            out[row:row + n, :kept] = words[:, :kept]
        row += n
    return out


def _stacked(parts: list[tuple[int, int, bytes]]) -> tuple[bytes, int]:
    """The payloads cut to the shortest one's length (one kernel gives one length; a shorter
    one is never read past) and laid end to end, absent ones as zeros; and that length."""
    length = min((size for _, size, _ in parts if size), default=0)
    length -= length % 4
    if not length:
        return b"", 0
    pieces = []
    for n, size, data in parts:
        if size == length:
            pieces.append(data)
        elif size == 0:
            pieces.append(bytes(n * length))
        else:
            pieces.append(np.frombuffer(data, np.uint8).reshape(n, size)[:, :length].tobytes())
    return b"".join(pieces), length


def concat_tables(tables: list[SocketTable]) -> SocketTable:
    """Tables of one kernel (one tcp_info length) as one."""
    infos = [t.info for t in tables if len(t)]
    info = np.concatenate(infos) if infos and len({i.dtype for i in infos}) == 1 \
        else tables[0].info
    return SocketTable(np.concatenate([t.diag for t in tables]), info,
                       np.concatenate([t.has_info for t in tables]),
                       np.concatenate([t.skmem for t in tables]))


def parse_datagram(data: bytes) -> SocketTable:
    """The sockets in one datagram of the kernel's own (the notices of freed sockets)."""
    batch = _Batch()
    batch.feed(data, None)
    return batch.table()


def empty_table() -> SocketTable:
    return _Batch().table()


def address_text(family: int, raw: bytes) -> str:
    """The address of a `src`/`dst` field; an IPv4-mapped IPv6 address as the IPv4 address it
    is (its packets are IPv4 on the wire), IPv6 compressed."""
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    if raw[:12] == b"\0" * 10 + b"\xff\xff":
        return socket.inet_ntop(socket.AF_INET, raw[12:16])
    return socket.inet_ntop(socket.AF_INET6, raw[:16])

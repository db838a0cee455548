"""TCP payload packets of this network namespace, read from a TPACKET_V3 ring.

An AF_PACKET socket with a classic BPF filter in the kernel (IPv4 and IPv6 TCP segments
carrying payload, and SYNs, not to or from the excluded ports, the first 128 bytes of each;
a connection's set-up is on the path of its first message, so its SYN is kept; an IPv6
packet with extension headers before TCP is not seen) and a memory-mapped
TPACKET_V3 ring: the kernel fills blocks of packets and wakes the reader once a block is full
or `block_timeout_ms` has passed, so a busy host costs one wakeup per block, not per packet
(a recv() per packet costs a syscall and a Python call each). Packets leaving and entering
every interface of the namespace are seen, loopback included (there twice: out, then in).

Why not scapy: its sniffer parses every packet into objects, ~100 µs a packet in Python;
here a packet is a struct read at offsets. Why not pyroute2: it has no packet capture.
The kernel's layouts: linux/if_packet.h (tpacket_req3, tpacket_block_desc, tpacket3_hdr).
"""

from __future__ import annotations

import ctypes
import mmap
import select
import socket
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sniffer.tcp_headers import IPV6_HEADER, ip_tcp

SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_VERSION = 10
TPACKET_V3 = 2
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_ALL = 0x0003
SKF_AD_PROTOCOL = 0xFFFFF000  # SKF_AD_OFF + 0: the cBPF load of skb->protocol
SO_ATTACH_FILTER = 26
TP_STATUS_KERNEL, TP_STATUS_USER = 0, 1
PACKET_OUTGOING = 4
SNAPLEN = 128  # IPv4 (≤ 60) or IPv6 (40) and TCP (≤ 60) headers; no payload is kept

_BLOCK = struct.Struct("=IIIII")  # version, offset_to_priv, block_status, num_pkts, first
_FRAME = struct.Struct("=IIIIIIHH")  # next_offset, sec, nsec, snaplen, len, status, mac, net
_SLL_PKTTYPE = 48 + 10  # sockaddr_ll follows the 48-byte tpacket3_hdr; sll_pkttype in it


@dataclass(frozen=True)
class Segment:
    """One captured TCP segment with payload, or a SYN: when (unix s, the kernel's capture
    time), whether it left this host, its 4-tuple, sequence number, payload length and
    flags."""

    time_s: float
    outgoing: bool
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    payload: int
    flags: int

    @property
    def fin_or_rst(self) -> bool:
        return bool(self.flags & 0x05)

    @property
    def syn(self) -> bool:
        return bool(self.flags & 0x02)

    @property
    def opening(self) -> bool:
        """A SYN without ACK: a client opening the connection."""
        return self.flags & 0x12 == 0x02


MAX_EXCLUDED_PORTS = 100  # a conditional jump reaches 255 instructions on
DROP = "drop"  # jump targets: the program's last instruction (`ret #0`), and labels
IPV6, TCP, SETUP = "ipv6", "tcp", "setup"
Instruction = tuple[int, int | str, int | str, int]


def filter_program(exclude_ports: Sequence[int]) -> list[tuple[int, int, int, int]]:
    """Classic BPF over the IP header (a SOCK_DGRAM packet socket starts there): IPv4 (no
    later fragment) or IPv6 (TCP its next header), TCP, neither port excluded, payload =
    TCP segment − TCP header > 0 or the SYN flag set. Instructions (code, jt, jf, k), jumps
    relative to the next instruction (labels resolved here)."""
    prog: list[Instruction | str] = [
        (0x28, 0, 0, SKF_AD_PROTOCOL),  # ldh skb->protocol (all are seen: ETH_P_ALL)
        (0x15, 0, IPV6, ETH_P_IP),  # IPv4, else try IPv6
        (0x30, 0, 0, 9),           # ldb [9]: protocol
        (0x15, 0, DROP, 6),        # jeq #6, or drop
        (0x28, 0, 0, 6),           # ldh [6]: flags, fragment offset
        (0x45, DROP, 0, 0x1FFF),   # jset #0x1fff: a later fragment, drop
        (0xB1, 0, 0, 0),           # ldxb 4*([0]&0xf): X = IP header length
        (0x28, 0, 0, 2),           # ldh [2]: total length
        (0x1C, 0, 0, 0),           # sub x
        (0x02, 0, 0, 0),           # st M[0]: TCP segment length
        (0x05, 0, 0, TCP),         # ja tcp
        IPV6,
        (0x15, 0, DROP, ETH_P_IPV6),  # IPv6, or drop
        (0x30, 0, 0, 6),           # ldb [6]: next header
        (0x15, 0, DROP, 6),        # jeq #6 (TCP right after the fixed header), or drop
        (0x28, 0, 0, 4),           # ldh [4]: payload length = TCP segment length
        (0x02, 0, 0, 0),           # st M[0]
        (0x01, 0, 0, IPV6_HEADER),  # ldx #40: X = IP header length
        TCP,
    ]
    for side in (0, 2):  # source port, destination port
        prog.append((0x48, 0, 0, side))  # ldh [x+side]
        prog += [(0x15, DROP, 0, port) for port in exclude_ports]  # jeq #port: drop
    prog += [
        (0x50, 0, 0, 13),          # ldb [x+13]: flags
        (0x02, 0, 0, 1),           # st M[1]
        (0x50, 0, 0, 12),          # ldb [x+12]: data offset
        (0x54, 0, 0, 0xF0),        # and #0xf0
        (0x74, 0, 0, 2),           # rsh #2: TCP header length
        (0x07, 0, 0, 0),           # tax
        (0x60, 0, 0, 0),           # ld M[0]
        (0x1C, 0, 0, 0),           # sub x: payload length
        (0x15, SETUP, 0, 0),       # jeq #0: no payload, a SYN?
        (0x06, 0, 0, SNAPLEN),     # ret #snaplen: accept
        SETUP,
        (0x60, 0, 0, 1),           # ld M[1]: flags
        (0x45, 0, DROP, 0x02),     # jset #SYN, or drop
        (0x06, 0, 0, SNAPLEN),     # ret #snaplen: accept
        DROP,
        (0x06, 0, 0, 0),           # ret #0: drop
    ]
    at: dict[str, int] = {}
    code: list[Instruction] = []
    for item in prog:
        if isinstance(item, str):
            at[item] = len(code)
        else:
            code.append(item)

    def offset(i: int, target: int | str) -> int:
        return at[target] - i - 1 if isinstance(target, str) else target
    out = [(c, offset(i, jt), offset(i, jf), offset(i, k) if c == 0x05 else int(k))
           for i, (c, jt, jf, k) in enumerate(code)]
    if any(jt > 255 or jf > 255 for _, jt, jf, _ in out):  # a u8 each: it would wrap
        raise ValueError(f"{len(exclude_ports)} ports to exclude: too many for one filter "
                         f"(at most {MAX_EXCLUDED_PORTS})")
    return out


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _attach(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    code = (_SockFilter * len(program))(*(_SockFilter(*ins) for ins in program))
    fprog = _SockFprog(len(program), ctypes.cast(code, ctypes.POINTER(_SockFilter)))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(fprog))  # the kernel copies


class PacketRing:
    """The ring on an AF_PACKET socket of the calling thread's network namespace."""

    def __init__(self, exclude_ports: Sequence[int] = (), block_size: int = 1 << 16,
                 blocks: int = 64, block_timeout_ms: int = 100) -> None:
        self.block_size, self.blocks = block_size, blocks
        # ETH_P_ALL: a socket bound to one protocol sees arriving packets only, a tap sees
        # leaving ones too (dev_queue_xmit_nit)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
        try:
            _attach(self.sock, filter_program(exclude_ports))
            self.sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V3)
            frame = 2048
            req = struct.pack("=IIIIIII", block_size, blocks, frame,
                              block_size * blocks // frame, block_timeout_ms, 0, 0)
            self.sock.setsockopt(SOL_PACKET, PACKET_RX_RING, req)
            self.ring = mmap.mmap(self.sock.fileno(), block_size * blocks, mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            self.sock.close()
            raise
        self.next_block = 0
        self.poller = select.poll()
        self.poller.register(self.sock.fileno(), select.POLLIN | select.POLLERR)

    def close(self) -> None:
        self.ring.close()
        self.sock.close()

    def __enter__(self) -> PacketRing:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def read(self, timeout_s: float) -> Iterator[Segment]:
        """The segments of every block the kernel has handed over, waiting up to `timeout_s`
        for the first."""
        if not self._ready():
            self.poller.poll(int(timeout_s * 1000))
        while self._ready():
            base = self.next_block * self.block_size
            yield from _segments(self.ring, base)
            struct.pack_into("=I", self.ring, base + 8, TP_STATUS_KERNEL)  # hand it back
            self.next_block = (self.next_block + 1) % self.blocks

    def _ready(self) -> bool:
        status = struct.unpack_from("=I", self.ring, self.next_block * self.block_size + 8)[0]
        return bool(status & TP_STATUS_USER)

    def drops(self) -> tuple[int, int]:
        """(packets, drops) since the last call (PACKET_STATISTICS; TPACKET_V3 adds a
        freeze count)."""
        raw = self.sock.getsockopt(SOL_PACKET, 6, 12)
        packets, dropped, _ = struct.unpack("=III", raw)
        return packets, dropped


def _segments(ring: mmap.mmap, base: int) -> Iterator[Segment]:
    _, _, _, n, first = _BLOCK.unpack_from(ring, base)
    at = base + first
    for _ in range(n):
        nxt, sec, nsec, snaplen, _, _, mac, net = _FRAME.unpack_from(ring, at)
        outgoing = ring[at + _SLL_PKTTYPE] == PACKET_OUTGOING
        got = ip_tcp(ring, at + net, at + mac + snaplen)
        if not isinstance(got, str):  # (the kernel's filter passes whole TCP headers only)
            src, dst, sport, dport, seq, payload, flags = got
            yield Segment(sec + nsec * 1e-9, outgoing, src, sport, dst, dport, seq, payload,
                          flags)
        at += nxt

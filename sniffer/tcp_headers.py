"""The IPv4 or IPv6 header and the TCP header of a packet, read at an offset: the one reader of
the sniffer's packet ring (live, `packet_ring`) and of packet capture files
(`coordinator.config.pcap_trace`, `linkgrad paths --pcap`).

A struct read at offsets, not scapy's layers (see `packet_ring`), checked against the bytes
there are: the ring's kernel filter passes only whole TCP headers, but a file holds whatever
its writer saw (fragments, other protocols, packets cut short).
"""

from __future__ import annotations

import socket
import struct

__all__ = ["IPV6_HEADER", "TcpHeader", "ip_tcp"]

_IP = struct.Struct("!BBHHHBBH4s4s")
_IP6 = struct.Struct("!IHBB16s16s")  # version..flow label, payload length, next header, hops
IPV6_HEADER = 40
_TCP = struct.Struct("!HHIIBB")  # ports, sequence number, ack number, data offset, flags

# (src, dst, sport, dport, seq, payload bytes, flags): a tuple, as the ring reads thousands
# of packets a second and each is unpacked once
TcpHeader = tuple[str, str, int, int, int, int, int]


def ip_tcp(buf: bytes | bytearray | memoryview, at: int, end: int) -> TcpHeader | str:
    """The IP and TCP headers of the packet whose IP header starts at `buf[at]` and whose
    captured bytes end at `buf[end]`, or why there are none."""
    if end < at + 1:
        return "cut short"
    version = buf[at] >> 4
    if version == 4:
        if end < at + _IP.size:
            return "cut short"
        vihl, _, total, _, frag, _, proto, _, src4, dst4 = _IP.unpack_from(buf, at)
        if proto != 6:
            return "not TCP"
        if frag & 0x1FFF:
            return "an IP fragment"
        ihl = (vihl & 0x0F) * 4
        length, src, dst = total - ihl, socket.inet_ntoa(src4), socket.inet_ntoa(dst4)
    elif version == 6:
        if end < at + _IP6.size:
            return "cut short"
        _, length, nxt, _, src6, dst6 = _IP6.unpack_from(buf, at)
        if nxt != 6:
            return "not TCP"  # (or behind an IPv6 extension header)
        ihl = IPV6_HEADER
        src, dst = socket.inet_ntop(socket.AF_INET6, src6), \
            socket.inet_ntop(socket.AF_INET6, dst6)
    else:
        return "not IP"
    if end < at + ihl + _TCP.size:
        return "cut short"
    sport, dport, seq, _, off, flags = _TCP.unpack_from(buf, at + ihl)
    payload = length - (off >> 4) * 4
    if payload < 0:
        return "a bad TCP header"
    return src, dst, sport, dport, seq, payload, flags

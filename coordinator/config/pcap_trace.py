"""A host's packet capture (tcpdump, Wireshark: pcap or pcapng) as the trace its sniffer would
have sent: the TCP segments assembled into logical messages by the sniffer's own assembler
(`sniffer.message_assembly`), the connections it saw opened (SYNs) and the servers among its
endpoints, for `linkgrad paths --pcap HOST=FILE`.

scapy reads the file (pcap, pcapng, either byte order, micro- or nanosecond stamps) with its
raw readers; the link headers are unpacked here with `struct`, the IP and TCP headers by the
sniffer's own reader (`sniffer.tcp_headers`): dissecting each packet into scapy layers reads
about 12 times slower, 7,400 packets a second (benchmarks/pcap_paths.py), too slow for a
capture of a busy server.

What a capture does not say is worked out: which addresses are the host's (the packets'
direction where the link type has one: `-i any`'s cooked headers, pcapng's flags; else the
MAC address in every frame, the one with fewest addresses behind it; else the address in
the most packets; a host that talked to one peer only is settled by the peer's capture or
by the user, `HOST@ADDRESS=FILE`), and which endpoints listen (those that took a SYN;
without one, a port below the ephemeral range). The processes are not in a capture: nodes
are the hosts.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import struct
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from linkgrad.errors import InputError, Problem
from linkgrad.paths.reconcile import HostRecord, HostTrace
from sniffer.message_assembly import MessageAssembler
from sniffer.tcp_headers import ip_tcp

__all__ = ["EPHEMERAL_FIRST", "AmbiguousAddress", "PcapRead", "PcapSource",
           "parse_pcap_option", "read_pcap"]

EPHEMERAL_FIRST = 32768  # Linux's ip_local_port_range starts here
IDLE_S = 5.0  # as the sniffer: a message with no segment for this long is finished
ETHERNET, RAW, LINUX_SLL, LINUX_SLL2, NULL, LOOP, IPV4, IPV6 = 1, 101, 113, 276, 0, 108, 228, 229
_LINK_NAMES = {ETHERNET: "Ethernet", RAW: "raw IP", 12: "raw IP", 14: "raw IP",
               LINUX_SLL: "Linux cooked (-i any)", LINUX_SLL2: "Linux cooked v2 (-i any)",
               NULL: "BSD loopback", LOOP: "OpenBSD loopback", IPV4: "IPv4", IPV6: "IPv6"}
PACKET_OUTGOING = 4
_MAGICS = {b"\xa1\xb2\xc3\xd4", b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\x3c\x4d", b"\x4d\x3c\xb2\xa1",
           b"\x0a\x0d\x0d\x0a"}  # pcap (both orders, micro- and nanoseconds), pcapng
_LOOPBACK = ("127.", "::1")


@dataclass(frozen=True)
class _Segment:
    time_s: float
    outgoing: bool | None  # None: the capture does not say
    mac: tuple[bytes, bytes] | None  # Ethernet source and destination
    src: tuple[str, int]
    dst: tuple[str, int]
    seq: int
    payload: int
    flags: int


@dataclass(frozen=True)
class PcapRead:
    """A capture read: the host's trace and what was left out of it, counted."""

    trace: HostTrace
    packets: int
    segments: int  # TCP segments used
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> packets


@dataclass(frozen=True)
class PcapSource:
    """One `--pcap`: the host a capture was taken on, the file, and the host's own addresses
    where the user gave them (empty: worked out from the packets)."""

    host: str
    path: Path
    addresses: frozenset[str] = frozenset()


class AmbiguousAddress(InputError):
    """The packets cannot say which of `candidates` is the host's own address."""

    def __init__(self, problem: Problem, candidates: Sequence[str]) -> None:
        super().__init__(problem)
        self.candidates = tuple(candidates)


def parse_pcap_option(text: str) -> PcapSource:
    """`HOST=FILE` or `HOST@ADDRESS[,ADDRESS...]=FILE` of `--pcap`."""
    named, sep, path = text.partition("=")
    host, at, given = named.partition("@")
    if not sep or not host.strip() or not path or (at and not given.strip()):
        raise InputError(Problem(f"expected HOST=FILE or HOST@ADDRESS=FILE (the host the "
                                 f"capture was taken on), got {text!r}", field="--pcap"))
    if any(c.isspace() or c in "/=" for c in host.strip()):
        raise InputError(Problem(f"{host!r} is not a host name", field="--pcap"))
    addresses = set()
    for a in given.split(",") if at else ():
        try:
            addresses.add(ipaddress.ip_address(a.strip()).compressed)
        except ValueError:
            raise InputError(Problem(f"{a.strip()!r} is not an IP address (HOST@ADDRESS="
                                     "FILE: the host's own address in the capture)",
                                     field="--pcap")) from None
    return PcapSource(host.strip(), Path(path), frozenset(addresses))


def read_pcap(host: str, path: Path, exclude_ports: Sequence[int] = (22,),
              addresses: frozenset[str] = frozenset(),
              others: frozenset[str] = frozenset()) -> PcapRead:
    """The capture at `path`, taken on `host`; InputError naming the file when it is none a
    reader knows or is broken. `addresses`: the host's own, if known (else worked out from
    the packets); `others`: addresses known to be other hosts' (their captures'), which
    settle a capture whose packets cannot say (AmbiguousAddress: a host that talked to one
    peer only, in a capture with no direction)."""
    skipped: Counter[str] = Counter()
    segments: list[_Segment] = []
    packets = 0
    excluded = set(exclude_ports)
    for link, data, time_s, direction in _packets(path):
        packets += 1
        got = _segment(link, data, time_s, direction)
        if isinstance(got, str):
            skipped[got] += 1
        elif got.src[1] in excluded or got.dst[1] in excluded:
            skipped["an excluded port (--exclude-port)"] += 1
        elif got.payload or got.flags & 0x02:  # as the sniffer's filter: data, or a SYN
            segments.append(got)
    if not segments:  # a host that served nothing meanwhile: traced, with no message
        return PcapRead(HostTrace(host, frozenset({"127.0.0.1", "::1"}) | addresses,
                                  frozenset(), []), packets, 0, dict(skipped))
    seen = {a for s in segments for a in (s.src[0], s.dst[0])}
    if addresses:
        missing = sorted(addresses - seen)
        if missing:
            raise InputError(Problem(f"{', '.join(missing)} (given as {host}'s address) is in "
                                     "no TCP packet of the capture", str(path),
                                     field="--pcap"))
        local = set(addresses)
    else:
        try:
            local = _local_addresses(segments, others)
        except _Tied as tied:
            raise AmbiguousAddress(Problem(
                f"cannot tell which of {', '.join(tied.candidates)} is {host}'s own address "
                "(its packets are between them and the capture does not say which way they "
                f"went): say it, as --pcap {host}@ADDRESS={path}, or add the other host's "
                "capture", str(path), field="--pcap"), tied.candidates) from None
    local |= {"127.0.0.1", "::1"} | {a for a in seen if a.startswith(_LOOPBACK)}
    return PcapRead(_host_trace(host, segments, local), packets, len(segments), dict(skipped))


def _usable_scapy_cache() -> None:
    """scapy caches its data files under $XDG_CACHE_HOME/scapy when it is imported, and its
    import fails (PermissionError) where that folder exists but is another user's (made by
    root, read by a user sharing its HOME): a private one for this process then."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = base / "scapy"
    try:
        usable = not folder.exists() or os.access(folder, os.R_OK | os.W_OK | os.X_OK)
    except OSError:
        usable = False
    if not usable:
        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="linkgrad-scapy-")


def _packets(path: Path) -> Iterator[tuple[int, bytes, float, bool | None]]:
    """(link type, bytes, time, outgoing if known) per packet, in the file's order."""
    _usable_scapy_cache()
    from scapy.error import Scapy_Exception
    from scapy.utils import RawPcapReader

    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except FileNotFoundError as e:
        raise InputError(Problem("no such capture file", str(path), field="--pcap")) from e
    except OSError as e:
        raise InputError(Problem(f"cannot read: {e.strerror or e}", str(path),
                                 field="--pcap")) from e
    if magic not in _MAGICS and magic[:2] != b"\x1f\x8b":  # (scapy reads a gzipped one)
        raise InputError(Problem("not a pcap or pcapng capture (tcpdump -w, or Wireshark's "
                                 f"File > Save): it starts {magic!r}", str(path),
                                 field="--pcap"))
    with path.open("rb") as f:  # ours to close: scapy leaves its own open when it refuses
        try:
            reader = RawPcapReader(f)
        except (OSError, EOFError, Scapy_Exception) as e:
            raise InputError(Problem(f"not a pcap or pcapng capture: {e}", str(path),
                                     field="--pcap")) from e
        yield from _read(reader, path)


def _read(reader: Any, path: Path) -> Iterator[tuple[int, bytes, float, bool | None]]:
    from scapy.utils import RawPcapNgReader  # (imported by _packets first)

    quiet = logging.getLogger("scapy.runtime")  # its warnings are counted here instead
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with reader:
            ng = isinstance(reader, RawPcapNgReader)
            for data, meta in _each(reader, path):
                if ng and meta.tshigh is None:  # a Simple Packet Block: no time stamp
                    yield -1, data, math.nan, None
                elif ng:
                    time_s = ((meta.tshigh << 32) | meta.tslow) / meta.tsresol
                    # pcapng's epb_flags: 1 inbound, 2 outbound (0: not said)
                    direction = {1: False, 2: True}.get(meta.direction or 0)
                    yield meta.linktype, data, time_s, direction
                else:  # (a pcap record always has one)
                    time_s = meta.sec + meta.usec * (1e-9 if reader.nano else 1e-6)
                    yield reader.linktype, data, time_s, None
    finally:
        quiet.setLevel(level)


def _each(reader: Any, path: Path) -> Iterator[tuple[bytes, Any]]:
    from scapy.error import Scapy_Exception

    packets = iter(reader)
    while True:
        try:
            yield next(packets)
        except StopIteration:
            return
        except (Scapy_Exception, struct.error, OSError, ValueError) as e:
            raise InputError(Problem(f"the capture is broken after its packets so far: {e}",
                                     str(path), field="--pcap")) from e


def _segment(link: int, data: bytes, time_s: float, outgoing: bool | None
             ) -> _Segment | str:
    """The TCP segment in a packet, or why there is none."""
    mac = None
    if link == -1:
        return "no time stamp (a pcapng simple packet block)"
    if link == ETHERNET:
        if len(data) < 14:
            return "cut short"
        mac = (data[6:12], data[0:6])
        ethertype, at = struct.unpack_from("!H", data, 12)[0], 14
        while ethertype in (0x8100, 0x88A8) and len(data) >= at + 4:  # VLAN tags
            ethertype, at = struct.unpack_from("!H", data, at + 2)[0], at + 4
    elif link == LINUX_SLL:
        if len(data) < 16:
            return "cut short"
        pkttype, ethertype = struct.unpack_from("!H", data, 0)[0], \
            struct.unpack_from("!H", data, 14)[0]
        outgoing, at = pkttype == PACKET_OUTGOING, 16
    elif link == LINUX_SLL2:
        if len(data) < 20:
            return "cut short"
        ethertype, pkttype = struct.unpack_from("!H", data, 0)[0], data[10]
        outgoing, at = pkttype == PACKET_OUTGOING, 20
    elif link in (RAW, 12, 14, IPV4, IPV6):
        ethertype, at = 0, 0
    elif link in (NULL, LOOP):
        ethertype, at = 0, 4
    else:
        return f"link type {link} (not Ethernet, cooked or raw IP)"
    if ethertype not in (0, 0x0800, 0x86DD):
        return "not IP"
    return _tcp(data, at, time_s, outgoing, mac)


def _tcp(data: bytes, at: int, time_s: float, outgoing: bool | None,
         mac: tuple[bytes, bytes] | None) -> _Segment | str:
    got = ip_tcp(data, at, len(data))
    if isinstance(got, str):
        return got
    src, dst, sport, dport, seq, payload, flags = got
    return _Segment(time_s, outgoing, mac, (src, sport), (dst, dport), seq, payload, flags)


class _Tied(Exception):
    def __init__(self, candidates: list[str]) -> None:
        self.candidates = candidates


def _local_addresses(segments: list[_Segment], others: frozenset[str]) -> set[str]:
    """The host's addresses: from the packets' direction where the capture says it, else
    from the MAC address in every frame, else the address in the most packets; addresses
    in `others` are not the host's. _Tied where two candidates are alike (a host that only
    talked to one peer: both addresses in every packet)."""
    local = {s.src[0] if s.outgoing else s.dst[0] for s in segments if s.outgoing is not None}
    if not local and any(s.mac for s in segments):
        # the host's MAC is in every frame; so is a router's it talks through, but behind
        # that one are many addresses, behind the host's only its own
        ends = Counter(m for s in segments if s.mac for m in s.mac)
        sources: dict[bytes, set[str]] = {}
        for s in segments:
            if s.mac:
                sources.setdefault(s.mac[0], set()).add(s.src[0])
        top = max(ends.values())
        every = [m for m, n in ends.items()
                 if n == top and not (sources.get(m) and sources[m] <= others)]
        if every:
            def behind(m: bytes) -> int:
                return len(sources.get(m, ())) or 1 << 30
            fewest = min(map(behind, every))
            own = sorted(m for m in every if behind(m) == fewest)
            if len(own) > 1:
                raise _Tied(sorted({a for m in own for a in sources.get(m, ())}))
            local = {s.src[0] if s.mac[0] == own[0] else s.dst[0] for s in segments
                     if s.mac and own[0] in s.mac and s.mac[0] != s.mac[1]}
    local |= {a for s in segments for a in (s.src[0], s.dst[0]) if a.startswith(_LOOPBACK)}
    rest = [s for s in segments if s.src[0] not in local and s.dst[0] not in local]
    while rest:  # no direction at all (raw IP), or frames not to or from this MAC
        ends = Counter(a for s in rest for a in (s.src[0], s.dst[0]) if a not in others)
        if not ends:
            break  # between other hosts only: not this host's traffic
        top = max(ends.values())
        commonest = sorted(a for a, n in ends.items() if n == top)
        if len(commonest) > 1:
            raise _Tied(commonest)
        local.add(commonest[0])
        rest = [s for s in rest if s.src[0] not in local and s.dst[0] not in local]
    return local


def _host_trace(host: str, segments: list[_Segment], local: set[str]) -> HostTrace:
    assembler = MessageAssembler(local, IDLE_S)
    done = []
    openings = []
    listening: set[tuple[str, int]] = set()
    next_expiry = segments[0].time_s + 1.0
    previous_copy: tuple[Any, ...] | None = None
    for s in segments:
        loopback = s.src[0] in local and s.dst[0] in local
        if loopback and s.outgoing is not None:
            outgoing = s.outgoing  # `-i any`: both copies, the leaving one skipped (sniffer's)
        else:
            # without a direction a loopback packet may be in twice or once: taken as
            # arriving, and its second copy (the same segment at once after) dropped
            outgoing = False if loopback else s.src[0] in local
            if loopback and (s.src, s.dst, s.seq, s.payload, s.flags) == previous_copy:
                continue
        previous_copy = (s.src, s.dst, s.seq, s.payload, s.flags)
        if s.flags & 0x12 == 0x02:  # a SYN: a client opening a connection to a server
            if s.dst[0] in local:
                listening.add(s.dst)
            key = (s.src, s.dst)
            if not openings or openings[-1][:2] != key:
                openings.append((s.src, s.dst, s.time_s))
        if s.flags & 0x02 and not s.payload:
            continue
        if s.time_s >= next_expiry:
            done += assembler.expire(s.time_s)
            next_expiry = s.time_s + 1.0
        done += assembler.feed(s.time_s, s.src, s.dst, s.seq, s.payload,
                               bool(s.flags & 0x05), outgoing)
    done += assembler.flush()
    opened = {(c, srv) for c, srv, _ in openings}
    for m in done:  # a connection whose SYN fell before the capture: the lower, fixed port
        if (m.local, m.remote) in opened or (m.remote, m.local) in opened:
            continue
        low = min(m.local, m.remote, key=lambda e: e[1])
        if low[1] < EPHEMERAL_FIRST and low[0] in local:
            listening.add(low)
    records = [HostRecord(m.local, m.remote, m.sent, m.seq_first, m.seq_end, m.first_s,
                          m.last_s, m.loopback, "") for m in done]
    records.sort(key=lambda r: r.first_s)
    return HostTrace(host, frozenset(local), frozenset(listening), records, tuple(openings))

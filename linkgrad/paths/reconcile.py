"""Trace reconciliation (WAP5 §4): every host's messages into one trace of (send time, sender,
receive time, receiver) records.

Each traced host reports the messages it sent and received, each with its connection's two
endpoints, its TCP sequence range and the process at this host's end. The same message seen
at its two ends has the same sequence range, so the sender's and the receiver's records are
matched exactly by (from, to, first sequence number): no timing is involved. Where the two
ends cut a direction's bytes differently (the other side spoke while a message was under way,
seen before the last byte at one end and after it at the other), the receiver's message
takes its send time from the sender's message holding its first byte. A message whose other
end was not traced keeps a nil (NaN) time there (§5.1 handles it). A connection whose SYN a
host saw is `opened` (its set-up is on its first message's path).

A connection is its two endpoints from one SYN to the next: a client that opens a connection
per request reuses its ports, at once where the server closed first and holds the TIME_WAIT
(MySQL's clients send COM_QUIT and the server closes), so one endpoint pair carries many
connections, ms apart. A host's SYNs split its messages of that pair, on its own clock.

Times: the send time is the first byte leaving the sender, the receive time the last byte
reaching the receiver (the node can act on a whole message only). Which end of a connection
is its server: the end listening on that port at its host (the hosts' listening sockets), else
WAP5's fixed port (the end that appears in more connections), else the lower port.
"""

from __future__ import annotations

import bisect
import ipaddress
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from linkgrad.paths.messages import NO_THREAD, Connections, Messages, Trace

__all__ = ["SEQ_MOD", "Endpoint", "HostRecord", "HostTrace", "Opening", "reconcile"]

Endpoint = tuple[str, int]
# a connection opened: (client, server, when its SYN was seen; NaN: not known)
Opening = tuple[Endpoint, Endpoint, float]
# first, end, first_s, host, process, thread, last_s
_Sent = tuple[int, int, float, str, str, int, float]
SEQ_MOD = 1 << 32


@dataclass(frozen=True)
class HostRecord:
    """One message as one host saw it (sniffer.message_assembly.HostMessage, plus the process
    at this host's end, "" if unknown, and the thread that sent or received it there)."""

    local: Endpoint
    remote: Endpoint
    sent: bool
    seq_first: int
    seq_end: int
    first_s: float
    last_s: float
    loopback: bool
    process: str
    thread: int = NO_THREAD


@dataclass(frozen=True)
class HostTrace:
    name: str
    addresses: frozenset[str]
    listening: frozenset[Endpoint]  # (address or 0.0.0.0, port)
    records: Sequence[HostRecord]
    openings: Sequence[Opening] = ()  # SYNs seen here


@dataclass
class _Side:
    time_s: float = float("nan")
    host: str = ""
    process: str = ""
    thread: int = NO_THREAD
    end_s: float = float("nan")  # the sender's last segment


def reconcile(hosts: Sequence[HostTrace]) -> Trace:
    """One trace from every traced host's records."""
    # every host has its own 127.0.0.1 and ::1: a loopback address is its host's (scoped,
    # as an IPv6 zone is: `127.0.0.1%db`)
    host_of_address = {_scoped(a, h.name): h.name for h in hosts for a in h.addresses}
    listens = {(h.name, port, addr) for h in hosts for addr, port in h.listening}
    sends: dict[tuple[Endpoint, Endpoint], list[_Sent]] = {}
    receives: list[tuple[Endpoint, Endpoint, int, int, float, str, str, int]] = []
    for h in hosts:
        for r in h.records:
            local, remote = ((_scoped(r.local[0], h.name), r.local[1]),
                             (_scoped(r.remote[0], h.name), r.remote[1]))
            src, dst = (local, remote) if r.sent else (remote, local)
            if r.loopback or r.sent:
                sends.setdefault((src, dst), []).append(
                    (r.seq_first, r.seq_end, r.first_s, h.name, r.process, r.thread,
                     r.last_s))
            if r.loopback or not r.sent:
                receives.append((src, dst, r.seq_first, r.seq_end, r.last_s, h.name,
                                 r.process, r.thread))
    messages = _match(sends, receives)
    opened: set[frozenset[Endpoint]] = set()
    syns: dict[tuple[frozenset[Endpoint], str], list[float]] = {}
    for h in hosts:
        for c, srv, t in h.openings:
            pair = frozenset(((_scoped(c[0], h.name), c[1]), (_scoped(srv[0], h.name), srv[1])))
            opened.add(pair)
            if not math.isnan(t):
                syns.setdefault((pair, h.name), []).append(t)
    starts = _connection_starts(syns, messages)
    # each pair's connections counted on one host's clock, the one that saw most of them
    # (the other may have begun tracing after a SYN, or lost one): both directions of a
    # connection then fall in the same one
    counter: dict[frozenset[Endpoint], str] = {}
    for pair, host in sorted(starts, key=lambda k: (len(starts[k]), k[1])):
        counter[pair] = host
    # (endpoints, connections begun before it): 0 is the one open when the trace began
    keys = []
    for src, dst, _, s, r in messages:
        pair = frozenset((src, dst))
        keys.append((pair, _incarnation(starts, counter[pair], pair, s, r)
                     if pair in counter else 0))
    return _build(messages, keys, host_of_address, listens,
                  {k for k in set(keys) if k[1] > 0 or (k[0] in opened and k[0] not in counter)})


def _connection_starts(syns: Mapping[tuple[frozenset[Endpoint], str], list[float]],
                       messages: list[tuple[Endpoint, Endpoint, int, _Side, _Side]]
                       ) -> dict[tuple[frozenset[Endpoint], str], list[float]]:
    """Per endpoint pair and host, when each of its connections began there: its SYNs,
    a SYN with none of the pair's messages since the one before merged into it (a
    retransmission: the client's first went unanswered, or the server's host did not see
    it)."""
    seen: dict[tuple[frozenset[Endpoint], str], list[float]] = {}
    for src, dst, _, s, r in messages:
        pair = frozenset((src, dst))
        for side in (s, r):
            if (pair, side.host) in syns and not math.isnan(side.time_s):
                seen.setdefault((pair, side.host), []).append(side.time_s)
    starts = {}
    for key, times in syns.items():
        between = sorted(seen.get(key, []))
        kept: list[float] = []
        for t in sorted(times):
            if kept and bisect.bisect_right(between, t) == bisect.bisect_right(between,
                                                                               kept[-1]):
                continue
            kept.append(t)
        starts[key] = kept
    return starts


def _incarnation(starts: Mapping[tuple[frozenset[Endpoint], str], list[float]], counter: str,
                 pair: frozenset[Endpoint], sender: _Side, receiver: _Side) -> int:
    """How many connections of `pair` began before this message, on the clock of the host
    that counts them (`counter`), else of the message's other end (a message the counting
    host did not see: as that host counts, which it may not quite)."""
    by_counter = [side for side in (sender, receiver) if side.host == counter]
    for side in (*by_counter, sender, receiver):
        times = starts.get((pair, side.host))
        if times is not None and not math.isnan(side.time_s):
            return bisect.bisect_right(times, side.time_s)
    return 0


def _scoped(address: str, host: str) -> str:
    return f"{address}%{host}" if _is_loopback(address) else address


@lru_cache(maxsize=65536)  # millions of records, a few addresses
def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _match(sends: Mapping[tuple[Endpoint, Endpoint], list[_Sent]],
           receives: list[tuple[Endpoint, Endpoint, int, int, float, str, str, int]]
           ) -> list[tuple[Endpoint, Endpoint, int, _Side, _Side]]:
    """(from, to, size, sender side, receiver side) per message."""
    out = []
    index = {k: {s[0]: s for s in v} for k, v in sends.items()}
    ranges = {k: sorted(v) for k, v in sends.items()}
    used: set[tuple[Endpoint, Endpoint, int]] = set()
    for src, dst, first, end, last_s, host, process, thread in receives:
        sent = index.get((src, dst), {}).get(first) or _holding(ranges.get((src, dst), []),
                                                                 first)
        sender = _Side()
        if sent is not None:
            used.add((src, dst, sent[0]))
            sender = _Side(sent[2], sent[3], sent[4], sent[5], sent[6])
        out.append((src, dst, (end - first) % SEQ_MOD, sender,
                    _Side(last_s, host, process, thread)))
    for (src, dst), v in sends.items():
        for first, end, first_s, host, process, thread, last_s in v:
            if (src, dst, first) not in used:
                out.append((src, dst, (end - first) % SEQ_MOD,
                            _Side(first_s, host, process, thread, last_s), _Side()))
    return out


def _holding(ranges: list[_Sent], seq: int) -> _Sent | None:
    """The sent message whose range holds `seq` (ranges sorted by first; no wrap within)."""
    lo, hi = 0, len(ranges)
    while lo < hi:
        mid = (lo + hi) // 2
        if ranges[mid][0] <= seq:
            lo = mid + 1
        else:
            hi = mid
    if lo and (seq - ranges[lo - 1][0]) % SEQ_MOD < (ranges[lo - 1][1] - ranges[lo - 1][0]) \
            % SEQ_MOD:
        return ranges[lo - 1]
    return None


def _build(messages: list[tuple[Endpoint, Endpoint, int, _Side, _Side]],
           keys: list[tuple[frozenset[Endpoint], int]], host_of_address: Mapping[str, str],
           listens: set[tuple[str, int, str]], opened: set[tuple[frozenset[Endpoint], int]]
           ) -> Trace:
    # a connection is its two endpoints, unordered, and its SYNs before (`keys`, one per
    # message); its server is found below
    conn_of: dict[tuple[frozenset[Endpoint], int], int] = {}
    ends: list[tuple[Endpoint, Endpoint]] = []
    conn_keys: list[tuple[frozenset[Endpoint], int]] = []
    procs: dict[Endpoint, str] = {}
    for (src, dst, _, s, r), key in zip(messages, keys, strict=True):
        if key not in conn_of:
            conn_of[key] = len(ends)
            ends.append((src, dst))
            conn_keys.append(key)
        for ep, side in ((src, s), (dst, r)):
            if side.process:
                procs.setdefault(ep, side.process)
    fan = _fan_in(ends)
    roles = [_roles(a, b, host_of_address, listens, fan) for a, b in ends]
    _name_short_connections(roles, procs, host_of_address)
    hosts: dict[str, int] = {}
    nodes: dict[str, int] = {}
    node_host: list[int] = []

    def node(ep: Endpoint) -> int:
        host = host_of_address.get(ep[0], ep[0])
        name = f"{host}/{procs[ep]}" if procs.get(ep) else host
        if name not in nodes:
            nodes[name] = len(nodes)
            node_host.append(hosts.setdefault(host, len(hosts)))
        return nodes[name]

    client_node, server_node, client_port, server_port = [], [], [], []
    for client, server in roles:
        client_node.append(node(client))
        server_node.append(node(server))
        client_port.append(client[1])
        server_port.append(server[1])
    cols: dict[str, list[float | int]] = {k: [] for k in ("send", "recv", "src", "dst", "conn",
                                                           "size", "send_thread",
                                                           "recv_thread", "send_end",
                                                           "by_server")}
    for (src, dst, size, s, r), key in zip(messages, keys, strict=True):
        cols["send"].append(s.time_s)
        cols["recv"].append(r.time_s)
        cols["src"].append(node(src))
        cols["dst"].append(node(dst))
        cols["conn"].append(conn_of[key])
        cols["size"].append(size)
        cols["send_thread"].append(s.thread)
        cols["recv_thread"].append(r.thread)
        cols["send_end"].append(s.end_s)
        cols["by_server"].append(int(src == roles[conn_of[key]][1]))
    m = Messages(cols["send"], cols["recv"], cols["src"], cols["dst"], cols["conn"],
                 cols["size"], cols["send_thread"], cols["recv_thread"], cols["send_end"],
                 cols["by_server"])
    c = Connections(client_node, server_node, client_port, server_port,
                    [k in opened for k in conn_keys])
    return Trace.sorted(m, c, tuple(nodes), np.asarray(node_host, dtype=np.int32),
                        tuple(hosts))


def _name_short_connections(roles: list[tuple[Endpoint, Endpoint]], procs: dict[Endpoint, str],
                            host_of_address: Mapping[str, str]) -> None:
    """Name the client ends no process was found for. A connection that ends before the
    sniffer looks up its socket (a PHP worker's connection per request to MySQL lives a few
    ms) has no process; it is the one that makes that host's named connections to the same
    server, else the host's only process. Unnamed, it would be a node of its own, a client
    that never listens, and the requests it serves would lose their calls."""
    def host(ep: Endpoint) -> str:
        return host_of_address.get(ep[0], ep[0])
    to_server: dict[tuple[str, Endpoint], Counter[str]] = {}
    on_host: dict[str, set[str]] = {}
    for client, server in roles:
        for ep in (client, server):
            if procs.get(ep):
                on_host.setdefault(host(ep), set()).add(procs[ep])
        if procs.get(client):
            to_server.setdefault((host(client), server), Counter())[procs[client]] += 1
    for client, server in roles:
        if procs.get(client) or client[0] not in host_of_address:
            continue
        seen = to_server.get((host(client), server))
        if seen:
            procs[client] = seen.most_common(1)[0][0]
        elif len(on_host.get(host(client), ())) == 1:
            procs[client] = next(iter(on_host[host(client)]))


def _fan_in(ends: list[tuple[Endpoint, Endpoint]]) -> dict[Endpoint, int]:
    """How many connections each endpoint is in (WAP5's fixed ports: many)."""
    count: dict[Endpoint, int] = {}
    for a, b in ends:
        count[a] = count.get(a, 0) + 1
        count[b] = count.get(b, 0) + 1
    return count


def _roles(a: Endpoint, b: Endpoint, host_of_address: Mapping[str, str],
           listens: set[tuple[str, int, str]], fan: Mapping[Endpoint, int]
           ) -> tuple[Endpoint, Endpoint]:
    """(client, server) of a connection between endpoints a and b."""
    def listening(ep: Endpoint) -> bool:
        host = host_of_address.get(ep[0])
        address = ep[0].split("%")[0]
        return host is not None and ((host, ep[1], address) in listens
                                     or (host, ep[1], "0.0.0.0") in listens
                                     or (host, ep[1], "::") in listens)
    la, lb = listening(a), listening(b)
    if la != lb:
        return (b, a) if la else (a, b)
    if fan[a] != fan[b]:
        return (b, a) if fan[a] > fan[b] else (a, b)
    return (b, a) if a[1] < b[1] else (a, b)

"""Each linked request as a trace of spans, the shape OpenTelemetry gives a request.

A request's tree (its root's likeliest instance, `analysis.Linked.best`) becomes one trace:
a *server span* per request message that arrived at a traced node, from its arrival to that
node's reply leaving (its last byte, where known); a *client span* per call a traced node
sent, from the call leaving to its reply arriving back. A call's client span is the child of
the server span it was made for: the request that arrived at the caller, found through the
tree's parents (a call caused by an earlier call's reply belongs where that call did). A
call from a node not traced has no client span: its server span is the child of the client
span of the call into that node. The root is the front end's server span for the client's
request, named by its transaction.

Times are on one clock: each host's is moved by its estimated offset (WAP5 §5.2, `clocks`),
so a server span nests in its client span whenever the network's least delays are the same
both ways; where they are not, it is moved (or cut) into its client span and says by how
much. A client span is left as measured: a call made after its request was answered (an
asynchronous one) outlives its parent, as OpenTelemetry allows.

Ids are hashes of the request's place in the trace: the same trace exported twice gives
the same ids, which a tracing back end takes as the same trace.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from linkgrad.paths.analysis import Linked
from linkgrad.paths.instances import PathInstance
from linkgrad.paths.patterns import PatternNames

__all__ = ["AttributeValue", "RequestTrace", "RequestTraces", "Span", "request_traces"]

AttributeValue = str | float | int | bool


@dataclass(frozen=True)
class Span:
    """One span: ids as integers (trace 128 bits, span 64), times in ns since the epoch on
    the trace's reference clock. `service` is the node (host/process) it ran on, `host` its
    host."""

    trace_id: int
    span_id: int
    parent_id: int | None  # None: the trace's root
    name: str
    kind: str  # "server" or "client"
    service: str
    host: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestTrace:
    trace_id: int
    transaction: str | None  # None: no web log, or the log did not see the request
    spans: tuple[Span, ...]  # the root first, every parent before its children


@dataclass(frozen=True)
class RequestTraces:
    traces: tuple[RequestTrace, ...]
    fragments: int  # trees whose root is not a client's request (no request to name)
    moved: int  # server spans moved into their client's (clocks off, or routes asymmetric)


@dataclass
class _Open:
    """A span being built: its times None where the trace does not say."""

    span_id: int
    parent: int | None  # index into the list of spans
    message: int  # the request it is an end of
    name: str
    kind: str
    service: str
    host: str
    start_s: float
    end_s: float | None
    attributes: dict[str, AttributeValue]


class _Columns:
    """What every tree reads of the trace, once: times on the reference clock, labels,
    links and each message's link probabilities."""

    def __init__(self, linked: Linked) -> None:
        trace, m = linked.trace, linked.trace.messages
        offset = np.nan_to_num(linked.offsets.offset_s, nan=0.0)  # unrelated: its own clock
        src_off, dst_off = offset[trace.src_host()], offset[trace.dst_host()]
        self.send = (m.send_s - src_off).tolist()
        self.recv = (m.recv_s - dst_off).tolist()
        self.send_end = (m.send_end_s - src_off).tolist()
        self.network = linked.offsets.network_delay_s(trace).tolist()
        self.src, self.dst, self.conn = m.src.tolist(), m.dst.tolist(), m.conn.tolist()
        self.reply = trace.is_reply().tolist()
        self.client = trace.clients.tolist()
        self.port = trace.connections.server_port.tolist()
        self.client_port = trace.connections.client_port.tolist()
        self.nodes = trace.nodes
        self.host_of = [trace.hosts[h] for h in trace.node_host.tolist()]
        names = PatternNames(trace)
        self.label = np.array(names.texts, dtype=object)[names.rank].tolist()
        self.link = [names.link_text(c) for c in names.link.tolist()]
        probs = linked.probs
        self.cand_start = probs.links.start.tolist()
        self.cand_parent = probs.links.parent.tolist()
        self.cand_p = probs.p.tolist()
        self.p_spontaneous = probs.p_spontaneous.tolist()

    def link_probability(self, child: int, parent: int) -> float:
        if parent < 0:
            return self.p_spontaneous[child]
        for i in range(self.cand_start[child], self.cand_start[child + 1]):
            if self.cand_parent[i] == parent:
                return self.cand_p[i]
        return math.nan

    def departure(self, x: int) -> float:
        """When `x` left, on the reference clock (its arrival where the send is nil)."""
        return self.send[x] if math.isfinite(self.send[x]) else self.recv[x]

    def arrival(self, x: int) -> float:
        return self.recv[x] if math.isfinite(self.recv[x]) else self.send[x]


def request_traces(linked: Linked, transaction_of: Mapping[int, str] | None = None
                   ) -> RequestTraces:
    """Every request in `linked` (a tree whose root a client sent) as a trace, in time
    order; with `transaction_of` (root message -> transaction), named by it."""
    cols = _Columns(linked)
    traces, fragments, moved = [], 0, 0
    for inst in linked.best:
        root = inst.root
        if cols.reply[root] or not cols.client[cols.src[root]] \
                or not math.isfinite(cols.recv[root]):
            fragments += 1  # a tree from a reply, a background call, or an untraced front end
            continue
        name = None if transaction_of is None else transaction_of.get(root)
        spans, shifted = _spans(inst, cols, name)
        moved += shifted
        traces.append(spans)
    return RequestTraces(tuple(traces), fragments, moved)


def _spans(inst: PathInstance, cols: _Columns, transaction: str | None
           ) -> tuple[RequestTrace, int]:
    root = inst.root
    trace_id = _trace_id(cols, root)
    parent_of = dict(zip(inst.messages, inst.parents, strict=True))
    order = _preorder(inst, cols)
    reply_of, request_of = _replies(order, cols)
    spans: list[_Open] = []
    server_of: dict[int, int] = {}  # request message -> its server span
    client_of: dict[int, int] = {}  # request message -> its client span
    for x in order:
        if cols.reply[x]:
            continue
        caller = None
        if x != root and math.isfinite(cols.send[x]):
            owner = _owner(x, parent_of, request_of, server_of, client_of)
            caller = client_of[x] = len(spans)
            spans.append(_client_span(x, parent_of[x], reply_of.get(x), owner, cols, trace_id))
        if math.isfinite(cols.recv[x]):
            parent = caller if caller is not None else \
                None if x == root else _owner(x, parent_of, request_of, server_of, client_of)
            server_of[x] = len(spans)
            reply = reply_of.get(x)
            spans.append(_server_span(x, parent_of[x], reply, parent_of.get(reply, x), parent,
                                      cols, trace_id))
    top = spans[0]
    top.name = transaction or top.name
    top.attributes["linkgrad.path_probability"] = inst.probability
    if transaction is not None:
        top.attributes["linkgrad.transaction"] = transaction
    moved = _close(spans)
    return RequestTrace(trace_id, transaction, tuple(
        Span(trace_id, s.span_id, None if s.parent is None else spans[s.parent].span_id,
             s.name, s.kind, s.service, s.host, _ns(s.start_s), _ns(_end(s)),
             s.attributes) for s in spans)), moved


def _preorder(inst: PathInstance, cols: _Columns) -> list[int]:
    """The tree's messages parents first, siblings by departure on the reference clock. Not
    the trace's order: that is each sender's own clock, and with clocks apart a child can
    come before its parent there."""
    children: dict[int, list[int]] = {}
    for x, parent in zip(inst.messages, inst.parents, strict=True):
        if parent >= 0:
            children.setdefault(parent, []).append(x)
    out, todo = [], [inst.root]
    while todo:
        x = todo.pop()
        out.append(x)
        todo.extend(sorted(children.get(x, ()), key=cols.departure, reverse=True))
    return out


def _replies(messages: list[int], cols: _Columns
             ) -> tuple[dict[int, int], dict[int, int]]:
    """Each request's reply in the tree (the first reply on its connection after it, parents
    first: a reply descends from its request) and each reply's request."""
    waiting: dict[int, int] = {}  # connection -> its request not yet answered
    reply_of, request_of = {}, {}
    for x in messages:
        c = cols.conn[x]
        if not cols.reply[x]:
            waiting[c] = x
        elif c in waiting:
            r = waiting.pop(c)
            reply_of[r], request_of[x] = x, r
    return reply_of, request_of


def _owner(x: int, parent_of: dict[int, int], request_of: dict[int, int],
           server_of: dict[int, int], client_of: dict[int, int]) -> int:
    """The span a message sent by a node belongs to: the server span of the request that
    came into the node and caused it, through any replies to the node's own earlier calls;
    where that node was not traced (no server span), the client span of the call into it,
    whose time holds the node's work. The root's where the tree does not say."""
    q = parent_of[x]
    for _ in range(len(parent_of)):
        if q < 0:
            break
        if q in server_of:
            return server_of[q]
        if q in client_of:
            return client_of[q]
        r = request_of.get(q)  # a reply to an earlier call: where that call was made from
        if r is None:
            break
        q = parent_of[r]
    return 0


def _common(x: int, parent: int, cols: _Columns) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = {
        "linkgrad.label": cols.label[x], "linkgrad.link": cols.link[x],
        "network.transport": "tcp", "server.port": cols.port[cols.conn[x]]}
    _put(out, "linkgrad.link_probability", cols.link_probability(x, parent))
    _put(out, "linkgrad.network_delay_s", cols.network[x])
    return out


def _client_span(x: int, parent: int, reply: int | None, owner: int, cols: _Columns,
                 trace_id: int) -> _Open:
    attributes = _common(x, parent, cols)
    callee = cols.nodes[cols.dst[x]]
    attributes["peer.service"] = callee
    attributes["server.address"] = cols.host_of[cols.dst[x]]
    if parent >= 0:
        _put(attributes, "linkgrad.node_delay_s", cols.send[x] - cols.arrival(parent))
    end = None
    if reply is not None:
        end = cols.arrival(reply)
        _put(attributes, "linkgrad.reply_network_delay_s", cols.network[reply])
    return _Open(_span_id(trace_id, x, "client"), owner, x, f"{cols.nodes[cols.src[x]]}->"
                 f"{callee}:{cols.port[cols.conn[x]]}", "client", cols.nodes[cols.src[x]],
                 cols.host_of[cols.src[x]], cols.send[x], end, attributes)


def _server_span(x: int, parent: int, reply: int | None, reply_parent: int,
                 parent_span: int | None, cols: _Columns, trace_id: int) -> _Open:
    attributes = _common(x, parent, cols)
    if cols.client[cols.src[x]]:
        attributes["client.port"] = cols.client_port[cols.conn[x]]
    end = None
    if reply is not None and math.isfinite(cols.send[reply]):
        end = cols.send_end[reply] if math.isfinite(cols.send_end[reply]) else cols.send[reply]
        # the node's own time before it replied (`patterns.Hop.node_delay_s` of the reply)
        _put(attributes, "linkgrad.node_delay_s",
             cols.send[reply] - cols.arrival(reply_parent))
        _put(attributes, "linkgrad.reply_network_delay_s", cols.network[reply])
    else:
        attributes["linkgrad.reply_seen"] = False
    node = cols.nodes[cols.dst[x]]
    return _Open(_span_id(trace_id, x, "server"), parent_span, x,
                 f"{node}:{cols.port[cols.conn[x]]}", "server", node,
                 cols.host_of[cols.dst[x]], cols.recv[x], end, attributes)


def _close(spans: list[_Open]) -> int:
    """Ends for spans without one (their children's last end, else their start), then each
    server span moved or cut into its call's client span, parents first. Returns how many
    were moved."""
    latest: dict[int, float] = {}  # per span, its children's last end
    for i in range(len(spans) - 1, -1, -1):  # children after their parents
        s = spans[i]
        if s.end_s is None:
            s.end_s = max(s.start_s, latest.get(i, s.start_s))
        if s.parent is not None:
            latest[s.parent] = max(latest.get(s.parent, s.end_s), s.end_s)
    moved = 0
    for s in spans:
        p = None if s.parent is None else spans[s.parent]
        if p is None or p.kind != "client" or p.message != s.message:
            # a call can outlive what it was made for (an asynchronous one does); a call
            # into an untraced node holds that node's calls' server spans as it will
            continue
        # the two ends of one call: a server span outside its client span is the clocks'
        start, end, p_end = s.start_s, _end(s), _end(p)
        if end - start > p_end - p.start_s:
            start, end = p.start_s, p_end
        elif start < p.start_s:
            start, end = p.start_s, end + (p.start_s - start)
        elif end > p_end:
            start, end = start - (end - p_end), p_end
        if (start, end) != (s.start_s, s.end_s):
            s.attributes["linkgrad.clock_moved_s"] = round(start - s.start_s, 9)
            s.start_s, s.end_s = start, end
            moved += 1
    return moved


def _end(s: _Open) -> float:
    return s.start_s if s.end_s is None else s.end_s


def _put(attributes: dict[str, AttributeValue], key: str, value: float) -> None:
    if math.isfinite(value):
        attributes[key] = round(value, 9)


def _ns(t: float) -> int:
    return round(t * 1e9)


def _trace_id(cols: _Columns, root: int) -> int:
    """From the request's connection and its arrival: the same request, the same id."""
    key = (f"{cols.host_of[cols.dst[root]]}|{cols.port[cols.conn[root]]}|"
           f"{cols.client_port[cols.conn[root]]}|{_ns(cols.recv[root])}")
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=16).digest()) or 1


def _span_id(trace_id: int, message: int, kind: str) -> int:
    key = trace_id.to_bytes(16) + f"|{message}|{kind}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest()) or 1

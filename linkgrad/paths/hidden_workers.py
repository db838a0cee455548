"""Workers a server reaches by a way the trace does not see, folded into that server's node.

Apache hands a request to Passenger's Ruby processes, nginx to PHP-FPM or gunicorn, over a Unix
socket; the packet capture sees the request arrive at the server and the worker's calls to the
database leave, but nothing between them. As separate nodes, the server's path would end at
itself and the worker's calls would be roots of their own. A worker is recognised by what the
trace does show: a process that never listens (a client, WAP5 §2.5.1), on the host of a server,
that calls others than that server, and whose calls fall, nearly all of them, while that server
holds a request open. Its node is then folded into the server's (named `host/server+worker`),
so linking offers its calls to the server's requests; each fold is reported, with the share of
calls that fell inside the server's requests.

An independent client on the same host (a load generator, a cron job) calls whether or not the
server is busy, and a server's requests rarely cover it; on a host busy enough that they always
do, such a client's calls are offered to the requests too, and linking judges them by timing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from linkgrad.paths.messages import Connections, Trace

__all__ = [
    "MIN_CALLS",
    "MIN_COVERED",
    "Fold",
    "covered_share",
    "find_hidden_workers",
    "fold_hidden_workers",
    "open_spans",
]

MIN_CALLS = 10  # a worker's calls before its timing is believed
MIN_COVERED = 0.95  # the share of them that must fall inside the server's requests


@dataclass(frozen=True)
class Fold:
    worker: str
    into: str
    calls: int
    covered: float  # the share of the worker's calls made while the server held a request


def open_spans(trace: Trace, server: int) -> tuple[np.ndarray, np.ndarray]:
    """The union of the times `server` held a request open (received, not yet answered): sorted,
    disjoint [start, end) spans on the server's clock."""
    m = trace.messages
    is_reply = trace.is_reply()
    at_server = np.where(is_reply, m.send_s, m.recv_s)
    mine = np.flatnonzero(trace.connections.server_node[m.conn] == server)
    order = mine[np.lexsort((at_server[mine], m.conn[mine]))]
    req, rep = order[:-1], order[1:]
    pair = (m.conn[req] == m.conn[rep]) & ~is_reply[req] & is_reply[rep]
    start, end = at_server[req[pair]], at_server[rep[pair]]
    keep = np.isfinite(start) & np.isfinite(end) & (end >= start)
    start, end = start[keep], end[keep]
    if not len(start):
        return start, end
    by = np.argsort(start, kind="stable")
    start, end = start[by], np.maximum.accumulate(end[by])
    new = np.ones(len(start), dtype=bool)
    new[1:] = start[1:] > end[:-1]  # a span starts where no earlier one still runs
    firsts = np.flatnonzero(new)
    return start[firsts], np.maximum.reduceat(end, firsts)


def covered_share(times_s: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> float:
    """The share of `times_s` inside one of the disjoint sorted spans."""
    if not len(times_s):
        return 0.0
    at = np.searchsorted(starts, times_s, side="right") - 1
    inside = (at >= 0) & (times_s < ends[np.maximum(at, 0)])
    return float(inside.mean())


def find_hidden_workers(trace: Trace) -> list[tuple[int, int, Fold]]:
    """(worker, server, fold) for each client node that is a server's hidden worker (the
    fold names the server's node as it was)."""
    m = trace.messages
    clients = trace.clients
    is_reply = trace.is_reply()
    servers = np.flatnonzero(~clients)
    spans: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per server, once
    found = []
    for worker in np.flatnonzero(clients):
        host = trace.node_host[worker]
        local = [s for s in servers if trace.node_host[s] == host]
        calls = np.flatnonzero((m.src == worker) & ~is_reply)
        sent = m.send_s[calls]
        sent = sent[np.isfinite(sent)]
        if not local or len(sent) < MIN_CALLS:
            continue
        best = None
        for server in local:
            if np.any(m.dst[calls] == server):  # it calls the server: its client, no worker
                continue
            if server not in spans:
                spans[server] = open_spans(trace, server)
            share = covered_share(sent, *spans[server])
            if share >= MIN_COVERED and (best is None or share > best[1]):
                best = (server, share)
        if best is not None:
            server, share = best
            found.append((int(worker), int(server), Fold(
                trace.nodes[worker], trace.nodes[server], len(sent), round(share, 4))))
    return found


def fold_hidden_workers(trace: Trace) -> tuple[Trace, list[Fold]]:
    """The trace with each hidden worker's messages and connections moved to its server's
    node, renamed `host/server+worker` (the worker's own node keeps its name, and nothing)."""
    found = find_hidden_workers(trace)
    if not found:
        return trace, []
    into = np.arange(len(trace.nodes))
    names = list(trace.nodes)
    for worker, server, _ in found:
        into[worker] = server
    for server in {s for _, s, _ in found}:
        workers = [trace.nodes[w].split("/", 1)[-1] for w, s, _ in found if s == server]
        names[server] = "+".join([trace.nodes[server], *workers])
    folds = [replace(f, into=names[s]) for _, s, f in found]
    m, c = trace.messages, trace.connections
    messages = replace(m, src=into[m.src], dst=into[m.dst])
    connections = Connections(into[c.client_node], into[c.server_node], c.client_port,
                              c.server_port, c.opened)
    # only nodes change: the messages keep their time order
    return Trace(messages, connections, tuple(names), trace.node_host, trace.hosts), folds

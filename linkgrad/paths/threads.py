"""Which nodes serve one request per thread, from the threads the tracer saw.

Apache prefork, PHP-FPM, Passenger and most JDBC thread pools give each request a process or
thread of its own until it is answered: the thread that received a request is the one that
makes its calls, and nothing else runs on it meanwhile (vPath, OSDI 2010, used this to link
messages exactly). An event-driven server (nginx, Node, uvicorn) serves many requests on one
thread at once, and its threads say nothing about which call belongs to which request. So a
node's threads are used by the linker only where its own trace shows the first kind: each
request answered by the thread that received it, and its requests answered in the order
they arrived (a few exceptions allowed for a tracer's missed events). Requests may overlap
on a thread: one that arrives while every worker is busy waits in the listen backlog, and
the thread that takes it is known from its first read, after it has answered the one
before; but a thread answers them first come, first served. An event loop interleaves
requests of different lengths and answers a short one that came later first. (One that
only ever serves requests of one length in turn looks like a prefork server, and then
serving the oldest open request first is what it does.) A loaded prefork server breaks that
order now and then (MediaWiki's Apache at 20 requests/s: 14 of 584 requests, 2.4%): a
few exceptions cost those requests their trees, where a node not believed loses them all.
An event loop breaks it for a large share. And its calls must leave on the
threads that received its requests: a server that hands requests to a pool of other threads
or processes (Passenger's Ruby processes behind Apache's threads, folded into one node by
`hidden_workers`) calls from threads that never held a request.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from linkgrad.paths.messages import NO_THREAD, Trace

__all__ = [
    "MAX_EXCEPTIONS",
    "MAX_OUT_OF_ORDER",
    "MIN_REQUESTS",
    "one_request_per_thread",
    "worker_threads",
]

MIN_REQUESTS = 10  # a node's requests with known threads before its threads are believed
MAX_EXCEPTIONS = 0.01  # the share of them that may break the pattern
MAX_OUT_OF_ORDER = 0.05  # the share a thread may answer before one that came earlier


def one_request_per_thread(trace: Trace) -> np.ndarray:
    """Per node, whether it serves one request per thread (module doc)."""
    m = trace.messages
    n_nodes = len(trace.nodes)
    is_reply = trace.is_reply()
    at_server = np.where(is_reply, m.send_s, m.recv_s)  # both on the server's clock
    order = np.lexsort((at_server, m.conn))
    req, rep = order[:-1], order[1:]
    pair = (m.conn[req] == m.conn[rep]) & ~is_reply[req] & is_reply[rep]
    req, rep = req[pair], rep[pair]
    start, end = m.recv_s[req], m.send_s[rep]
    node, thread = m.dst[req], m.recv_thread[req]
    known = np.isfinite(start) & np.isfinite(end) & (thread != NO_THREAD) & (
        m.send_thread[rep] != NO_THREAD)
    req, rep, start, end, node, thread = (a[known] for a in (req, rep, start, end, node,
                                                              thread))
    answered_by_other = m.send_thread[rep] != thread
    by = np.lexsort((start, thread, node))
    node_s, thread_s, end_s = node[by], thread[by], end[by]
    key = node_s.astype(np.int64) * (1 << 32) + thread_s
    same = key[1:] == key[:-1]
    overlaps = np.zeros(len(by), dtype=bool)
    overlaps[1:] = same & (end_s[1:] < end_s[:-1])  # answered before one that came earlier
    requests = np.bincount(node, minlength=n_nodes)
    by_other = np.bincount(node, answered_by_other.astype(float), minlength=n_nodes)
    out_of_order = np.bincount(node_s, overlaps.astype(float), minlength=n_nodes)
    serving = np.unique(key)
    calls = np.flatnonzero(~is_reply & (m.send_thread != NO_THREAD))
    call_key = m.src[calls].astype(np.int64) * (1 << 32) + m.send_thread[calls]
    strays = np.bincount(m.src[calls], (~np.isin(call_key, serving)).astype(float),
                         minlength=n_nodes)
    called = np.bincount(m.src[calls], minlength=n_nodes)
    return ((requests >= MIN_REQUESTS) & (by_other <= MAX_EXCEPTIONS * requests)
            & (out_of_order <= MAX_OUT_OF_ORDER * requests)
            & (strays <= MAX_EXCEPTIONS * np.maximum(called, 1)))


def worker_threads(trace: Trace, nodes: Collection[int]) -> list[frozenset[int]]:
    """Per node of `nodes` (servers a hidden worker was folded into: `hidden_workers`), the
    threads that call for requests they never received there and serve one at a time: the
    worker processes the server hands its requests to unseen (Passenger's Ruby processes,
    PHP-FPM's children, gunicorn's sync workers behind a Unix socket). One at a time: a
    worker's call leaves after the answer to its previous one came back, bar a few
    exceptions; an event loop (Node behind nginx) calls for one request while waiting on
    another's answer, and is no such worker (nor, conservatively, is a worker that makes
    parallel calls: its threads then say too little to bind its calls). Other
    nodes have none: a thread pool inside a server (a Java executor) may run one request's
    task, then another's while the first is still open."""
    m = trace.messages
    is_reply = trace.is_reply()
    receiving = np.flatnonzero(~is_reply & (m.recv_thread != NO_THREAD))
    receivers = set(zip(m.dst[receiving].tolist(), m.recv_thread[receiving].tolist(),
                        strict=True))
    # each call's answer: the next message on its connection, if a reply
    by_conn = np.lexsort((np.where(is_reply, m.recv_s, m.send_s), m.conn))
    answered_s = np.full(len(m), np.nan)
    call, nxt = by_conn[:-1], by_conn[1:]
    pair = (m.conn[call] == m.conn[nxt]) & ~is_reply[call] & is_reply[nxt]
    answered_s[call[pair]] = m.recv_s[nxt[pair]]
    calls = np.flatnonzero(~is_reply & (m.send_thread != NO_THREAD) & np.isfinite(m.send_s)
                           & np.isin(m.src, np.fromiter(nodes, dtype=np.int64)))
    workers: list[set[int]] = [set() for _ in trace.nodes]
    order = calls[np.lexsort((m.send_s[calls], m.send_thread[calls], m.src[calls]))]
    node, thread, sent = m.src[order], m.send_thread[order], m.send_s[order]
    if not len(order):
        return [frozenset() for _ in trace.nodes]
    starts = np.flatnonzero(np.r_[True, (node[1:] != node[:-1]) | (thread[1:] != thread[:-1])])
    for a, b in zip(starts, [*starts[1:], len(order)], strict=True):
        key = (int(node[a]), int(thread[a]))
        if key in receivers or b - a < MIN_REQUESTS:
            continue
        before = answered_s[order[a:b - 1]]  # the answer to the call before each
        early = sent[a + 1:b] < before  # called while still waiting
        if early.sum() <= MAX_EXCEPTIONS * (b - a):
            workers[key[0]].add(key[1])
    return [frozenset(w) for w in workers]

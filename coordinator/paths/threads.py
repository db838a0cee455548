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
serving the oldest open request first is what it does.)
"""

from __future__ import annotations

import numpy as np

from coordinator.paths.messages import NO_THREAD, Trace

MIN_REQUESTS = 10  # a node's requests with known threads before its threads are believed
MAX_EXCEPTIONS = 0.01  # the share of them that may break the pattern


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
    exceptions = (np.bincount(node, answered_by_other.astype(float), minlength=n_nodes)
                  + np.bincount(node_s, overlaps.astype(float), minlength=n_nodes))
    return (requests >= MIN_REQUESTS) & (exceptions <= MAX_EXCEPTIONS * requests)

"""A server that hands its requests to worker processes over a Unix socket (Passenger,
PHP-FPM): the workers are folded into its node, and each worker's calls stay with the request
it serves."""

from __future__ import annotations

import numpy as np
import pytest

from linkgrad.paths.accuracy import best_instances, tree_accuracy
from linkgrad.paths.analysis import analyse, client_requests
from linkgrad.paths.hidden_workers import (
    covered_share,
    find_hidden_workers,
    fold_hidden_workers,
    open_spans,
)
from linkgrad.paths.instances import path_instances
from linkgrad.paths.messages import Connections, Messages, Trace
from linkgrad.paths.structural import context_probabilities
from linkgrad.paths.threads import one_request_per_thread, worker_threads
from linkgrad.paths.wap5 import LinkingSettings
from testbed.synthetic_paths import busy_server, generate, handed_to_workers

SETTINGS = LinkingSettings(window_s=2.0)


def _passenger(open_contexts: float = 8, rate: float = 20, queries: int = 30, seed: int = 3):
    return handed_to_workers(generate(busy_server(open_contexts, rate, queries), rate, 8,
                                      seed=seed), "web")


def _right(s, trace: Trace, worker_nodes: set[int] | None = None) -> tuple[int, int]:
    probs = context_probabilities(trace, SETTINGS, worker_nodes=worker_nodes or set())
    return tree_accuracy(best_instances(path_instances(probs, SETTINGS)), s.true_parent,
                         s.request)


def test_the_worker_is_found_and_folded_into_its_server():
    s = _passenger()
    ((worker, server, fold),) = find_hidden_workers(s.trace)
    assert (s.trace.nodes[worker], s.trace.nodes[server]) == ("web-worker", "web")
    assert fold.covered == pytest.approx(1.0)
    folded, folds = fold_hidden_workers(s.trace)
    assert folds[0].into == "web+web-worker"
    assert folded.nodes[server] == "web+web-worker"
    assert not np.any(folded.messages.src == worker)
    assert not np.any(folded.messages.dst == worker)
    # the folded node's calls leave from threads that never held a request: no prefork
    assert not one_request_per_thread(folded)[server]
    assert len(worker_threads(folded, {server})[server]) > 10
    assert worker_threads(folded, set())[server] == frozenset()


def test_unfolded_a_worker_s_calls_are_roots_folded_they_are_linked_exactly():
    s = _passenger()
    right, total = _right(s, s.trace)
    assert total > 100
    assert right == 0  # the server's requests have no calls; the worker's are roots
    folded, folds = fold_hidden_workers(s.trace)
    server = folded.nodes.index(folds[0].into)
    right, total = _right(s, folded, {server})
    # a request's first call may go to another that arrived within its worker's start-up
    # (both fresh): a swap, and only the replies' timing tells them apart
    assert right >= 0.95 * total


def test_an_event_loop_behind_the_socket_is_no_one_request_worker():
    # Node behind nginx: one thread calls for every request, before the answers to others
    s = _passenger()
    folded, folds = fold_hidden_workers(s.trace)
    server = folded.nodes.index(folds[0].into)
    m = folded.messages
    calls = (m.src == server) & ~folded.is_reply()
    one_thread = Messages(m.send_s, m.recv_s, m.src, m.dst, m.conn, m.size_bytes,
                          np.where(calls, 7777, m.send_thread), m.recv_thread)
    loop = Trace(one_thread, folded.connections, folded.nodes, folded.node_host,
                 folded.hosts)
    assert worker_threads(loop, {server})[server] == frozenset()


def test_folded_a_worker_s_calls_are_no_client_requests():
    # the web log's requests are matched against the folded trace's client requests
    s = _passenger()
    folded, _ = fold_hidden_workers(s.trace)
    assert len(client_requests(folded)) == len(np.unique(s.request))
    assert len(client_requests(s.trace)) > 10 * len(client_requests(folded))


def test_analyse_reports_the_fold():
    result = analyse(_passenger(seed=4).trace, budget=None)
    (fold,) = result.folded
    assert (fold.worker, fold.into) == ("web-worker", "web+web-worker")
    assert fold.calls > 100


def _trace(rows, conns, nodes, node_host, hosts=("a", "b")) -> Trace:
    send, recv, src, dst, conn = (np.array(col, dtype=float if k < 2 else np.int64)
                                  for k, col in enumerate(zip(*rows, strict=True)))
    c = Connections(*(np.array(col) for col in zip(*conns, strict=True)))
    return Trace.sorted(Messages(send, recv, src, dst, conn, np.full(len(rows), 100)), c,
                        nodes, node_host, hosts)


def test_a_client_that_calls_while_the_server_is_idle_is_no_worker():
    # host a: a server (node 0) answering short requests from b's client (node 2) once a
    # second, and a load generator (node 1) calling b's server (node 3) in between
    rows = []
    for k in range(20):
        t = float(k)
        rows += [(t, t + 0.001, 2, 0, 0), (t + 0.002, t + 0.003, 0, 2, 0)]
        rows += [(t + 0.5, t + 0.501, 1, 3, 1), (t + 0.51, t + 0.511, 3, 1, 1)]
    trace = _trace(rows, [(2, 0, 40000, 22), (1, 3, 40001, 80)],
                   ("a/sshd", "a/loadgen", "b/ssh", "b/nginx"), [0, 0, 1, 1])
    assert find_hidden_workers(trace) == []
    assert fold_hidden_workers(trace)[1] == []


def test_spans_join_overlapping_requests():
    starts, ends = np.array([0.0, 5.0]), np.array([3.0, 6.0])
    assert covered_share(np.array([1.0, 2.9, 3.5, 5.5]), starts, ends) == 0.75
    rows = [(0.0, 0.0, 1, 0, 0), (1.0, 2.0, 1, 0, 1), (3.0, 3.0, 0, 1, 0),
            (2.5, 2.5, 0, 1, 1)]
    trace = _trace(rows, [(1, 0, 40000, 80), (1, 0, 40001, 80)], ("a/srv", "b/cli"),
                   [0, 1])
    s, e = open_spans(trace, 0)
    assert (s.tolist(), e.tolist()) == ([0.0], [3.0])


def test_a_free_worker_is_offered_the_oldest_waiting_requests_only():
    from linkgrad.paths.contexts import WAITING_OFFERED, ContextWalker

    walker = ContextWalker(window_s=2.0, fanout_s=0.001, afterward_s=0.001)
    for k in range(5):  # five requests queued for the pool, none started
        walker.request_arrived(conn=k, msg=k, t=1.0 + 0.01 * k)
    offered = walker.ready(1.5, worker=7)
    assert [c.latest for c in offered] == list(range(WAITING_OFFERED))
    walker.call_sent(conn=100, parent=0, t=1.5, worker=7)  # worker 7 takes the oldest
    assert [c.latest for c in walker.ready(1.501, worker=8)] == [1, 2][:WAITING_OFFERED]


def _pool_begun_busy(gap_s: float, seen_leaving: bool, backlog_answered: bool = True,
                     late_unseen_s: float | None = None, late_seen_leaving: bool = True
                     ) -> tuple[Trace, list[int], list[int]]:
    """One Passenger worker (thread 500 of the folded node 0) with a persistent database
    connection, captured while it served a request from before the trace (on connection
    0, whose set-up the trace did not see; `seen_leaving`: the client's capture, begun
    first, saw it leave; `backlog_answered`: its reply is in the trace) with a request R of
    the trace (connection 1) waiting behind it; then ten more requests served in turn. The
    backlog's second query leaves `gap_s` after R arrived. `late_unseen_s`: then, a request
    the server's capture missed (the client's saw it leave) answered at that time (seen
    leaving by the server's capture if `late_seen_leaving`, else only arriving). Returns
    the trace, R's messages (request, its two queries and their answers, its reply) and the
    backlog's two queries."""
    rows: list[tuple[float, float, int, int, int, int, int]] = []  # ..., send/recv thread
    if seen_leaving:
        rows.append((-0.05, np.nan, 2, 0, 0, -1, -1))

    def query(t: float) -> int:
        rows.append((t, t + 0.0005, 0, 1, 2, 500, -1))
        rows.append((t + 0.001, t + 0.0015, 1, 0, 2, -1, 500))
        return len(rows) - 2
    backlog = [query(0.0)]
    rows.append((0.010, 0.010, 2, 0, 1, -1, 7))  # R arrives, waits for the worker
    r = [len(rows) - 1]
    backlog.append(query(0.010 + gap_s))
    if backlog_answered:  # the backlog's reply: the worker is free
        rows.append((0.040, 0.040, 0, 2, 0, 8, -1))
    r += [q := query(0.045), q + 1, (q := query(0.050)), q + 1]
    rows.append((0.060, 0.060, 0, 2, 1, 7, -1))
    r.append(len(rows) - 1)
    conns = [(2, 0, 40000, 80, False), (2, 0, 40001, 80, True), (0, 1, 50000, 5432, False)]
    for k in range(10):  # requests served in turn, each on a connection of its own
        t = 0.2 + 0.1 * k
        conn = len(conns)
        conns.append((2, 0, 40002 + k, 80, True))
        rows.append((t, t, 2, 0, conn, -1, 7))
        query(t + 0.004)
        query(t + 0.009)
        rows.append((t + 0.015, t + 0.015, 0, 2, conn, 7, -1))
    if late_unseen_s is not None:
        conns.append((2, 0, 40100, 80, True))
        rows.append((late_unseen_s - 0.1, np.nan, 2, 0, len(conns) - 1, -1, -1))
        rows.append((late_unseen_s if late_seen_leaving else np.nan, late_unseen_s, 0, 2,
                     len(conns) - 1, 7, -1))
    send, recv = (np.array([row[k] for row in rows]) for k in (0, 1))
    src, dst, conn, send_thread, recv_thread = (
        np.array([row[k] for row in rows], dtype=np.int64) for k in range(2, 7))
    c = Connections(*(np.array([row[k] for row in conns]) for k in range(5)))
    trace = Trace(Messages(send, recv, src, dst, conn, np.full(len(rows), 100), send_thread,
                           recv_thread), c, ("a/apache2+ruby", "b/postgres", "c/client"),
                  np.array([0, 1, 2]), ("a", "b", "c"))
    return trace, r, backlog


@pytest.mark.parametrize("seen_leaving", [False, True])
@pytest.mark.parametrize("gap_s", [0.002, 0.012])
def test_a_pool_captured_busy_serves_its_backlog_before_the_trace_s_requests(gap_s,
                                                                             seen_leaving):
    """The request a worker serves when the capture begins is unseen by its server but for
    its reply: the worker's calls until that reply are not the waiting request's, however
    soon after its arrival they leave, and its calls after it are, however long it
    waited."""
    trace, r, backlog = _pool_begun_busy(gap_s, seen_leaving)
    assert worker_threads(trace, {0})[0] == frozenset({500})
    probs = context_probabilities(trace, SETTINGS, worker_nodes={0})
    best = best_instances(path_instances(probs, SETTINGS))
    assert sorted(best[r[0]].messages) == sorted(r)
    parent = probs.most_likely_parent()
    assert all(parent[q] == -1 or parent[q] not in r for q in backlog)


@pytest.mark.parametrize(("late_s", "server_saw_it"), [(4.0, True), (1.25, False)])
def test_a_late_reply_to_a_request_the_server_missed_keeps_no_chain_from_the_start_going(
        late_s, server_saw_it):
    """A reply whose request the server's capture lost, more than the window after the trace
    began, or one the server's capture did not see leave either (it had stopped), is no sign
    that the chain a worker was on when the trace began is still going: each request after
    the backlog gets its own worker's calls."""
    trace, _, _ = _pool_begun_busy(0.002, False, backlog_answered=False, late_unseen_s=late_s,
                                   late_seen_leaving=server_saw_it)
    probs = context_probabilities(trace, SETTINGS, worker_nodes={0})
    best = best_instances(path_instances(probs, SETTINGS))
    m = trace.messages
    requests = [k for k in range(len(m)) if m.src[k] == 2 and np.isfinite(m.recv_s[k])]
    assert len(requests) == 11
    assert all(len(best[k].messages) == 6 for k in requests[1:])  # request, 2 calls, reply


def test_a_worker_on_a_request_begins_none_of_the_requests_its_server_never_saw():
    """While a request of the trace is open on it, a hidden worker's call is that request's,
    not the start of one of the replies its server owes to requests it never saw."""
    from linkgrad.paths.contexts import ContextWalker
    from linkgrad.paths.structural import _worker_options

    walker = ContextWalker(window_s=2.0, fanout_s=0.001, afterward_s=0.001, queues=True)
    walker.request_arrived(conn=0, msg=0, t=1.0)
    walker.call_sent(conn=100, parent=0, t=1.01, worker=7)
    walker.reply_arrived(conn=100, msg=2, t=1.02)
    ready = walker.ready(1.03, worker=7)
    assert [c.latest for c in ready] == [2]
    links = [(2, 1.0)]
    _, spontaneous = _worker_options([1.5], 1.03, 2.0, links, 0.5, ready, walker, 7)
    assert spontaneous == 0.0
    free = ContextWalker(window_s=2.0, fanout_s=0.001, afterward_s=0.001, queues=True)
    free.request_arrived(conn=0, msg=0, t=1.0)
    ready = free.ready(1.03, worker=7)
    _, spontaneous = _worker_options([1.5], 1.03, 2.0, [(0, 1.0)], 0.5, ready, free, 7)
    assert spontaneous > 0.0  # free, it may begin the one its server owes first


def _two_workers_queue() -> tuple[Trace, list[tuple[float, float]],
                                  list[tuple[float, float]]]:
    """Two Passenger workers (threads 500 and 501 of the folded node 0, each a persistent
    database connection) serving 30 requests as they come, each with its first query 2-5 ms
    after it arrives and its reply 1-2.6 ms after its last answer; then A1 and A2 keep
    both busy, B arrives while they are, and C just before they are done; worker 500 takes
    B, 501 C, a millisecond apart; the trace ends before their replies. Returns the trace
    and B's and C's messages, each as (sent, received)."""
    rows: list[tuple[float, float, int, int, int, int, int]] = []
    conns: list[tuple[int, int, int, int, bool]] = [(0, 1, 50000, 5432, False),
                                                    (0, 1, 50001, 5432, False)]

    def request(t: float) -> tuple[int, list[int]]:
        conns.append((2, 0, 40000 + len(conns), 80, True))
        rows.append((t, t, 2, 0, len(conns) - 1, -1, 7))
        return len(conns) - 1, [len(rows) - 1]

    def query(t: float, worker: int, mine: list[int]) -> None:
        rows.append((t, t + 0.0005, 0, 1, worker, 500 + worker, -1))
        rows.append((t + 0.001, t + 0.0015, 1, 0, worker, -1, 500 + worker))
        mine += [len(rows) - 2, len(rows) - 1]

    def reply(t: float, conn: int, mine: list[int]) -> None:
        rows.append((t, t, 0, 2, conn, 7, -1))
        mine.append(len(rows) - 1)
    for k in range(30):
        t = 0.1 * k
        conn, mine = request(t)
        query(t + 0.002 + 0.0005 * (k % 7), k % 2, mine)
        query(t + 0.007, k % 2, mine)
        reply(t + 0.0095 + 0.0004 * (k % 5), conn, mine)
    busy = [request(3.0), request(3.0005)]
    for w, (_, mine) in enumerate(busy):
        query(3.002 + 0.0005 * w, w, mine)
    _, b = request(3.005)
    for w, (_, mine) in enumerate(busy):
        query(3.006 + 0.0005 * w, w, mine)
    _, c = request(3.096)
    for w, (conn, mine) in enumerate(busy):
        query(3.100 + 0.0005 * w, w, mine)
        reply(3.103 + 0.0005 * w, conn, mine)
    for w, mine in enumerate([b, c]):  # the trace ends before their replies
        query(3.107 + 0.001 * w, w, mine)
        query(3.111 + 0.001 * w, w, mine)
    send, recv = (np.array([row[k] for row in rows]) for k in (0, 1))
    src, dst, conn, send_thread, recv_thread = (
        np.array([row[k] for row in rows], dtype=np.int64) for k in range(2, 7))
    connections = Connections(*(np.array([row[k] for row in conns]) for k in range(5)))
    trace = Trace.sorted(Messages(send, recv, src, dst, conn, np.full(len(rows), 100),
                                  send_thread, recv_thread), connections,
                         ("a/apache2+ruby", "b/postgres", "c/client"), np.array([0, 1, 2]),
                         ("a", "b", "c"))
    def keys(mine: list[int]) -> list[tuple[float, float]]:
        return sorted((rows[k][0], rows[k][1]) for k in mine)
    return trace, keys(b), keys(c)


def test_a_request_that_waited_for_a_busy_worker_is_timed_from_when_the_worker_was_free():
    """B waited 100 ms for a worker, C 11 ms: timed from their arrivals, the first worker's
    first call after its last request looks like C's (the pool's first calls come 2-5 ms
    after arrival); timed from that worker's last answer, both waited alike, and the pool
    takes B first."""
    trace, b, c = _two_workers_queue()
    probs = context_probabilities(trace, SETTINGS, worker_nodes={0})
    parent = probs.most_likely_parent()
    m = trace.messages
    at = {(float(m.send_s[k]), float(m.recv_s[k])): k for k in range(len(m))}
    for truth in (b, c):  # each request's first query hangs from it
        assert parent[at[truth[1]]] == at[truth[0]]

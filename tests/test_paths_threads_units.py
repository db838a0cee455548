"""Threads as a hard constraint: a node that serves one request per thread links each call
to its thread's request; an event loop's one thread is not believed."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from linkgrad.paths.accuracy import best_instances, tree_accuracy
from linkgrad.paths.contexts import ContextWalker
from linkgrad.paths.instances import path_instances
from linkgrad.paths.messages import NO_THREAD, Messages, Trace
from linkgrad.paths.structural import context_probabilities
from linkgrad.paths.threads import one_request_per_thread
from linkgrad.paths.wap5 import LinkingSettings
from testbed.synthetic_paths import busy_server, generate

SETTINGS = LinkingSettings(window_s=2.0)


def _right(s) -> tuple[int, int]:
    probs = context_probabilities(s.trace, SETTINGS)
    return tree_accuracy(best_instances(path_instances(probs, SETTINGS)), s.true_parent,
                         s.request)


def test_a_prefork_server_is_told_from_an_event_loop():
    prefork = generate(busy_server(20, 20), 20, 3, seed=2).trace
    # the client has no threads; the db is one thread serving queries of one length in
    # turn, which reads either way (threads module doc)
    assert one_request_per_thread(prefork).tolist()[:2] == [False, True]
    loop = generate(replace(busy_server(20, 20), threaded=frozenset()), 20, 3, seed=2).trace
    assert one_request_per_thread(loop).tolist()[:2] == [False, False]


def _with_threads(t: Trace, recv_thread: np.ndarray, send_thread: np.ndarray) -> Trace:
    m = t.messages
    return Trace(Messages(m.send_s, m.recv_s, m.src, m.dst, m.conn, m.size_bytes,
                          send_thread, recv_thread), t.connections, t.nodes, t.node_host,
                 t.hosts)


def test_a_few_requests_out_of_order_on_their_thread_leave_a_prefork_server_believed():
    """A loaded prefork server answers now and then a request before one that came earlier
    to its thread (2.4% on MediaWiki's Apache at 20 requests/s); an event loop's one thread
    does so all the time."""
    t = generate(busy_server(20, 20), 20, 20, seed=3).trace
    m = t.messages
    server = 1
    requests = np.flatnonzero(~t.is_reply() & (m.dst == server))
    replies = np.flatnonzero(t.is_reply() & (m.src == server))
    replies = replies[np.argsort(m.send_s[replies])]

    def reply_to(request: int) -> int:  # the server's next reply on its connection
        return int(next(r for r in replies if m.conn[r] == m.conn[request]
                        and m.send_s[r] > m.recv_s[request]))

    recv, send = m.recv_thread.copy(), m.send_thread.copy()
    moved = 0
    order = requests[np.argsort(m.recv_s[requests])]
    for before, after in itertools.pairwise(order):
        if moved >= 0.02 * len(order):
            break
        # the later request handed to the earlier's thread, answered while that one is
        # still open there: out of order on that thread, served whole by it
        if recv[before] != recv[after] and m.send_s[reply_to(after)] < \
                m.send_s[reply_to(before)]:
            recv[after] = send[reply_to(after)] = recv[before]
            moved += 1
    assert moved >= 0.015 * len(order)
    assert one_request_per_thread(_with_threads(t, recv, send))[server]
    one = np.where(m.dst == server, 7, recv)  # every request on one thread: an event loop
    assert not one_request_per_thread(_with_threads(t, one, np.where(m.src == server, 7,
                                                                     send)))[server]


def test_threads_not_traced_say_nothing():
    t = generate(busy_server(5, 20), 20, 3, seed=2).trace
    m = t.messages
    blind = Trace(Messages(m.send_s, m.recv_s, m.src, m.dst, m.conn, m.size_bytes),
                  t.connections, t.nodes, t.node_host, t.hosts)
    assert (blind.messages.send_thread == NO_THREAD).all()
    assert not one_request_per_thread(blind).any()


def test_a_thread_answering_another_s_request_is_no_prefork():
    t = generate(busy_server(5, 20), 20, 3, seed=2).trace
    m = t.messages
    send_thread = m.send_thread.copy()
    replies = np.flatnonzero(t.is_reply() & (m.src == 1))
    send_thread[replies[::20]] += 1  # 5% of the replies from another thread
    other = Trace(Messages(m.send_s, m.recv_s, m.src, m.dst, m.conn, m.size_bytes,
                           send_thread, m.recv_thread), t.connections, t.nodes, t.node_host,
                  t.hosts)
    assert not one_request_per_thread(other)[1]


def test_a_busy_prefork_server_is_linked_exactly_by_its_threads():
    # 200 requests open at once, 40 sequential queries each, on pooled connections: timing
    # alone gets no tree right (benchmarks/paths_busy_server.py), the threads all
    right, total = _right(generate(busy_server(200, 40), 40, 8, seed=5))
    assert total > 250
    assert right == total


def _prefork_walker() -> ContextWalker:
    return ContextWalker(window_s=2.0, fanout_s=0.0005, afterward_s=0.005, thread_bound=True)


def test_a_thread_that_answers_a_request_is_done_with_its_chain_from_before_the_trace():
    """Thread 7 was serving a request from before the trace (its calls root a chain); then it
    takes request 10 and answers it. Its work after that answer is request 10's, not the
    old chain's (which, left open, was the thread's own and took it)."""
    walker = _prefork_walker()
    walker.call_sent(conn=1, parent=None, t=0.0)  # the old request's query
    walker.reply_arrived(1, msg=2, t=0.001, thread=7)  # its rows: a chain rooted on 7
    walker.request_arrived(conn=3, msg=10, t=0.010, thread=7)
    assert [c.latest for c in walker.ready(0.011, thread=7)] == [10]
    walker.call_sent(conn=4, parent=10, t=0.011)
    walker.reply_arrived(4, msg=12, t=0.012, thread=7)
    assert walker.answer(3, 0.020) == 12
    assert [c.latest for c in walker.ready(0.100, thread=7)] == [12]


def test_a_request_queued_behind_its_thread_s_work_after_an_answer_shares_the_call():
    """Request 20 reached thread 7 while it served request 10 (the listen backlog); request
    10 is answered and the thread goes on working for it (MediaWiki's jobs): its next call
    may be either's, and is offered both, the queued one first."""
    walker = _prefork_walker()
    walker.request_arrived(conn=3, msg=10, t=0.0, thread=7)
    walker.call_sent(conn=4, parent=10, t=0.001)
    walker.reply_arrived(4, msg=12, t=0.002, thread=7)
    walker.request_arrived(conn=5, msg=20, t=0.003, thread=7)
    assert walker.answer(3, 0.010) == 12
    assert [c.latest for c in walker.ready(0.050, thread=7)] == [20, 12]
    walker.call_sent(conn=6, parent=20, t=0.050)  # once the queued one has begun, it alone
    walker.reply_arrived(6, msg=22, t=0.051, thread=7)
    assert [c.latest for c in walker.ready(0.100, thread=7)] == [22]


def test_a_request_waiting_in_the_backlog_past_the_window_is_kept_for_its_thread():
    """Request 10 reaches thread 7 and waits 3 s (the window is 2) while the thread serves
    request 20 on a kept-alive connection, which came later but began first: the thread's
    calls are 20's while it runs, then the waiting one's, not a root's."""
    walker = _prefork_walker()
    walker.request_arrived(conn=3, msg=10, t=0.0, thread=7)
    walker.request_arrived(conn=5, msg=20, t=0.001, thread=7)
    assert [c.latest for c in walker.ready(0.002, thread=7)] == [10, 20]
    walker.call_sent(conn=6, parent=20, t=0.002)
    walker.reply_arrived(6, msg=22, t=1.5, thread=7)  # a slow query
    assert [c.latest for c in walker.ready(2.9, thread=7)] == [22]  # the one begun
    assert walker.answer(5, 2.95) == 22
    assert [c.latest for c in walker.ready(3.0, thread=7)] == [10, 22]  # or 20 goes on


def test_a_waiting_request_whose_connection_carries_the_next_is_let_go():
    """Request 10's reply was lost (it never began as the trace saw it); the next request on
    its connection means it is over, so it is not kept waiting for ever, offered first."""
    walker = _prefork_walker()
    walker.request_arrived(conn=3, msg=10, t=0.0, thread=7)
    walker.request_arrived(conn=3, msg=20, t=5.0, thread=7)
    assert [c.latest for c in walker.ready(5.001, thread=7)] == [20]
    assert [c.latest for c in walker.ready(100.0, thread=7)] == []  # a minute: let go too

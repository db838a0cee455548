"""Causal-path analysis (linkgrad.paths) on hand-made and generated traces: WAP5 §5.1's
numbers, the structural linkers, instances and patterns, clock offsets."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from linkgrad.paths.accuracy import best_instances, tree_accuracy
from linkgrad.paths.candidates import Candidates, candidates, latest_parent_delay
from linkgrad.paths.clocks import clock_offsets
from linkgrad.paths.instances import ChildIndex, instances_from, path_instances
from linkgrad.paths.messages import Connections, Messages, Trace
from linkgrad.paths.patterns import aggregate
from linkgrad.paths.reconcile import HostRecord, HostTrace, reconcile
from linkgrad.paths.structural import context_probabilities, fcfs_probabilities
from linkgrad.paths.wap5 import (
    LinkingSettings,
    LinkProbabilities,
    causal_delay_means,
    wap5_probabilities,
)
from testbed.synthetic_paths import generate, three_tier

T0 = 1_700_000_000.0


def trace_of(rows: list[tuple[float, float, str, str, int]],
             conns: list[tuple[str, str, int, int]], nodes: tuple[str, ...]) -> Trace:
    """rows: (send, recv, src, dst, conn) with times relative to T0 (NaN: nil); conns:
    (client, server, client port, server port); each node on a host of its own name."""
    index = {n: i for i, n in enumerate(nodes)}
    m = Messages([T0 + r[0] for r in rows], [T0 + r[1] for r in rows],
                 [index[r[2]] for r in rows], [index[r[3]] for r in rows],
                 [r[4] for r in rows], [10] * len(rows))
    c = Connections([index[x[0]] for x in conns], [index[x[1]] for x in conns],
                    [x[2] for x in conns], [x[3] for x in conns])
    return Trace.sorted(m, c, nodes, np.arange(len(nodes)), nodes)


# Figure 5 of the paper: three calls into B (from X, Y, Z), then B→C; and earlier, four
# B→C calls each 1 ms after a message into B, so d_{B→C} = 1 ms.
NODES = ("X", "Y", "Z", "B", "C")
CONNS = [("X", "B", 40001, 80), ("Y", "B", 40002, 80), ("Z", "B", 40003, 80),
         ("B", "C", 40004, 5432)]


def figure5() -> Trace:
    rows = []
    for k in range(4):  # the warm-up: X→B then B→C 1 ms later, C answers
        t = 0.1 * k
        rows += [(t, t + 0.0001, "X", "B", 0), (t + 0.0011, t + 0.0012, "B", "C", 3),
                 (t + 0.0015, t + 0.0016, "C", "B", 3), (t + 0.002, t + 0.0021, "B", "X", 0)]
    t = 1.0  # arrivals at B at 1.000, 1.001, 1.002; B→C at 1.003
    rows += [(t - 0.0001, t, "X", "B", 0), (t + 0.0009, t + 0.001, "Y", "B", 1),
             (t + 0.0019, t + 0.002, "Z", "B", 2), (t + 0.003, t + 0.0031, "B", "C", 3)]
    return trace_of(rows, CONNS, NODES)


def test_candidates_are_the_messages_into_the_sender_within_x_latest_first() -> None:
    trace = figure5()
    links = candidates(trace, window_s=0.5)
    child = len(trace.messages) - 1  # the last B→C
    got = links.parent[links.start[child]:links.start[child + 1]]
    senders = [trace.nodes[trace.messages.src[p]] for p in got]
    assert senders == ["Z", "Y", "X"]  # within 0.5 s: only the three of Figure 5
    assert_allclose(links.delay_s[links.start[child]:links.start[child + 1]],
                    [0.001, 0.002, 0.003], atol=1e-6)


def test_wap5_step_2_weights_are_the_papers_exponential_with_y_4() -> None:
    """§5.1: weight exp(−λ(t4 − ti)) per parent, exp(−y) for spontaneous, normalised."""
    trace = figure5()
    settings = LinkingSettings(window_s=0.5, clients_spontaneous=False)
    probs = wap5_probabilities(trace, settings)
    d = causal_delay_means(trace, latest_parent_delay(trace, settings.window_s))
    b, c = trace.nodes.index("B"), trace.nodes.index("C")
    # step 1: the mean of the latest preceding delays of the five B→C messages
    assert_allclose(d[b, c], (4 * 0.001 + 0.001) / 5, rtol=1e-4)
    child = len(trace.messages) - 1
    p = probs.p[probs.links.start[child]:probs.links.start[child + 1]]
    w = np.exp(-np.array([0.001, 0.002, 0.003]) / d[b, c])
    total = w.sum() + math.exp(-4)
    assert_allclose(p, w / total, rtol=1e-3)
    assert_allclose(probs.p_spontaneous[child], math.exp(-4) / total, rtol=1e-3)


def test_an_untraced_node_s_messages_link_only_back_to_the_same_node() -> None:
    """§5.1: with B untraced, B→A may only be caused by an A→B message, on A's clock."""
    nan = math.nan
    rows = [(0.0, nan, "A", "B", 0), (0.001, nan, "C", "B", 1), (nan, 0.004, "B", "A", 0)]
    trace = trace_of(rows, [("A", "B", 40000, 80), ("C", "B", 40001, 80)], ("A", "B", "C"))
    links = candidates(trace, window_s=1.0)
    reply = int(np.flatnonzero(trace.messages.src == trace.nodes.index("B"))[0])
    got = links.parent[links.start[reply]:links.start[reply + 1]]
    assert [trace.nodes[trace.messages.src[p]] for p in got] == ["A"]
    assert_allclose(links.delay_s[links.start[reply]], 0.004, atol=1e-6)


def test_a_reply_is_linked_to_its_own_request_though_a_later_one_arrived() -> None:
    """A database answers a slow query after a fast one arrived on another connection:
    §5.1 takes the latest message into the database, the contexts the request it answers."""
    rows = [(0.0, 0.0001, "app", "db", 0),      # slow query on connection 0
            (0.05, 0.0501, "app", "db", 1),     # fast query on connection 1
            (0.0502, 0.0503, "db", "app", 1),   # its answer
            (0.1, 0.1001, "db", "app", 0)]      # the slow one's answer, 100 ms on
    trace = trace_of(rows, [("app", "db", 40000, 5432), ("app", "db", 40001, 5432)],
                     ("app", "db"))
    slow_answer = 3
    settings = LinkingSettings(window_s=1.0, clients_spontaneous=False)
    wap5 = wap5_probabilities(trace, settings).most_likely_parent()
    ours = context_probabilities(trace, settings).most_likely_parent()
    fcfs = fcfs_probabilities(trace, settings).most_likely_parent()
    assert wap5[slow_answer] == 1  # the latest query into db, the wrong one
    assert ours[slow_answer] == 0
    assert fcfs[slow_answer] == 0


def test_a_server_s_greeting_hangs_from_the_request_that_opened_the_connection() -> None:
    """MySQL speaks first: each request to web opens a connection to db, db greets, web
    authenticates, queries, answers. The greeting (a reply to no call) belongs to the
    request open at web; the authentication answers the greeting."""
    rows, conns = [], [("client", "web", 40000, 80)]
    for k in range(30):
        t, c = 0.05 * k, len(conns)
        conns.append(("web", "db", 41000 + k, 3306))
        rows += [(t, t + 0.0001, "client", "web", 0),
                 (t + 0.003, t + 0.0031, "db", "web", c),        # greeting, 3 ms on
                 (t + 0.00315, t + 0.00325, "web", "db", c),     # authentication
                 (t + 0.0034, t + 0.0035, "db", "web", c),       # OK
                 (t + 0.0036, t + 0.0037, "web", "db", c),       # a query
                 (t + 0.0042, t + 0.0043, "db", "web", c),       # its rows
                 (t + 0.0045, t + 0.0046, "web", "client", 0)]
    trace = trace_of(rows, conns, ("client", "web", "db"))
    settings = LinkingSettings(window_s=1.0)
    parent = context_probabilities(trace, settings).most_likely_parent()
    m = trace.messages
    order = np.argsort(m.send_s, kind="stable")
    for k in range(30):
        request, greeting, auth, ok, query, rows_, answer = order[7 * k:7 * k + 7].tolist()
        assert parent[greeting] == request, k
        assert parent[auth] == greeting, k
        assert parent[query] == ok, k
        assert parent[answer] == rows_, k
    best = best_instances(path_instances(context_probabilities(trace, settings), settings))
    assert all(len(inst.messages) == 7 for inst in best.values())


def test_a_reply_to_a_request_from_before_the_trace_joins_no_other_tree() -> None:
    """web answers, on connection 0 (open before the trace), a request it took before the
    trace began, while serving others that each open a connection to db (MySQL greets
    first): that reply is a root of its own, not a child of another request's rows (where
    §5.1 put it); each greeting, the first words on a connection opened in the trace, still
    hangs from its caller's request."""
    rows = [(0.0042, 0.0043, "web", "client", 0)]  # the reply to a request before the trace
    conns, opened = [("client", "web", 40000, 80), ("client", "web", 40001, 80)], [False, True]
    for k in range(30):
        t, c = 0.05 * k, len(conns)
        conns.append(("web", "db", 41000 + k, 3306))
        opened.append(True)
        rows += [(t, t + 0.0001, "client", "web", 1),
                 (t + 0.003, t + 0.0031, "db", "web", c),        # greeting
                 (t + 0.00315, t + 0.00325, "web", "db", c),     # authentication
                 (t + 0.0034, t + 0.0035, "db", "web", c),       # OK
                 (t + 0.0045, t + 0.0046, "web", "client", 1)]
    index = {"client": 0, "web": 1, "db": 2}
    m = Messages([T0 + r[0] for r in rows], [T0 + r[1] for r in rows],
                 [index[r[2]] for r in rows], [index[r[3]] for r in rows],
                 [r[4] for r in rows], [10] * len(rows))
    c = Connections([index[x[0]] for x in conns], [index[x[1]] for x in conns],
                    [x[2] for x in conns], [x[3] for x in conns], opened)
    nodes = ("client", "web", "db")
    trace = Trace.sorted(m, c, nodes, np.arange(3), nodes)
    settings = LinkingSettings(window_s=1.0)
    parent = context_probabilities(trace, settings).most_likely_parent()
    order = np.argsort(trace.messages.send_s, kind="stable").tolist()
    request, greeting, auth, ok, old_reply, reply = order[:6]
    assert trace.messages.conn[old_reply] == 0
    assert parent[old_reply] == -1
    assert wap5_probabilities(trace, settings).most_likely_parent()[old_reply] == ok
    assert parent[greeting] == request
    assert parent[auth] == greeting
    assert parent[reply] == ok


def test_the_reply_to_a_request_silent_past_the_window_is_left_to_wap5() -> None:
    """A request whose one query takes 3 s (the window is 1): its context is let go while
    it waits, but the request is in the trace, so its reply is no root: §5.1 hangs it from
    the query's answer, the latest message into web."""
    rows = [(0.0, 0.0001, "client", "web", 0),
            (0.001, 0.0011, "web", "db", 1),
            (2.5, 2.5001, "client", "web", 2),      # another request, whose query lets
            (2.501, 2.5011, "web", "db", 3),        # web's walk forget the silent one
            (2.502, 2.5021, "db", "web", 3),
            (2.503, 2.5031, "web", "client", 2),
            (3.0, 3.0001, "db", "web", 1),
            (3.001, 3.0011, "web", "client", 0)]
    c = Connections([0, 1, 0, 1], [1, 2, 1, 2], [40000, 41000, 40001, 41001],
                    [80, 5432, 80, 5432], [True, False, True, False])
    m = Messages([T0 + r[0] for r in rows], [T0 + r[1] for r in rows],
                 [{"client": 0, "web": 1, "db": 2}[r[2]] for r in rows],
                 [{"client": 0, "web": 1, "db": 2}[r[3]] for r in rows],
                 [r[4] for r in rows], [10] * len(rows))
    nodes = ("client", "web", "db")
    trace = Trace.sorted(m, c, nodes, np.arange(3), nodes)
    parent = context_probabilities(trace, LinkingSettings(window_s=1.0)).most_likely_parent()
    assert parent[7] == 6


def test_try_both_builds_the_two_instances_of_figure_4_with_their_probabilities() -> None:
    """Figure 4: links of p 0.8, 0.9 (taken), 0.2, 0.1 (left), 0.48 (try-both): p1 ≈ 0.270
    without the last, p2 ≈ 0.249 with it."""
    n = 6
    child = np.array([1, 2, 3, 4, 5])
    p = np.array([0.8, 0.9, 0.2, 0.1, 0.48])
    start = np.concatenate([[0, 0], np.arange(1, 6)])
    links = Candidates(child, np.zeros(5, dtype=np.int64), np.full(5, 0.001), start,
                       np.zeros(n))
    spontaneous = np.array([1.0, 0.2, 0.1, 0.8, 0.9, 0.52])
    probs = LinkProbabilities(links, p, spontaneous)
    settings = LinkingSettings()
    got = instances_from(0, ChildIndex(probs, settings), settings.max_try_both)
    assert [round(i.probability, 3) for i in got] == [0.27, 0.249]
    assert got[0].messages == (0, 1, 2)
    assert got[1].messages == (0, 1, 2, 5)


def test_clock_offsets_of_50_ms_are_recovered_within_a_tenth_of_a_millisecond() -> None:
    offsets = {"web": 0.05, "app1": -0.05, "db": 0.031, "client0": -0.02}
    s = generate(three_tier(), 30, 10, offsets_s=offsets, seed=3)
    got = clock_offsets(s.trace)
    hosts = s.trace.hosts
    ref = hosts[got.reference[hosts.index("web")]]
    for h in ("web", "app1", "db", "client0"):
        want = offsets.get(h, 0.0) - offsets.get(ref, 0.0)
        assert abs(got.offset_s[hosts.index(h)] - want) < 1e-4, h
    # the network delays with the offsets out are the generator's, 0.5 ms plus jitter
    delays = got.network_delay_s(s.trace)
    assert np.nanmin(delays) >= 0.0005 - 1e-6
    assert np.nanmedian(delays) < 0.0007


def test_at_low_load_context_linking_finds_every_request_s_tree() -> None:
    s = generate(three_tier(), 5, 40, seed=5)
    settings = LinkingSettings(window_s=1.0)
    best = best_instances(path_instances(context_probabilities(s.trace, settings), settings))
    right, total = tree_accuracy(best, s.true_parent, s.request)
    assert total > 150
    assert right == total


@pytest.mark.parametrize("rate", [50, 100])
def test_context_linking_beats_wap5_and_fcfs_under_concurrency(rate: float) -> None:
    s = generate(three_tier(apps=2), rate, 10, seed=7)
    settings = LinkingSettings(window_s=1.0)
    score = {}
    for name, linker in (("wap5", wap5_probabilities), ("fcfs", fcfs_probabilities),
                         ("ours", context_probabilities)):
        best = best_instances(path_instances(linker(s.trace, settings), settings))
        right, total = tree_accuracy(best, s.true_parent, s.request)
        score[name] = right / total
    assert score["ours"] > score["wap5"] + 0.1, score
    assert score["ours"] > score["fcfs"] + 0.05, score


def test_patterns_name_clients_and_ephemeral_ports_and_count_crossings() -> None:
    s = generate(three_tier(clients=3), 5, 40, seed=11)
    settings = LinkingSettings(window_s=1.0)
    per_root = path_instances(context_probabilities(s.trace, settings), settings)
    patterns = aggregate([inst[0] for inst in per_root], s.trace, clock_offsets(s.trace))
    # three client hosts, one name, no client port; every request's tree starts there
    from_clients = [p for p in patterns if p.hops[0].label == "CLIENT->web:80"]
    assert sum(p.count for p in from_clients) == int((s.true_parent < 0).sum())
    assert not any("client" in h.label for p in patterns for h in p.hops)
    view_item = [p for p in patterns if len(p.hops) == 8
                 and [h.label for h in p.hops].count("app1->db:5432") == 2]
    assert view_item, [p.key for p in patterns]
    pattern = view_item[0]
    assert pattern.crossings["app1->db"] == 2
    assert pattern.crossings["db->app1"] == 2
    assert pattern.crossings["web->app1"] == 1
    assert all(h.critical == 1.0 for h in pattern.hops)  # a chain: every hop is on it
    assert 0.0005 < pattern.hops[1].network_delay_s < 0.001
    assert sum(p.count for p in patterns) == len(per_root)


def test_a_connection_opened_on_the_path_adds_its_set_up_crossings() -> None:
    """A client's fresh connection to the web server (SYN, SYN-ACK before its request) and
    the web server's fresh one to a database that speaks first (SYN, SYN-ACK, and the ACK its
    greeting waits for), then a query on a pooled connection that opened before the trace."""
    rows = [(0.000, 0.0001, "C", "W", 0), (0.0010, 0.0011, "D", "W", 1),
            (0.0020, 0.0021, "W", "D", 1), (0.0030, 0.0031, "D", "W", 1),
            (0.0040, 0.0041, "W", "D", 2), (0.0050, 0.0051, "D", "W", 2),
            (0.0060, 0.0061, "W", "C", 0)]
    index = {n: i for i, n in enumerate("CWD")}
    m = Messages([T0 + r[0] for r in rows], [T0 + r[1] for r in rows],
                 [index[r[2]] for r in rows], [index[r[3]] for r in rows],
                 [r[4] for r in rows], [10] * len(rows))
    c = Connections([0, 1, 1], [1, 2, 2], [40000, 40001, 40002], [80, 3306, 3306],
                    [True, True, False])
    trace = Trace.sorted(m, c, ("C", "W", "D"), np.arange(3), ("C", "W", "D"))
    same, other = trace.set_up_crossings()
    assert same.tolist() == [1, 1, 0, 0, 0, 0, 0]  # the request, the greeting
    assert other.tolist() == [1, 2, 0, 0, 0, 0, 0]
    settings = LinkingSettings(window_s=1.0)
    per_root = path_instances(context_probabilities(trace, settings), settings)
    [pattern] = aggregate([inst[0] for inst in per_root], trace, clock_offsets(trace))
    assert len(pattern.hops) == 7, pattern.key
    assert pattern.crossings == {"C->W": 2, "W->C": 2, "W->D": 4, "D->W": 4}


def test_a_response_written_in_parts_waits_for_the_query_between_them() -> None:
    """The page's first bytes leave, then one more query, then its last bytes (MediaWiki):
    the client has its response only after that query's answer."""
    rows = [(0.000, 0.0001, "C", "W", 0), (0.001, 0.0011, "W", "D", 1),
            (0.002, 0.0021, "D", "W", 1), (0.003, 0.0061, "W", "C", 0),
            (0.004, 0.0041, "W", "D", 1), (0.005, 0.0051, "D", "W", 1)]
    index = {n: i for i, n in enumerate("CWD")}
    nan = float("nan")

    def trace(last_byte_s: float) -> Trace:
        m = Messages([T0 + r[0] for r in rows], [T0 + r[1] for r in rows],
                     [index[r[2]] for r in rows], [index[r[3]] for r in rows],
                     [r[4] for r in rows], [10] * len(rows),
                     send_end_s=[nan, nan, nan, T0 + last_byte_s, nan, nan])
        c = Connections([0, 1], [1, 2], [40000, 40001], [80, 3306])
        return Trace.sorted(m, c, ("C", "W", "D"), np.arange(3), ("C", "W", "D"))

    settings = LinkingSettings(window_s=1.0)
    for last_byte_s, calls in ((0.006, 2), (0.0031, 1)):  # in parts, or at once
        t = trace(last_byte_s)
        per_root = path_instances(context_probabilities(t, settings), settings)
        [pattern] = aggregate([inst[0] for inst in per_root], t, clock_offsets(t))
        assert pattern.crossings == {"C->W": 1, "W->C": 1, "W->D": calls, "D->W": calls}


def test_parallel_calls_a_client_library_sends_apart_are_both_the_request_s() -> None:
    """An event loop's handler that gathers a query and a peer call (the testbed's
    parallel_all): httpx builds the peer's request for about 0.8 ms after the query left,
    so the calls leave that far apart, and the reply waits for the slower answer. The peer
    call is the request's, and the slower answer is on the critical path: the peer in 9
    requests of 10, the database in the one whose query took longer."""
    rows = []
    for k in range(10):
        t = 0.3 * k
        db_s, peer_s = (0.25, 0.2) if k == 4 else (0.1 + 0.002 * k, 0.2 - 0.002 * k)
        db_back, peer_back = t + 0.0008 + db_s, t + 0.0016 + peer_s
        rows += [(t, t + 0.0001, "W", "A", 0), (t + 0.0006, t + 0.0007, "A", "D", 1),
                 (t + 0.0014, t + 0.0015, "A", "P", 2),
                 (db_back - 0.0001, db_back, "D", "A", 1),
                 (peer_back - 0.0001, peer_back, "P", "A", 2),
                 (max(db_back, peer_back) + 0.001, max(db_back, peer_back) + 0.0011,
                  "A", "W", 0)]
    trace = trace_of(rows, [("W", "A", 40001, 8000), ("A", "D", 40002, 5432),
                            ("A", "P", 40003, 8000)], ("W", "A", "D", "P"))
    settings = LinkingSettings(window_s=1.0)
    per_root = path_instances(context_probabilities(trace, settings), settings)
    patterns = aggregate([inst[0] for inst in per_root], trace, clock_offsets(trace))
    assert sum(p.count for p in patterns) == 10, [p.key for p in patterns]
    assert all(len(p.hops) == 6 for p in patterns), [p.key for p in patterns]  # both calls
    on_path = {link: sum(p.count * p.crossings.get(link, 0.0) for p in patterns)
               for link in ("A->D", "A->P")}
    assert on_path == {"A->D": 1, "A->P": 9}


def test_a_request_that_waited_in_the_backlog_matches_its_log_line_by_its_end() -> None:
    """The second request arrives 1 ms after the first, but the one worker starts it (the
    log's start) only at 50 ms: its answer's end still names its log line."""
    from linkgrad.paths.analysis import match_requests
    rows = [(0.000, 0.0001, "C", "W", 0), (0.001, 0.0011, "C", "W", 1),
            (0.010, 0.0101, "W", "C", 0), (0.070, 0.0701, "W", "C", 1)]
    trace = trace_of(rows, [("C", "W", 40000, 80), ("C", "W", 40001, 80)], ("C", "W"))
    start = T0 + np.array([0.0001, 0.050])
    end = T0 + np.array([0.0100, 0.0700])
    roots = {int(trace.messages.conn[r]): row for r, row in
             match_requests(trace, start, end).items()}
    assert roots == {0: 0, 1: 1}
    assert len(match_requests(trace, start)) == 1  # by arrival alone: the second is lost


def test_a_connection_is_opened_where_either_end_saw_its_syn() -> None:
    web, db = ("10.0.0.1", 40000), ("10.0.0.2", 3306)
    pooled = ("10.0.0.1", 40001)
    records = [HostRecord(web, db, True, 1, 11, T0, T0, False, "php"),
               HostRecord(pooled, db, True, 1, 11, T0 + 1, T0 + 1, False, "php")]
    client = HostTrace("web", frozenset({"10.0.0.1"}), frozenset(), records)
    server = HostTrace("db", frozenset({"10.0.0.2"}), frozenset({("0.0.0.0", 3306)}), [],
                       ((web, db, math.nan),))  # a trace saved before SYNs had times
    trace = reconcile([client, server])
    opened = {int(trace.connections.client_port[i]): bool(o)
              for i, o in enumerate(trace.connections.opened)}
    assert opened == {40000: True, 40001: False}


def test_a_client_port_reused_at_once_is_a_new_connection_from_its_syn() -> None:
    """PHP's connection per request to MariaDB: the server closes first and holds the
    TIME_WAIT, so the client may open the same endpoint pair again ms later. Each SYN starts
    a connection of its own; what came before the first is the one open when tracing began,
    on the client's clock and the server's (0.5 s apart) alike."""
    web, db = ("10.0.0.1", 40000), ("10.0.0.2", 3306)
    skew = 0.5
    syn_at = (T0 + 0.010, T0 + 0.020)
    seqs = ((1, 11), (5_000, 5_010), (90_000, 90_010))  # the ISN moves on with the clock
    at = (T0, T0 + 0.015, T0 + 0.025)
    client = HostTrace("web", frozenset({"10.0.0.1"}), frozenset(), [
        HostRecord(web, db, True, a, b, t, t, False, "php")
        for (a, b), t in zip(seqs, at, strict=True)],
        [(web, db, t) for t in syn_at])
    server = HostTrace("db", frozenset({"10.0.0.2"}), frozenset({("0.0.0.0", 3306)}), [
        HostRecord(db, web, False, a, b, t + skew + 1e-4, t + skew + 1e-4, False, "mariadbd")
        for (a, b), t in zip(seqs, at, strict=True)], [(web, db, t + skew) for t in syn_at])
    trace = reconcile([client, server])
    m, c = trace.messages, trace.connections
    assert len(c.opened) == 3
    assert [bool(c.opened[k]) for k in m.conn] == [False, True, True]
    assert len(set(m.conn.tolist())) == 3
    assert set(c.client_port.tolist()) == {40000}
    assert np.all(np.isfinite(m.send_s))  # every message matched at both ends
    assert np.all(np.isfinite(m.recv_s))


def test_a_retransmitted_syn_or_one_a_host_missed_splits_no_connection() -> None:
    """The client's SYN sent twice (the first unanswered), and the server's host tracing
    only from after the first connection's SYN: a request and its answer still fall in one
    connection, and a port reused later in the next."""
    web, db = ("10.0.0.1", 40000), ("10.0.0.2", 3306)
    request_at, answer_at, again_at = T0 + 0.5, T0 + 0.6, T0 + 2.0
    client = HostTrace("web", frozenset({"10.0.0.1"}), frozenset(), [
        HostRecord(web, db, True, 1, 11, request_at, request_at, False, "php"),
        HostRecord(web, db, False, 1, 21, answer_at, answer_at, False, "php"),
        HostRecord(web, db, True, 900, 910, again_at + 0.01, again_at + 0.01, False, "php"),
        HostRecord(web, db, False, 700, 720, again_at + 0.02, again_at + 0.02, False, "php")],
        [(web, db, T0), (web, db, T0 + 0.3), (web, db, again_at)])  # T0 + 0.3: a resend
    server = HostTrace("db", frozenset({"10.0.0.2"}), frozenset({("0.0.0.0", 3306)}), [
        HostRecord(db, web, False, 1, 11, request_at, request_at, False, "mariadbd"),
        HostRecord(db, web, True, 1, 21, answer_at, answer_at, False, "mariadbd"),
        HostRecord(db, web, False, 900, 910, again_at + 0.01, again_at + 0.01, False,
                   "mariadbd"),
        HostRecord(db, web, True, 700, 720, again_at + 0.02, again_at + 0.02, False,
                   "mariadbd")],
        [(web, db, again_at)])  # began tracing after the first SYN
    trace = reconcile([client, server])
    m = trace.messages
    by_time = np.argsort(m.send_s)
    conns = m.conn[by_time].tolist()
    assert conns[0] == conns[1] != conns[2] == conns[3]
    assert trace.connections.opened.all()


def test_connections_too_short_to_name_take_the_process_of_their_host_s_other_calls() -> None:
    """A PHP worker's connection per request to MySQL: the sniffer named one (it lived long
    enough), not the other two; they are the same process's, not a node of their own. On a
    host whose only process is known from its listening socket, that one."""
    web, db, cache = ("10.0.0.1", 80), ("10.0.0.2", 3306), ("10.0.0.3", 11211)
    front = ("10.0.0.9", 50000)

    def call(port: int, server: tuple[str, int], seq: int, process: str) -> list[HostRecord]:
        client = ("10.0.0.1", port)
        return [HostRecord(client, server, True, seq, seq + 10, T0, T0, False, process),
                HostRecord(client, server, False, seq, seq + 20, T0 + 1e-3, T0 + 1e-3, False,
                           process)]
    h1 = HostTrace("web", frozenset({"10.0.0.1"}), frozenset({("0.0.0.0", 80)}), [
        HostRecord(web, front, False, 1, 50, T0, T0, False, "apache2"),
        *call(41000, db, 100, "php"), *call(41001, db, 200, ""), *call(41002, db, 300, "")])
    trace = reconcile([h1])
    assert set(trace.nodes) == {"web/apache2", "web/php", "10.0.0.2", "10.0.0.9"}
    h2 = HostTrace("web", frozenset({"10.0.0.1"}), frozenset({("0.0.0.0", 80)}), [
        HostRecord(web, front, False, 1, 50, T0, T0, False, "apache2"),
        *call(41001, db, 200, ""), *call(41002, cache, 300, "")])
    assert set(reconcile([h2]).nodes) == {"web/apache2", "10.0.0.2", "10.0.0.3", "10.0.0.9"}
    # two processes known on the host and none for this server: left unnamed
    h3 = HostTrace("web", frozenset({"10.0.0.1"}), frozenset({("0.0.0.0", 80)}), [
        HostRecord(web, front, False, 1, 50, T0, T0, False, "apache2"),
        *call(41000, cache, 100, "cron"), *call(41001, db, 200, "")])
    assert "web" in reconcile([h3]).nodes


def test_each_host_s_loopback_is_its_own() -> None:
    """Two hosts each talk to a database of their own over 127.0.0.1 (and ::1), with the same
    ports: two conversations, each on its host, not one mixed up."""
    def host(name: str, address: str, process: str) -> HostTrace:
        client, server = (address, 50000), (address, 5432)
        # as a sniffer reports a loopback message: sent by one end, received by the other
        return HostTrace(name, frozenset({address, "10.0.0.1" if name == "a" else "10.0.0.2"}),
                         frozenset({(address, 5432)}), [
            HostRecord(client, server, True, 1, 9, T0, T0, False, process),
            HostRecord(server, client, False, 1, 9, T0, T0, False, "db"),
            HostRecord(server, client, True, 7, 99, T0 + 1e-3, T0 + 1e-3, False, "db"),
            HostRecord(client, server, False, 7, 99, T0 + 1e-3, T0 + 1e-3, False, process)])
    for address in ("127.0.0.1", "::1"):
        trace = reconcile([host("a", address, "app"), host("b", address, "web")])
        assert set(trace.nodes) == {"a/app", "a/db", "b/web", "b/db"}
        assert len(trace.messages) == 4
        assert not np.isnan(trace.messages.send_s).any()
        assert not np.isnan(trace.messages.recv_s).any()
        servers = {trace.nodes[k] for k in trace.connections.server_node.tolist()}
        assert servers == {"a/db", "b/db"}


def test_reconciliation_matches_both_ends_by_sequence_and_names_the_server() -> None:
    """A client on h1 asks h2's server (listening on 0.0.0.0:5432) twice; h3's client is
    not traced. The two records of a message meet by their sequence range; the untraced end's
    time is nil; the listening end is the server whatever the ports."""
    c, s, x = ("10.0.0.1", 40000), ("10.0.0.2", 5432), ("10.0.0.3", 40001)
    h1 = HostTrace("h1", frozenset({"10.0.0.1"}), frozenset(), [
        HostRecord(c, s, True, 100, 150, T0 + 0.0, T0 + 0.0, False, "client"),
        HostRecord(c, s, False, 7000, 7300, T0 + 0.0015, T0 + 0.002, False, "client"),
        HostRecord(c, s, True, 150, 200, T0 + 0.01, T0 + 0.01, False, "client")])
    h2 = HostTrace("h2", frozenset({"10.0.0.2"}), frozenset({("0.0.0.0", 5432)}), [
        HostRecord(s, c, False, 100, 150, T0 + 0.0003, T0 + 0.0004, False, "postgres"),
        HostRecord(s, c, True, 7000, 7300, T0 + 0.001, T0 + 0.0012, False, "postgres"),
        HostRecord(s, c, False, 150, 200, T0 + 0.0102, T0 + 0.0103, False, "postgres"),
        HostRecord(s, x, False, 1, 11, T0 + 0.02, T0 + 0.02, False, "postgres")])
    trace = reconcile([h1, h2])
    m = trace.messages
    assert len(m) == 4
    assert set(trace.nodes) == {"h1/client", "h2/postgres", "10.0.0.3"}
    assert_allclose(m.send_s[:3] - T0, [0.0, 0.001, 0.01], atol=1e-6)
    assert_allclose(m.recv_s[:3] - T0, [0.0004, 0.002, 0.0103], atol=1e-6)
    assert np.isnan(m.send_s[3])  # from the untraced client
    assert list(m.size_bytes) == [50, 300, 50, 10]
    server = trace.nodes.index("h2/postgres")
    assert set(trace.connections.server_node.tolist()) == {server}
    assert trace.is_reply().tolist() == [False, True, False, False]
    assert trace.clients[trace.nodes.index("h1/client")]
    assert m.by_server.tolist() == [0, 1, 0, 0]


def test_a_connection_within_one_node_says_its_replies_by_port():
    """Two processes of one host with no process names (a capture): both ends are the host's
    node, and only which end listens says that the answer is a reply."""
    c, s = ("127.0.0.1", 50000), ("127.0.0.1", 9000)
    h = HostTrace("web", frozenset({"127.0.0.1"}), frozenset({("127.0.0.1", 9000)}), [
        HostRecord(s, c, False, 1, 61, T0, T0, True, ""),
        HostRecord(s, c, True, 500, 800, T0 + 0.003, T0 + 0.003, True, "")])
    trace = reconcile([h])
    assert trace.nodes == ("web",)
    assert trace.messages.by_server.tolist() == [0, 1]
    assert trace.is_reply().tolist() == [False, True]

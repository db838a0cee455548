"""Context linking's joint decisions (linkgrad.paths.node_beam), what sizes and connections
say about a parent (features), the vectorised fits, and linking with the fit on a prefix."""

from __future__ import annotations

import math

import numpy as np
import pytest

from linkgrad.paths import structural
from linkgrad.paths.accuracy import best_instances, tree_accuracy
from linkgrad.paths.contexts import ContextWalker
from linkgrad.paths.delay_model import MIN_SIGMA, fit_lognormals
from linkgrad.paths.features import ReuseModel, SizeModel
from linkgrad.paths.instances import path_instances
from linkgrad.paths.node_beam import NodeBeam, Placement
from linkgrad.paths.structural import context_probabilities
from linkgrad.paths.wap5 import LinkingSettings
from testbed.synthetic_paths import generate, three_tier

REQUEST_A, REQUEST_B, CALL_1, CALL_2, REPLY_A, REPLY_B, REQUEST_C, CALL_3 = range(8)


def two_requests() -> NodeBeam:
    """A node with two requests open (A on connection 1 at 0 ms, B on 2 at 0.2 ms)."""
    walker = ContextWalker(window_s=1.0, fanout_s=0.0005, afterward_s=0.001)
    walker.request_arrived(1, REQUEST_A, 0.0)
    walker.request_arrived(2, REQUEST_B, 0.0002)
    return NodeBeam(walker, {}, {})


def options(beam: NodeBeam, weight: dict[int, float]) -> list[list[tuple]]:
    """Each hypothesis's options: its ready contexts weighed by `weight` (by latest message),
    and being spontaneous, 10⁻⁶."""
    return [[(None, 1e-6, Placement.ROOT)] + [
        (c.latest, weight.get(c.latest, 0.0), Placement.OPEN) for c in h.walker.ready(0.001)]
        for h in beam.hypotheses]


def test_the_second_call_decides_the_first_when_two_contexts_are_ready() -> None:
    """Alone, the first call is better explained by B (2 to 1); but then the second call has
    only A left, which explains it badly (0.1), while with A first B explains it well (10):
    jointly A then B, 10 to 0.2. A greedy choice takes B."""
    beam = two_requests()
    beam.branch(options(beam, {REQUEST_A: 1.0, REQUEST_B: 2.0}), CALL_1, 10, 0.0003)
    assert len(beam.hypotheses) == 2
    assert beam.hypotheses[0].walker.context_of.get(REQUEST_B) is not None  # B taken first
    # whichever context is left explains the second call as the joint model has it
    second = [[(None, 1e-6, Placement.ROOT)] + [
        (c.latest, 10.0 if c.latest == REQUEST_B else 0.1, Placement.OPEN)
        for c in h.walker.ready(0.0004) if c.acted_s is None] for h in beam.hypotheses]
    beam.branch(second, CALL_2, 11, 0.0004)
    beam.settle()
    first = dict(beam.decisions[CALL_1][0])
    assert first[REQUEST_A] == pytest.approx(10 / 10.2, rel=1e-3)
    assert first[REQUEST_B] == pytest.approx(0.2 / 10.2, rel=1e-3)
    assert dict(beam.decisions[CALL_2][0])[REQUEST_B] == pytest.approx(10 / 10.2, rel=1e-3)
    assert beam.placements[CALL_1] is Placement.OPEN
    assert len(beam.hypotheses) == 1


def test_a_reply_s_delay_decides_which_context_made_a_call() -> None:
    """Two contexts equally likely to have made a call; the answer comes back, and then each
    request is answered. The reply whose context's latest message fits its delay decides."""
    beam = two_requests()
    beam.branch(options(beam, {REQUEST_A: 1.0, REQUEST_B: 1.0}), CALL_1, 10, 0.0003)
    assert len(beam.hypotheses) == 2
    answer = 99
    for h in beam.hypotheses:
        h.walker.reply_arrived(10, answer, 0.0008)
    parents = [h.walker.answer(1, 0.001) for h in beam.hypotheses]  # A answers
    # in the hypothesis where A made the call its latest is the answer: a likely delay
    beam.reply(REPLY_A, parents, [math.log(50.0) if p == answer else 0.0 for p in parents])
    beam.settle()
    assert dict(beam.decisions[CALL_1][0])[REQUEST_A] == pytest.approx(50 / 51, rel=1e-3)
    assert dict(beam.decisions[REPLY_A][0])[answer] == pytest.approx(50 / 51, rel=1e-3)


def test_a_call_every_hypothesis_puts_in_one_place_is_decided_alike_at_once() -> None:
    """A call in A or B (2 to 1), its answer back: the next call follows that answer in
    either hypothesis. Forced, it is decided at once, each walker waits on it, and the odds
    of the first call are what branching on it would have left them."""
    decided = {}
    for way in ("forced", "branch"):
        beam = two_requests()
        beam.branch(options(beam, {REQUEST_A: 2.0, REQUEST_B: 1.0}), CALL_1, 10, 0.0003)
        for h in beam.hypotheses:
            h.walker.reply_arrived(10, 99, 0.0008)
        beam.reply(REPLY_B, [None, None], [0.0, 0.0])  # a reply that says nothing
        if way == "forced":
            beam.forced(CALL_2, 99, 10, 0.0009)
            assert beam.decisions[CALL_2] == ([(99, 1.0)], 0.0)
        else:
            beam.branch([[(99, 0.5, Placement.OPEN)]] * 2, CALL_2, 10, 0.0009)
        assert len(beam.hypotheses) == 2
        assert all(not h.walker.ready(0.002) or h.walker.ready(0.002)[0].latest != 99
                   for h in beam.hypotheses)  # waiting on its call
        beam.settle()
        decided[way] = (beam.decisions[CALL_1], beam.decisions[CALL_2],
                        beam.placements[CALL_2])
    assert decided["forced"] == decided["branch"]
    assert dict(decided["forced"][0][0])[REQUEST_A] == pytest.approx(2 / 3)


def test_a_forced_call_drops_what_a_reply_sank_past_the_ratio_as_branching_does() -> None:
    """After a reply that makes one of two hypotheses 10⁹ times less likely, the next call,
    forced or branched, leaves the other alone and settles the first call on it."""
    for way in ("forced", "branch"):
        beam = two_requests()
        beam.branch(options(beam, {REQUEST_A: 2.0, REQUEST_B: 1.0}), CALL_1, 10, 0.0003)
        for h in beam.hypotheses:
            h.walker.reply_arrived(10, 99, 0.0008)
        beam.reply(REPLY_B, [REQUEST_B, REQUEST_B], [math.log(1e-9), 0.0])
        if way == "forced":
            beam.forced(CALL_2, 99, 10, 0.0009)
        else:
            beam.branch([[(99, 0.5, Placement.OPEN)]] * 2, CALL_2, 10, 0.0009)
        assert len(beam.hypotheses) == 1, way
        assert dict(beam.decisions[CALL_1][0])[REQUEST_B] == pytest.approx(1.0), way


def test_a_clear_choice_is_decided_at_once_and_a_greedy_beam_keeps_one_hypothesis() -> None:
    beam = two_requests()
    beam.branch(options(beam, {REQUEST_A: 1.0, REQUEST_B: 1e-6}), CALL_1, 10, 0.0003)
    assert len(beam.hypotheses) == 1
    assert beam.decisions[CALL_1] == ([(REQUEST_A, 1.0)], 0.0)
    walker = ContextWalker(window_s=1.0, fanout_s=0.0005, afterward_s=0.001)
    walker.request_arrived(1, REQUEST_A, 0.0)
    walker.request_arrived(2, REQUEST_B, 0.0002)
    greedy = NodeBeam(walker, {}, {}, width=1)
    greedy.branch(options(greedy, {REQUEST_A: 1.0, REQUEST_B: 2.0}), CALL_1, 10, 0.0003)
    assert greedy.decisions[CALL_1] == ([(REQUEST_B, 1.0)], 0.0)


def test_hypotheses_alike_from_here_on_are_merged() -> None:
    """A call put in A or B; both contexts are then answered and gone: the two hypotheses'
    futures are the same, and the beam keeps the better one only, once a call splits them
    (a call each hypothesis puts in one place leaves the beam as it is)."""
    beam = two_requests()
    beam.branch(options(beam, {REQUEST_A: 1.0, REQUEST_B: 0.5}), CALL_1, 10, 0.0003)
    assert len(beam.hypotheses) == 2
    for h in beam.hypotheses:
        h.walker.reply_arrived(10, 99, 0.0008)
        h.walker.answer(1, 0.001)
        h.walker.answer(2, 0.001)
    assert beam.hypotheses[0].walker.signature() != beam.hypotheses[1].walker.signature()
    for h in beam.hypotheses:  # past the window in which an answered context may still call
        h.walker.ready(0.01)
    assert beam.hypotheses[0].walker.signature() == beam.hypotheses[1].walker.signature()
    beam.branch([[(None, 1.0, Placement.ROOT)]] * 2, CALL_2, 11, 0.01)
    assert len(beam.hypotheses) == 2  # not split: not compared
    for h in beam.hypotheses:
        h.walker.request_arrived(3, REQUEST_C, 0.011)
    beam.branch([[(None, 1e-3, Placement.ROOT), (REQUEST_C, 1.0, Placement.OPEN)]] * 2,
                CALL_3, 12, 0.0112)
    assert len(beam.hypotheses) == 2  # of four: C or spontaneous, after A's only
    for h in beam.hypotheses:
        c = h.choices
        while c.msg != CALL_1:
            c = c.before
        assert c.parent == REQUEST_A


def test_sizes_weigh_a_parent_by_what_it_was_and_fall_back_to_the_pair() -> None:
    # node 2 calls node 3: after a 100-byte request from node 1 with 40 bytes, after a
    # 200-byte one with 80
    keys = np.array([[1, 100, 2, 3]] * 30 + [[1, 200, 2, 3]] * 30)
    sizes = np.array([40] * 30 + [80] * 30)
    model = SizeModel(keys, sizes)
    assert model.probability(1, 100, 2, 3, 40) > 0.9
    assert model.probability(1, 200, 2, 3, 40) < 0.05
    # a parent never seen: the pair's own shares (Jeffreys: half an observation each)
    assert model.probability(1, 150, 2, 3, 40) == pytest.approx(30.5 / (60 + 1.5))
    assert model.pair_probability(2, 3, 40) == pytest.approx(30.5 / 61.5)
    assert model.pair_probability(7, 8, 40) == 1.0  # a pair never linked weighs nothing


def test_connection_reuse_is_learned_per_transition() -> None:
    keys = np.array([[3, 2, 3]] * 10 + [[1, 2, 3]] * 10)
    reused = np.array([True] * 9 + [False] + [False] * 10)
    model = ReuseModel(keys, reused)
    assert model.probability(3, 2, 3, True) == pytest.approx(9.5 / 11)
    assert model.probability(1, 2, 3, False) == pytest.approx(10.5 / 11)
    assert model.probability(5, 2, 3, True) == 1.0  # never seen: no opinion
    assert model.probability(5, 2, 3, False) == 1.0


def test_lognormal_fits_per_key_need_enough_delays() -> None:
    rng = np.random.default_rng(1)
    delays = np.concatenate([rng.lognormal(math.log(1e-3), 0.5, 400),
                             rng.lognormal(math.log(1e-4), 0.2, 400), [0.01] * 5])
    keys = np.array([[0, 1, 2]] * 400 + [[5, 1, 2]] * 400 + [[9, 9, 9]] * 5)
    fits = fit_lognormals(keys, delays, 20)
    assert set(fits) == {(0, 1, 2), (5, 1, 2)}
    assert fits[(0, 1, 2)].mu == pytest.approx(math.log(1e-3), abs=0.06)
    assert fits[(0, 1, 2)].sigma == pytest.approx(0.5, abs=0.05)
    assert fits[(5, 1, 2)].sigma == pytest.approx(0.2, abs=0.03)
    assert fit_lognormals(np.array([[1, 1]] * 30), np.full(30, 1e-3), 20)[(1, 1)].sigma \
        == MIN_SIGMA  # identical delays: the floor, not a spike
    assert fit_lognormals(np.zeros((0, 3)), np.zeros(0), 20) == {}


def test_fitting_on_the_trace_s_start_links_the_rest_as_well(monkeypatch) -> None:
    """The fitting passes walk only a prefix of a big trace; the last pass walks it all."""
    s = generate(three_tier(apps=2), 50, 10, seed=7)
    settings = LinkingSettings(window_s=1.0)

    def accuracy() -> float:
        best = best_instances(path_instances(context_probabilities(s.trace, settings),
                                             settings))
        right, total = tree_accuracy(best, s.true_parent, s.request)
        return right / total

    whole = accuracy()
    monkeypatch.setattr(structural, "FIT_MESSAGES", len(s.trace.messages) // 4)
    prefix = accuracy()
    assert prefix > whole - 0.03, (prefix, whole)
    assert prefix > 0.8


def test_an_answered_context_waiting_on_its_own_call_is_not_forgotten_meanwhile() -> None:
    """Work after the answer: a query 1 ms after the reply, its answer 6 ms later; an
    unrelated call in between must not make the context forget it is waiting."""
    walker = ContextWalker(window_s=1.0, fanout_s=0.0005, afterward_s=0.005)
    walker.request_arrived(1, REQUEST_A, 0.0)
    walker.answer(1, 0.001)
    walker.call_sent(10, REQUEST_A, 0.002)  # after the answer, in its context
    walker.ready(0.007)  # another call's look, past afterward_s since the answer
    walker.reply_arrived(10, 99, 0.008)
    assert [c.latest for c in walker.ready(0.009)] == [99]


def test_an_empty_trace_links_to_nothing() -> None:
    from linkgrad.paths.analysis import analyse
    from linkgrad.paths.messages import Connections, Messages, Trace
    empty = Trace.sorted(Messages([], [], [], [], [], []), Connections([], [], [], []),
                         (), np.zeros(0, dtype=np.int32), ())
    for linker in ("context", "fcfs", "wap5"):
        result = analyse(empty, linker, LinkingSettings(window_s=1.0))
        assert result.roots == 0
        assert result.patterns == ()


def test_a_reply_to_a_call_before_the_trace_is_no_greeting() -> None:
    """A database's answer to a query sent before the capture began, then 5 s later a
    request whose query goes on that connection: the old answer is not the query's cause,
    and no request that came after it is its parent."""
    from tests.test_paths_units import trace_of
    rows = [(0.0, 0.0001, "db", "web", 1),            # the answer to an unseen query
            (5.0, 5.0001, "client", "web", 0),        # a request
            (5.001, 5.0011, "web", "db", 1),          # its query
            (5.002, 5.0021, "db", "web", 1),          # the answer
            (5.003, 5.0031, "web", "client", 0)]      # the reply
    trace = trace_of(rows, [("client", "web", 40000, 80), ("web", "db", 41000, 3306)],
                     ("client", "web", "db"))
    parent = context_probabilities(trace, LinkingSettings(window_s=1.0)).most_likely_parent()
    m = trace.messages
    order = np.argsort(m.send_s, kind="stable").tolist()
    stale, request, query, answer, reply = order
    assert parent[query] == request
    assert parent[stale] != request
    assert parent[reply] == answer


def test_too_many_excluded_ports_for_one_filter_is_an_error() -> None:
    from sniffer.packet_ring import MAX_EXCLUDED_PORTS, filter_program
    program = filter_program(list(range(1, MAX_EXCLUDED_PORTS + 1)))
    assert all(jt <= 255 and jf <= 255 for _, jt, jf, _ in program)
    with pytest.raises(ValueError, match="too many"):
        filter_program(list(range(1, 200)))

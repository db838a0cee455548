"""Linking with what a black box shows besides timing: FCFS and context linking.

WAP5 §5.1 weighs every message into a node by its delay alone. On a TCP connection the
logical messages alternate, and the end that listens answers: a reply answers the request
before it on its connection, and a node's outgoing call can only belong to a request still
open at that node (received, its reply not yet sent) and not waiting on a call of its own.
Both linkers here follow each node's contexts through its events (`contexts`): a node's
reply's parent is its request's context's latest message, by construction.

Which context a call belongs to is the one choice left. *FCFS* (TraceWeaver's baseline,
with the same contexts): the oldest ready context. *Context linking* (ours): each ready
context offers one candidate, its latest message (the only one of it that can be the parent
in WAP5's causality model), weighed by
- the density of its delay (`delay_model`: §5.1's exponential in a first pass, then
  lognormals per transition fitted to the links found), against a spontaneous rate;
- what the call's size and connection say about that parent (`features`: fitted too);
and the calls of a node are decided jointly, not one by one (`node_beam`): a choice in doubt
is kept as several hypotheses until later calls and the node's replies (their delays and
sizes from their context's latest message) tell them apart. The first pass is greedy; the
passes that refit the model walk only the trace's first FIT_MESSAGES messages, the last
walks it all. Messages a node sent while untraced, and replies whose request came before
the trace, keep §5.1's candidates.

The result has §5.1's form (candidate links with probabilities), so trees, patterns and
scores are built the same way for every linker.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from operator import itemgetter

import numpy as np

from linkgrad.paths.budget import (
    CHECK_EVERY,
    FINAL_SHARE,
    FIRST_PASS_SHARE,
    FIT_SHARE,
    Budget,
    NodeShare,
    Pace,
    unlimited,
)
from linkgrad.paths.candidates import (
    Candidates,
    departure_and_arrival,
    latest_parent_delay,
)
from linkgrad.paths.contexts import Context, ContextWalker, is_waiting
from linkgrad.paths.delay_model import DelayModel, fit_lognormals
from linkgrad.paths.features import Observables
from linkgrad.paths.messages import NO_THREAD, Trace
from linkgrad.paths.no_gc import no_cycle_collection
from linkgrad.paths.node_beam import (
    BEAM_WIDTH,
    Decided,
    NodeBeam,
    Placement,
    placement_after,
)
from linkgrad.paths.threads import one_request_per_thread, worker_threads
from linkgrad.paths.wap5 import (
    DEFAULT_LINKING,
    LinkingSettings,
    LinkProbabilities,
    causal_delay_means,
    wap5_probabilities,
)

__all__ = [
    "AFTERWARD_S",
    "BOUND_FLOOR",
    "CHAIN_OVER",
    "FANOUT_S",
    "FIT_MESSAGES",
    "LOG_BUSY_WORKER",
    "MIN_FIT_SAMPLES",
    "QUEUE_PRIOR",
    "WORKER_ALONE",
    "Chooser",
    "context_probabilities",
    "fcfs_probabilities",
    "unanswered_calls",
]

# Parallel calls of one context leave within this of each other: an event loop's turn, in
# which a client library builds each request (the testbed's gather of a query and an httpx
# call: the second leaves 0.8 ms after the first, median, 2.2 ms at the 90th percentile on
# a busy 2-core host). At 0.5 ms most such calls went to no request or another's, and a
# reply that waited for both hung from the first answer. A context offered this way is
# weighed by the share of its pair's calls that were parallel ones (fitted).
FANOUT_S = 0.005
# A call after its request's reply leaves within this of the reply, or of the answer to the
# context's previous such call: an event loop's next turns, or PHP's work after the response
# (MediaWiki's queries 1-5 ms on). An answered context competes weighed by how often the
# pair's calls were such calls (fitted): without that weight, on generated traces with none,
# 0.5 ms cost 3% of the trees.
AFTERWARD_S = 0.005
# A call bound to its thread's request keeps at least this weight (never underflows to 0).
BOUND_FLOOR = 1e-300
WORKER_ALONE = 1e-6  # how much less likely a hidden worker's call with no request is
# a pool takes its queue in order: a waiting request with one ahead of it is so much less
# likely a free worker's next (`contexts.WAITING_OFFERED` are offered at all)
QUEUE_PRIOR = 0.1
# how likely a hidden worker on a chain from before the trace is done with it when one of the
# node's replies to such requests left since the chain's latest answer (it may be another's)
CHAIN_OVER = 0.5
# how much less likely a reply is while its request's hidden worker awaits an answer
LOG_BUSY_WORKER = math.log(1e-6)
# A transition's delays are fitted once it has this many links.
MIN_FIT_SAMPLES = 20
# The passes that fit the model walk only the trace's first this many messages (in time):
# that fits every transition there is many times over, and a CoDeeN-sized hour (4.7 million
# messages) then costs one pass and a little, not `iterations` passes.
FIT_MESSAGES = 150_000

# (each hypothesis's ready contexts, departure time, node, call) -> per hypothesis
# ([(parent, weight)], spontaneous weight)
Chooser = Callable[[list[list[Context]], float, int, int],
                   list[tuple[list[tuple[int, float]], float]]]


def fcfs_probabilities(trace: Trace, settings: LinkingSettings = DEFAULT_LINKING
                       ) -> LinkProbabilities:
    """A call belongs to the oldest request's context waiting on nothing (first come, first
    served: one call at a time per request, none after its reply, none on its own)."""
    def oldest(readies: list[list[Context]], _t: float, _node: int, _msg: int
               ) -> list[tuple[list[tuple[int, float]], float]]:
        out = []
        for ready in readies:
            first = next((c for c in ready
                          if c.acted_s is None and not c.closed and not c.rooted), None)
            out.append(([(first.latest, 1.0)], 0.0) if first is not None else ([], 1.0))
        return out
    with no_cycle_collection():
        walk = _Walk(trace, settings)
        return walk.result(walk.run(oldest))


def context_probabilities(trace: Trace, settings: LinkingSettings = DEFAULT_LINKING,
                          iterations: int = 5, budget: Budget | None = None,
                          worker_nodes: Collection[int] = ()) -> LinkProbabilities:
    """Each ready context's latest message, weighed by the delay model; the model refitted to
    the links found, `iterations` passes in all (§5.1 notes its steps could be iterated).
    Within `budget` (`linkgrad.paths.budget`): what it cut is in `budget.fallbacks`.
    `worker_nodes`: the nodes a hidden worker was folded into (`hidden_workers`), whose
    worker threads serve one request at a time (`threads.worker_threads`)."""
    if len(trace.messages) == 0:  # nothing to fit a model to
        return wap5_probabilities(trace, settings)
    budget = budget or unlimited()
    with no_cycle_collection():
        walk = _Walk(trace, settings, worker_nodes)
        fit_until = walk.time_of(FIT_MESSAGES)
        model = DelayModel(walk.d, settings.spontaneous_y, settings.window_s)
        first_share = FIRST_PASS_SHARE if iterations > 1 else 1.0
        decided = walk.run(walk.chooser(model), until_s=fit_until if iterations > 1 else None,
                           pace=Pace(budget, budget.until(first_share), 1, iterations,
                                      final=iterations == 1))
        last_pass_s = budget.elapsed_s()
        number = 1
        while number < iterations:
            model, seen = walk.refit(decided, fit_until)
            number += 1
            # a fitting pass that would overrun its share is left out (a beam pass costs
            # more than the greedy first one: twice the last pass's time is the guess)
            if number < iterations and \
                    budget.clock() + 2 * last_pass_s > budget.until(FIT_SHARE):
                budget.passes_cut = iterations - number
                number = iterations
            last = number == iterations
            started_s = budget.elapsed_s()
            decided = walk.run(walk.chooser(model, seen), model, seen,
                               until_s=None if last else fit_until,
                               pace=Pace(budget, budget.until(FINAL_SHARE if last else FIT_SHARE),
                                          number, iterations, final=last))
            last_pass_s = budget.elapsed_s() - started_s
        return walk.result(decided)


def _first_words(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per message, whether it may be a server's greeting (the first on a connection whose
    set-up the trace saw; any connection's first, in a trace that kept no set-ups), and
    whether it answers a request from before the trace (the first on a connection whose
    set-up came before the trace, in one that kept set-ups: a reply then). One rule for
    both walks, the caller's and the server's."""
    m = trace.messages
    greets, before = np.zeros(len(m), dtype=bool), np.zeros(len(m), dtype=bool)
    first = trace.first_of_connections()
    opened = trace.connections.opened
    if opened.any():
        seen_open = opened[m.conn[first]]
        greets[first[seen_open]] = True
        before[first[~seen_open]] = True
    else:
        greets[first] = True
    return greets, before & trace.is_reply()


def _answers_to_unseen(trace: Trace, before_trace: np.ndarray) -> np.ndarray:
    """Per message, whether it is a reply to a request its sender did not see arrive: one
    from before the trace (`_first_words`), or one that reached it before its capture began
    (the client's capture saw it leave, the server's did not see it come). Only replies the
    sender's capture saw leave: one only its client saw (the server's capture had stopped,
    or not begun) says nothing of the calls the server's capture holds."""
    m = trace.messages
    by_conn = np.argsort(m.conn, kind="stable")  # each connection's messages in time order
    prev, cur = by_conn[:-1], by_conn[1:]
    is_reply = trace.is_reply()
    unseen = before_trace.copy()
    after_unseen = (m.conn[prev] == m.conn[cur]) & is_reply[cur] & ~is_reply[prev] & \
        np.isnan(m.recv_s[prev])
    unseen[cur[after_unseen]] = True
    return unseen & np.isfinite(m.send_s)


def _offered_alike(readies: list[list[Context]]) -> int | None:
    """The latest message of the one context every hypothesis offers a call, alike in all
    that weighs it (answered or not, waiting on a sibling or not); None if any differs.
    Only for a call that cannot be spontaneous while a context is ready (a hidden
    worker's: a bound thread's node keeps one hypothesis), so that one context is its only
    option."""
    first = readies[0]
    if len(first) != 1:
        return None
    c = first[0]
    acted = c.acted_s is not None
    for ready in readies[1:]:
        if len(ready) != 1:
            return None
        d = ready[0]
        if d.latest != c.latest or d.closed != c.closed or (d.acted_s is not None) != acted:
            return None
    return c.latest


def _queue_priors(ready: list[Context], unseen_ahead: int = 0) -> list[float]:
    """Each ready context's prior for a free worker: QUEUE_PRIOR to the power of the number
    of waiting requests (not yet started) that arrived before it, `unseen_ahead` of them
    before the trace; 1 for the others."""
    out, ahead = [], unseen_ahead
    for c in ready:
        if is_waiting(c):
            out.append(QUEUE_PRIOR ** ahead)
            ahead += 1
        else:
            out.append(1.0)
    return out


def _taken_when_free(answers: list[float], t: float, ready: list[Context],
                     walker: ContextWalker, worker: int) -> list[Context]:
    """`ready` with each waiting request timed from when `worker`, on a chain from before
    the trace, became free to take it: when the latest of its node's `answers` to such
    requests (sorted) left, if since its chain's latest answer. A request queued behind the
    backlog waited for that, not for the worker's call: weighed from its arrival, it would
    lose to any other explanation. (Timed so after a worker's answer to a request of the
    trace, the linking is worse: it may take its next before the reply leaves.)"""
    chain = walker.chain_of(worker)
    if chain is None:
        return ready
    k = bisect_left(answers, t)
    if not k or answers[k - 1] <= chain.latest_s:
        return ready
    return _waited_for(ready, answers[k - 1])


def _waited_for(ready: list[Context], free_s: float) -> list[Context]:
    """`ready` with each waiting request that arrived before `free_s`, when its hidden
    worker heard its last answer, timed from then: a request queued for a busy pool waited
    for a worker, and weighed from its arrival it loses to one that came later, however
    the pool takes its queue. (Not from the server's reply: Passenger may take the next
    request before Apache's reply leaves; never before the worker's last answer came.)"""
    return [replace(c, opened_s=free_s, latest_s=free_s)
            if c.latest_s < free_s and is_waiting(c) else c for c in ready]


def _worker_options(answers: list[float], t: float, window_s: float,
                    links: list[tuple[int, float]], spontaneous: float, ready: list[Context],
                    walker: ContextWalker, worker: int
                    ) -> tuple[list[tuple[int, float]], float]:
    """A hidden worker's call weighed as a pool takes its queue: in order, behind the
    requests its node answers (`answers`, sorted) but never saw arrive that no worker has
    begun yet; spontaneous -- beginning one of those -- only while there are some.

    A capture begun on a busy pool sees its queue's replies, not its requests: the requests
    answered after `t` that no worker is on (a chain its call began) still wait, ahead of
    every request the trace saw. A worker on such a chain may be done with it only if one
    of those replies left since the chain's latest answer came back, or fewer are left than
    workers on chains; with none left, it is. (Taking the trace's first requests first, or
    keeping a chain on after the worker answered it, puts the workers' calls in the wrong
    trees.) Only the replies within `window_s` of `t` count: a request a worker is on, or
    takes now, is answered within the window (one reply whose request the server's capture
    lost, late in the trace, would otherwise keep every chain from its start going for the
    whole trace, swallowing the jobs after it). With no such replies (none, or a trace that
    kept no connection set-ups) a chain goes on as any request would."""
    chain, over, unseen = None, 1.0, 0  # over: how likely the worker is free to take another
    if answers and not walker.serves_request(worker):  # busy, it begins none of them
        chain = walker.chain_of(worker)
        left = bisect_right(answers, t + window_s) - bisect_right(answers, t)
        on_chains = walker.workers_on_chains()
        if chain is not None and left:
            over = CHAIN_OVER if left < on_chains or bisect_right(
                answers, chain.latest_s) < bisect_left(answers, t) else WORKER_ALONE
        elif chain is not None:
            over = 1.0 - WORKER_ALONE
        # free, it takes one of those the other workers are not on, if any are left
        unseen = max(0, left - (on_chains - (chain is not None)))
    weighed = [(p, max(w, BOUND_FLOOR) * f * (1.0 - over if c is chain else over))
               for (p, w), f, c in zip(links, _queue_priors(ready, unseen), ready, strict=True)]
    if not unseen:
        return (weighed, 0.0) if links else (links, spontaneous * WORKER_ALONE)
    # one of those first in the queue: as likely by its timing as the likeliest seen
    return weighed, over * max([spontaneous, *(w for _, w in links)])


def unanswered_calls(trace: Trace, is_reply: list[bool], out_t: np.ndarray,
                     in_t: np.ndarray) -> set[int]:
    """The calls nothing answers: a connection's last message when its client sent it (a
    connection's messages alternate). MySQL's COM_QUIT is one; its sender does not wait for
    an answer, so its context goes on as if it had not called."""
    m = trace.messages
    t = np.where(np.isfinite(out_t), out_t, in_t)
    order = np.lexsort((t, m.conn))
    last = order[np.r_[m.conn[order][1:] != m.conn[order][:-1], True]] if len(order) else order
    return {int(i) for i in last.tolist() if not is_reply[i]}


class _Walk:
    """The trace's events by node, walked with a context chooser."""

    def __init__(self, trace: Trace, settings: LinkingSettings,
                 worker_nodes: Collection[int] = ()) -> None:
        self.trace, self.settings = trace, settings
        self.d = causal_delay_means(trace, latest_parent_delay(trace, settings.window_s))
        m = trace.messages
        self.out_t, self.in_t, _, _ = departure_and_arrival(trace)
        self.events = list(_events_by_node(trace, self.out_t, self.in_t, np.isnan(m.send_s),
                                           np.isnan(m.recv_s)))
        self.src, self.dst = m.src.tolist(), m.dst.tolist()
        self.is_reply, self.conns = trace.is_reply().tolist(), m.conn.tolist()
        self.clients = trace.clients.tolist()
        self.send_thread, self.recv_thread = m.send_thread.tolist(), m.recv_thread.tolist()
        self.threaded = one_request_per_thread(trace).tolist()
        self.workers = worker_threads(trace, worker_nodes)
        self.unanswered = unanswered_calls(trace, self.is_reply, self.out_t, self.in_t)
        greets, before_trace = _first_words(trace)
        self.may_greet, self.before_trace = greets.tolist(), before_trace.tolist()
        # per node, when it answered each request it did not see arrive: the queue a pool
        # of hidden workers had when the trace began is worked off first (`_worker_options`)
        self.unseen_answers: dict[int, list[float]] = {}
        for k in np.flatnonzero(_answers_to_unseen(trace, before_trace)).tolist():
            self.unseen_answers.setdefault(self.src[k], []).append(float(self.out_t[k]))
        for times in self.unseen_answers.values():
            times.sort()
        first = np.fmin(self.out_t, self.in_t)
        self.first_s = np.sort(first[np.isfinite(first)])

    def time_of(self, messages: int) -> float | None:
        """When the trace's first `messages` messages have begun (None: it has fewer)."""
        return float(self.first_s[messages]) if messages < len(self.first_s) else None

    def chooser(self, model: DelayModel, seen: Observables | None = None) -> Chooser:
        src, dst = self.src, self.dst

        def by_density(readies: list[list[Context]], t: float, node: int, msg: int
                       ) -> list[tuple[list[tuple[int, float]], float]]:
            callee = dst[msg]
            after = model.afterward_prior(node, callee)
            sibling = model.sibling_prior(node, callee)
            spontaneous = model.spontaneous_weight(node, callee)
            if seen is not None:
                spontaneous *= seen.spontaneous(msg)
            # the hypotheses share most contexts: each one weighed once per call, by what
            # its weight depends on (its latest message, answered, waiting on a sibling, since when)
            weight_of: dict[tuple[int, bool, bool, float], float] = {}
            out = []
            for ready in readies:  # one loop: the walk's hottest code
                links = []
                for c in ready:
                    key = (c.latest, c.closed, c.acted_s is not None, c.latest_s)
                    w = weight_of.get(key)
                    if w is None:
                        w = model.weight(src[c.latest], node, callee, t - c.latest_s)
                        if c.closed:
                            w *= after
                        elif c.acted_s is not None:
                            w *= sibling
                        if seen is not None:
                            w *= seen.call(c.latest, msg)
                        weight_of[key] = w
                    links.append((c.latest, w))
                out.append((links, spontaneous) if links else ([], 1.0))
            return out
        return by_density

    def run(self, choose: Chooser, model: DelayModel | None = None,
            seen: Observables | None = None, until_s: float | None = None,
            pace: Pace | None = None) -> Decided:
        """Each node's events through a beam of context walkers (`node_beam`): a call whose
        context is in doubt is decided by what comes after it, its node's replies weighed by
        their delays and sizes once fitted. Events after `until_s` are left out. With a
        `pace`, each node has its share of the pass's time (`budget`)."""
        decisions: Decided = {}
        self.placements: dict[int, Placement] = {}
        self.unexplained: list[int] = []  # calls made with no context ready
        self.heard: dict[int, float] = {}  # per hidden worker of the node walked
        self.greeted_calls: dict[int, int] = {}  # call -> the server's greeting it answers
        nodes = []
        for node, (times, departures, messages) in self.events:
            if until_s is not None:
                end = bisect_right(times, until_s)
                times, departures, messages = times[:end], departures[:end], messages[:end]
            # a node's calls are what cost (its contexts and hypotheses): its share by them
            # (a client's are spontaneous: no choice to make)
            calls = 0 if self.clients[node] and self.settings.clients_spontaneous else sum(
                d and not self.is_reply[k] for d, k in zip(departures, messages, strict=True))
            nodes.append((node, times, departures, messages, calls))
        pace = pace or Pace(unlimited(), math.inf, 1, 1, final=True)
        pace.begin(sum(n[4] for n in nodes), sum(len(n[1]) for n in nodes))
        for node, times, departures, messages, calls in nodes:
            # a node serving a request per thread has its calls bound: the few a thread
            # cannot say are not worth a beam (kept, every bound call would branch with it)
            width = BEAM_WIDTH if model is not None and not self.threaded[node] else 1
            beam = NodeBeam(ContextWalker(self.settings.window_s, FANOUT_S, AFTERWARD_S,
                                          self.threaded[node], bool(self.workers[node])),
                            decisions, self.placements, width)
            self._walk_node(node, beam, zip(times, departures, messages, strict=True),
                            pace.node(calls, len(times)), choose, model, seen, decisions)
            beam.settle()
        return decisions

    def _walk_node(self, node: int, beam: NodeBeam, events: Iterator[tuple[float, bool, int]],
                   share: NodeShare, choose: Chooser, model: DelayModel | None,
                   seen: Observables | None, decisions: Decided) -> None:
        is_reply, conns, in_t = self.is_reply, self.conns, self.in_t
        recv_thread = self.recv_thread
        spontaneous = self.clients[node] and self.settings.clients_spontaneous
        greeted: dict[int, tuple[int, float]] = {}  # connection -> server's first words
        workers = self.workers[node]
        self.heard = {}  # hidden worker -> when its last answer came
        for k, (t, departing, msg) in enumerate(events):
            if k % CHECK_EVERY == 0 and k and not share.keep_up(k, beam, node):
                return  # the rest of the node's messages are left to §5.1
            conn = conns[msg]
            if not departing:
                if not is_reply[msg]:
                    for h in beam.hypotheses:
                        h.walker.request_arrived(conn, msg, t, recv_thread[msg])
                    continue
                if conn not in beam.hypotheses[0].walker.calls:
                    greeted[conn] = (msg, t)  # a reply to no call (alike in every one)
                for h in beam.hypotheses:
                    h.walker.reply_arrived(conn, msg, t, recv_thread[msg])
                if recv_thread[msg] in workers:
                    self.heard[recv_thread[msg]] = t
            elif is_reply[msg]:
                busy = [len(beam.hypotheses) > 1 and h.walker.answers_busy_worker(conn)
                        for h in beam.hypotheses]
                parents = [h.walker.answer(conn, t) for h in beam.hypotheses]
                weights = [0.0 if p is None or model is None or len(parents) == 1 else
                           self._reply_weight(model, seen, p, msg, t - in_t[p])
                           + (LOG_BUSY_WORKER if b else 0.0)
                           for p, b in zip(parents, busy, strict=True)]
                beam.reply(msg, parents, weights, self.before_trace[msg])
            elif spontaneous:
                for h in beam.hypotheses:
                    h.walker.call_sent(conn, None, t)
            else:
                self._call(node, beam, msg, conn, t, choose, model, greeted, decisions)

    def _call(self, node: int, beam: NodeBeam, msg: int, conn: int, t: float,
              choose: Chooser, model: DelayModel | None,
              greeted: dict[int, tuple[int, float]], decisions: Decided) -> None:
        """A call the node sends: its context chosen in every hypothesis."""
        in_t = self.in_t
        thread = self.send_thread[msg]
        # a request per thread: the call is its thread's request's, whatever its delay says
        # (a delay §5.1 finds unlikely under load must not make it spontaneous), and
        # spontaneous only if the thread has none
        bound = self.threaded[node] and thread != NO_THREAD
        worker = thread if not bound and thread in self.workers[node] else NO_THREAD
        readies = [h.walker.ready(t, thread if bound else None,
                                  worker if worker != NO_THREAD else None)
                   for h in beam.hypotheses]
        if not readies[0]:  # the likeliest hypothesis has no context for it
            self.unexplained.append(msg)
        greeting = self._greeting(greeted.pop(conn, None), t, decisions)
        answers = self.unseen_answers.get(node, [])
        if worker != NO_THREAD and answers and answers[0] <= t <= answers[-1] + \
                self.settings.window_s:  # a chain outlives the last of them by the window
            readies = [_taken_when_free(answers, t, ready, h.walker, worker)
                       for ready, h in zip(readies, beam.hypotheses, strict=True)]
        if worker != NO_THREAD and worker in self.heard:
            readies = [_waited_for(ready, self.heard[worker]) for ready in readies]
        if worker != NO_THREAD and greeting is None and len(readies) > 1 and (
                (forced := _offered_alike(readies)) is not None):
            # a busy worker's next call, in every hypothesis its own request's: weighed
            # alike in all, it changes none of their odds (most of a worker's calls)
            beam.forced(msg, forced, conn, t, worker, msg not in self.unanswered)
            return
        chosen = choose(readies, t, node, msg)
        if bound:
            chosen = [([(p, max(w, BOUND_FLOOR)) for p, w in links], 0.0) if links else
                      (links, s) for links, s in chosen]
        elif worker != NO_THREAD:  # likewise; and a worker with no request to serve is
            # what a hypothesis that gave its request to another worker comes to; a request
            # waiting behind another is the less likely to be taken (`contexts` module doc)
            window_s = self.settings.window_s
            chosen = [_worker_options(answers, t, window_s, links, s, ready, h.walker, worker)
                      for (links, s), ready, h in zip(chosen, readies, beam.hypotheses,
                                                      strict=True)]
        if greeting is not None:  # its parent arrived before it did
            chosen = [([(p, w) for p, w in links if in_t[p] <= in_t[greeting]], s)
                      for links, s in chosen]
        waits = msg not in self.unanswered
        if len(chosen) == 1 and greeting is None and beam.decided_alone(
                *chosen[0], msg, conn, t, worker, waits):
            return
        options = [_options(h.walker, c) for h, c in zip(beam.hypotheses, chosen, strict=True)]
        if greeting is not None:
            self.greeted_calls[msg] = greeting
            if model is None:  # §5.1's weights know no connect: a ready context opened it
                # (a first pass calling it spontaneous would fit every later pass to that)
                options = [[o for o in opts if o[0] is not None] or opts for opts in options]
        beam.branch(options, msg, conn, t, greeting, worker, waits)

    def _greeting(self, seen: tuple[int, float] | None, t: float, decisions: Decided
                  ) -> int | None:
        """The server's first words a call on their connection answers: only if they came
        within the window before it, the first on their connection (`_first_words`), and no
        other node's walk has linked them (a reply to a call that left before the trace, or
        whose packet the caller's ring lost, is no greeting: the server's walk links it to
        the request it saw)."""
        if seen is None or t - seen[1] > self.settings.window_s or seen[0] in decisions \
                or not self.may_greet[seen[0]]:
            return None
        return seen[0]

    def _reply_weight(self, model: DelayModel, seen: Observables | None, parent: int,
                      reply: int, delay_s: float) -> float:
        """The log weight of a node's reply after its context's latest message."""
        weight = model.reply_density(self.src[parent], self.src[reply], self.dst[reply],
                                     delay_s)
        return math.log(weight * (seen.reply(parent, reply) if seen is not None else 1.0))

    def refit(self, decided: Decided, until_s: float | None = None
              ) -> tuple[DelayModel, Observables]:
        """Lognormals per transition and per pair from the messages' most likely parents,
        and their sizes' dependence; spontaneous rates per pair from the calls made with no
        context ready."""
        m = self.trace.messages
        n = len(decided)
        msg = np.fromiter(decided, dtype=np.int64, count=n)
        parent = np.full(n, -1, dtype=np.int64)
        best_p, spontaneous = np.zeros(n), np.zeros(n)
        for k, (links, spont) in enumerate(decided.values()):
            spontaneous[k] = spont
            if links:
                parent[k], best_p[k] = max(links, key=itemgetter(1))
        reply = self.trace.is_reply()[msg]
        # a call after a server's greeting is weighed, as it was chosen, from its context's
        # latest message: the greeting's parent; the greetings are no answers
        row = {int(x): k for k, x in enumerate(msg.tolist())}
        greeting = np.zeros(n, dtype=bool)
        for call, g in self.greeted_calls.items():
            if call in row and g in row:
                k, kg = row[call], row[g]
                greeting[kg] = True
                parent[k], best_p[k], spontaneous[k] = parent[kg], best_p[kg], spontaneous[kg]
        # replies: their parent is their context's latest; calls: linked if more likely
        # than spontaneous
        linked = (parent >= 0) & (reply | (best_p > spontaneous)) & ~greeting
        # the spontaneous rates count the calls no context could have made, not those
        # found spontaneous: those would feed on themselves pass after pass
        alone = np.isin(msg, np.asarray(self.unexplained, dtype=np.int64))
        node, callee = m.src[msg], m.dst[msg]
        delay = self.out_t[msg] - self.in_t[np.maximum(parent, 0)]
        sender = m.src[np.maximum(parent, 0)]
        calls, answers = linked & ~reply, linked & reply
        times = np.concatenate([self.out_t, self.in_t])
        end = float(np.nanmax(times)) if until_s is None else until_s
        duration = max(end - float(np.nanmin(times)), self.settings.window_s)
        rates = {pair: (k + 0.5) / duration for pair, k in _pair_counts(
            node[alone], callee[alone]).items()}
        # how often a pair's calls came after their request was answered: fire-and-forget
        # where the application does it, else only a closed context crowding an open one
        placed = np.asarray([self.placements.get(k) for k in msg[calls].tolist()], dtype=object)
        per_pair = _pair_counts(node[calls], callee[calls])
        after = _pair_counts(node[calls][placed == Placement.AFTERWARD],
                             callee[calls][placed == Placement.AFTERWARD])
        parallel = _pair_counts(node[calls][placed == Placement.SIBLING],
                                callee[calls][placed == Placement.SIBLING])
        afterward = {pair: (after.get(pair, 0) + 0.5) / (k + 1) for pair, k in per_pair.items()}
        siblings = {pair: (parallel.get(pair, 0) + 0.5) / (k + 1)
                    for pair, k in per_pair.items()}
        transition = np.column_stack([sender, node, callee])
        return DelayModel(
            self.d, self.settings.spontaneous_y, self.settings.window_s,
            transitions=fit_lognormals(transition[calls], delay[calls], MIN_FIT_SAMPLES),
            pairs=fit_lognormals(transition[calls][:, 1:], delay[calls], MIN_FIT_SAMPLES),
            spontaneous_per_s=rates, default_spontaneous_per_s=0.5 / duration,
            afterward=afterward, siblings=siblings,
            replies=fit_lognormals(transition[answers], delay[answers], MIN_FIT_SAMPLES),
            reply_pairs=fit_lognormals(transition[answers][:, 1:], delay[answers],
                                       MIN_FIT_SAMPLES),
        ), Observables(self.trace, parent[linked], msg[linked])

    def result(self, decided: Decided) -> LinkProbabilities:
        """The decided links; §5.1's candidates for the messages left undecided (sent while
        untraced, replies to requests before the trace)."""
        undecided = np.ones(len(self.trace.messages), dtype=bool)
        undecided[np.fromiter(decided, dtype=np.int64, count=len(decided))] = False
        base = wap5_probabilities(self.trace, self.settings, self.d, only=undecided)
        return _replace(base, decided, self.in_t)


def _pair_counts(node: np.ndarray, callee: np.ndarray) -> dict[tuple[int, int], int]:
    if len(node) == 0:
        return {}
    unique, count = np.unique(np.column_stack([node, callee]), axis=0, return_counts=True)
    return {(a, b): k for (a, b), k in zip(unique.tolist(), count.tolist(), strict=True)}


def _options(walker: ContextWalker, chosen: tuple[list[tuple[int, float]], float]
             ) -> list[tuple[int | None, float, Placement]]:
    """A call's options in one hypothesis: each candidate parent with its weight and where
    it would put the call, and being spontaneous."""
    links, spontaneous = chosen
    options: list[tuple[int | None, float, Placement]] = [(None, spontaneous, Placement.ROOT)]
    options += [(parent, weight, placement_after(walker, parent)) for parent, weight in links]
    return options


def _events_by_node(trace: Trace, out_t: np.ndarray, in_t: np.ndarray, nil_send: np.ndarray,
                    nil_recv: np.ndarray
                    ) -> Iterator[tuple[int, tuple[list[float], list[bool], list[int]]]]:
    """Per traced node, its events' times, whether each departs, and their messages, in time
    order, arrivals before departures at equal times (a message received at the instant
    another leaves may be its cause, as in the candidates). A message from a node to itself
    (two processes of a host seen by its capture) arrives after it left, never before."""
    m = trace.messages
    arrivals = np.flatnonzero(~nil_recv)
    departures = np.flatnonzero(~nil_send)
    own = (m.src[arrivals] == m.dst[arrivals]) & ~nil_send[arrivals]
    node = np.concatenate([m.dst[arrivals], m.src[departures]])
    time = np.concatenate([np.where(own, np.fmax(in_t[arrivals], out_t[arrivals]),
                                    in_t[arrivals]), out_t[departures]])
    rank = np.concatenate([np.where(own, 2, 0), np.ones(len(departures), np.int8)])
    departing = np.concatenate([np.zeros(len(arrivals), bool), np.ones(len(departures), bool)])
    msg = np.concatenate([arrivals, departures])
    order = np.lexsort((rank, time, node))
    node, time, departing, msg = (a[order].tolist() for a in (node, time, departing, msg))
    if not node:  # an empty trace
        return
    bounds = np.flatnonzero(np.diff(node)) + 1
    starts = [0, *bounds.tolist()]
    ends = [*bounds.tolist(), len(node)]
    for a, b in zip(starts, ends, strict=True):
        yield node[a], (time[a:b], departing[a:b], msg[a:b])  # zipped as walked: no tuples kept


def _replace(base: LinkProbabilities, decided: Decided,
             in_t: np.ndarray) -> LinkProbabilities:
    """`base` with the candidates of the decided children replaced by the decided ones."""
    n = len(base.p_spontaneous)
    keep = ~np.isin(base.links.child, np.fromiter(decided, dtype=np.int64, count=len(decided)))
    child = [base.links.child[keep]]
    parent = [base.links.parent[keep]]
    p = [base.p[keep]]
    p_spontaneous = base.p_spontaneous.copy()
    new_child, new_parent, new_p = [], [], []
    for msg, (links, spontaneous) in decided.items():
        p_spontaneous[msg] = spontaneous
        for par, prob in links:
            new_child.append(msg)
            new_parent.append(par)
            new_p.append(prob)
    child.append(np.asarray(new_child, dtype=np.int64))
    parent.append(np.asarray(new_parent, dtype=np.int64))
    p.append(np.asarray(new_p, dtype=float))
    all_child = np.concatenate(child)
    all_parent = np.concatenate(parent)
    all_p = np.concatenate(p)
    out_t = base.links.out_time_s
    delay = out_t[all_child] - in_t[all_parent]
    order = np.lexsort((-in_t[all_parent], all_child))  # per child, latest first
    all_child, all_parent, all_p, delay = (a[order] for a in (all_child, all_parent, all_p,
                                                              delay))
    start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(all_child, minlength=n), out=start[1:])
    return LinkProbabilities(Candidates(all_child, all_parent, delay, start, out_t), all_p,
                             p_spontaneous)

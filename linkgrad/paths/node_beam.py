"""Deciding a node's calls jointly: a beam of hypotheses over its event stream.

Choosing each call's context greedily, the moment it leaves, is wrong whenever two contexts
are ready at once: the first call takes whichever of them explains it better *alone*, and
the second call is left with the other even when that explains it badly. Under load that is
the common case (an event loop serves the older context first; a greedy choice by density
often takes the younger). So each way of placing a call whose context is in doubt is kept as
a hypothesis with its log-likelihood (the sum of the log weights of its choices, and of its
replies' delays once fitted), and later events decide: the next call, and above all the
node's reply, whose request's context is known, so a context that lost its call to a
swapped one answers after an unlikely delay.

Hypotheses more than `MAX_LOG_RATIO` below the best are dropped, and at most `BEAM_WIDTH`
are kept. Where one hypothesis is left, its choices since the last such point are final;
where several are, each choice's probability is the weight of the hypotheses making it (their
softmax). Choices are kept as a linked list shared between hypotheses, and walkers share
their contexts (`contexts`), so a branch costs a few dict copies, not the history.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from linkgrad.paths.contexts import ContextWalker
from linkgrad.paths.messages import NO_THREAD

__all__ = [
    "BEAM_WIDTH",
    "MAX_LOG_RATIO",
    "MAX_UNDECIDED",
    "Choice",
    "Decided",
    "Hypothesis",
    "NodeBeam",
    "Option",
    "Placement",
    "placement_after",
]

BEAM_WIDTH = 16
MAX_LOG_RATIO = math.log(1e4)  # a hypothesis 10⁴ times less likely than the best is dropped
MAX_UNDECIDED = 20_000  # choices held before the beam is cut to its best hypothesis


class Placement(Enum):
    OPEN = "open"  # in a context waiting on nothing
    SIBLING = "sibling"  # in a context that had just sent another call
    AFTERWARD = "afterward"  # in a context answered just before
    ROOT = "root"  # spontaneous: roots a context of its own
    REPLY = "reply"  # a reply, its parent its request's context's latest message
    GREETING = "greeting"  # a server's first words on a connection: the caller's context's


@dataclass(frozen=True)
class Choice:
    msg: int
    parent: int | None  # None: spontaneous
    placement: Placement
    before: Choice | None


@dataclass
class Hypothesis:
    log_likelihood: float
    walker: ContextWalker
    choices: Choice | None = None  # the latest; earlier ones through `before`


# (parent or None: spontaneous, weight, placement)
Option = tuple[int | None, float, Placement]
# message -> ([(parent, probability)], probability of being spontaneous)
Decided = dict[int, tuple[list[tuple[int, float]], float]]


class NodeBeam:
    """The hypotheses about one node's calls, pruned as its events come.

    `decisions` are filled in as choices become final; `placements`: where the most likely
    hypothesis put each call. While one hypothesis is left (most of the
    time) choices go straight there."""

    def __init__(self, walker: ContextWalker, decisions: Decided,
                 placements: dict[int, Placement], width: int = BEAM_WIDTH) -> None:
        self.width = width
        self.hypotheses = [Hypothesis(0.0, walker)]
        self.decisions, self.placements = decisions, placements
        self.undecided = 0

    def decided_alone(self, links: list[tuple[int, float]], spontaneous: float, msg: int,
                      conn: int, t: float, worker: int = NO_THREAD, waits: bool = True
                      ) -> bool:
        """With one hypothesis, a call whose likeliest option outweighs every other beyond
        the beam's ratio is decided at once (most calls; `branch` would do the same with
        lists and sorting). False: not so clear, `branch` it."""
        best, best_w, second = None, spontaneous, 0.0
        for parent, w in links:
            if w > best_w:
                best, best_w, second = parent, w, max(best_w, second)
            elif w > second:
                second = w
        if best_w <= 0 or (self.width > 1 and second > 0
                           and math.log(best_w) - math.log(second) <= MAX_LOG_RATIO):
            return False
        walker = self.hypotheses[0].walker
        if best is None:
            self.decisions[msg], self.placements[msg] = ([], 1.0), Placement.ROOT
        else:
            self.decisions[msg] = ([(best, 1.0)], 0.0)
            self.placements[msg] = placement_after(walker, best)
        walker.call_sent(conn, best, t, worker, waits)
        return True

    def forced(self, msg: int, parent: int, conn: int, t: float, worker: int = NO_THREAD,
               waits: bool = True) -> None:
        """A call every hypothesis puts after `parent`, with nothing else to choose: decided
        at once, each walker following it and the odds between them as they were."""
        self.decisions[msg] = ([(parent, 1.0)], 0.0)
        self.placements[msg] = placement_after(self.hypotheses[0].walker, parent)
        for h in self.hypotheses:
            h.walker.call_sent(conn, parent, t, worker, waits)
        # pruned and settled as `branch` would: a reply since may have sunk some too far
        best = self.hypotheses[0].log_likelihood  # the likeliest first, always
        self.hypotheses = [h for h in self.hypotheses
                           if h.log_likelihood >= best - MAX_LOG_RATIO]
        self.undecided += 1
        if len(self.hypotheses) == 1 or self.undecided > MAX_UNDECIDED:
            self.settle()

    def branch(self, options: list[list[Option]], msg: int, conn: int, t: float,
               greeting: int | None = None, worker: int = NO_THREAD, waits: bool = True
               ) -> None:
        """Each hypothesis's options for call `msg` (on `conn`, leaving at `t`, from `worker`
        if a hidden worker's; `waits`: its context waits for an answer) taken as new
        hypotheses, then pruned. After a `greeting` (the server spoke first: MySQL's
        handshake), the call answers it, and the greeting hangs
        from the option's parent: the context that opened the connection (its SYN carries no
        payload to see)."""
        grown: list[tuple[float, int, int | None, Placement]] = []
        for k, (h, opts) in enumerate(zip(self.hypotheses, options, strict=True)):
            for parent, weight, placement in opts:
                if weight > 0:
                    grown.append((h.log_likelihood + math.log(weight), k, parent, placement))
        if not grown:  # nothing can have caused it: spontaneous in every hypothesis
            grown = [(h.log_likelihood, k, None, Placement.ROOT)
                     for k, h in enumerate(self.hypotheses)]
        best = max(g[0] for g in grown)
        grown = [g for g in grown if g[0] >= best - MAX_LOG_RATIO]
        if self.width == 1:  # greedy: the best option alone, but as likely as it is
            grown = [max(grown, key=lambda g: g[0])]
        if len(grown) == 1 and len(self.hypotheses) == 1:  # no doubt: decided at once
            _, _, parent, placement = grown[0]
            if greeting is not None:
                self.decisions[greeting] = ([(parent, 1.0)], 0.0) if parent is not None \
                    else ([], 1.0)
                self.decisions[msg] = ([(greeting, 1.0)], 0.0)
            else:
                self.decisions[msg] = ([(parent, 1.0)], 0.0) if parent is not None \
                    else ([], 1.0)
            self.placements[msg] = placement
            self.hypotheses[0].walker.call_sent(conn, parent, t, worker, waits)
            return
        grown.sort(key=lambda g: -g[0])
        by_hypothesis: dict[int, list[tuple[float, int, int | None, Placement]]] = {}
        for g in grown[:self.width]:
            by_hypothesis.setdefault(g[1], []).append(g)
        survivors = []
        for k, taken in by_hypothesis.items():
            h = self.hypotheses[k]  # its other options branch from copies made first
            copies = [Hypothesis(h.log_likelihood, h.walker.copy(), h.choices)
                      for _ in taken[1:]]
            for (score, _, parent, placement), one in zip(taken, [h, *copies], strict=True):
                one.log_likelihood = score - best  # relative to the best: stays small
                if greeting is not None:
                    one.choices = Choice(greeting, parent, Placement.GREETING, one.choices)
                    one.choices = Choice(msg, greeting, placement, one.choices)
                else:
                    one.choices = Choice(msg, parent, placement, one.choices)
                one.walker.call_sent(conn, parent, t, worker, waits)
                survivors.append(one)
        survivors.sort(key=lambda h: -h.log_likelihood)
        # merged where a call split a hypothesis: hypotheses that came to be alike otherwise
        # wait for the next split, not worth a signature each on every call (a worker going
        # on with its request in every hypothesis)
        split = len(survivors) > len(by_hypothesis)
        self.hypotheses = _distinct(survivors) if split else survivors
        self.undecided += 1
        if len(self.hypotheses) == 1 or self.undecided > MAX_UNDECIDED:
            self.settle()

    def reply(self, msg: int, parents: list[int | None], log_weights: list[float],
              before_trace: bool = False) -> None:
        """Each hypothesis's parent for the node's reply `msg` (None: its request is not in
        the trace) and the log weight of its delay. `before_trace`: it answers a request
        from before the trace (`structural._first_words`); then, where no
        hypothesis has a request for it, it is a root, no other message its parent (left to
        §5.1 it joined another request's tree)."""
        if all(p is None for p in parents):
            if before_trace:
                self.decisions[msg] = ([], 1.0)
            return
        if len(self.hypotheses) == 1:
            self.decisions[msg] = ([(parents[0], 1.0)], 0.0)
            return
        for h, parent, lw in zip(self.hypotheses, parents, log_weights, strict=True):
            h.log_likelihood += lw
            if parent is not None:
                h.choices = Choice(msg, parent, Placement.REPLY, h.choices)
        self.hypotheses.sort(key=lambda h: -h.log_likelihood)  # the likeliest first, always
        self.undecided += 1

    def settle(self) -> None:
        """The choices made since the last settling, weighed by the hypotheses that make
        them; the beam cut to its best hypothesis."""
        top = max(h.log_likelihood for h in self.hypotheses)
        weights = [math.exp(h.log_likelihood - top) for h in self.hypotheses]
        total = sum(weights)
        best = max(range(len(weights)), key=weights.__getitem__)
        chosen: dict[int, dict[int | None, float]] = {}
        for k, (h, w) in enumerate(zip(self.hypotheses, weights, strict=True)):
            c = h.choices
            while c is not None:
                parents = chosen.setdefault(c.msg, {})
                parents[c.parent] = parents.get(c.parent, 0.0) + w / total
                if k == best and c.placement not in (Placement.REPLY, Placement.GREETING):
                    self.placements[c.msg] = c.placement
                c = c.before
        for msg, parents in chosen.items():
            self.decisions[msg] = ([(p, w) for p, w in parents.items() if p is not None],
                                   parents.get(None, 0.0))
        self.hypotheses = [Hypothesis(0.0, self.hypotheses[best].walker)]
        self.undecided = 0


def placement_after(walker: ContextWalker, parent: int) -> Placement:
    """Where a call after `parent` goes in `walker`: after an answer if `parent` is no open
    context's latest, beside a call that context just sent, or in it, waiting on nothing."""
    ctx = walker.context_of.get(parent)
    if ctx is None:
        return Placement.AFTERWARD
    return Placement.SIBLING if walker.open[ctx].acted_s is not None else Placement.OPEN


def _distinct(hypotheses: list[Hypothesis]) -> list[Hypothesis]:
    """The best of each set of hypotheses whose walkers are alike from here on (Viterbi's
    merging: what follows weighs them alike, so the lesser can never win). A signature walks
    the whole walker in Python; walkers alike have the same requests pending and calls
    outstanding by connection, sets made at C speed, so only those are compared in full."""
    rough = [(frozenset(h.walker.pending), frozenset(h.walker.calls)) for h in hypotheses]
    if len(set(rough)) == len(rough):
        return hypotheses
    seen: set[tuple[frozenset, frozenset]] = set()
    kept = []
    for h, key in zip(hypotheses, rough, strict=True):  # best first
        if rough.count(key) > 1:
            full = h.walker.signature()
            if full in seen:
                continue
            seen.add(full)
        kept.append(h)
    return kept

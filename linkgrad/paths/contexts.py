"""One node's request contexts, followed through its events in time order.

- A request arriving on a connection the node serves opens a context; its latest message is
  the request.
- A call the node sends is put in a context (the linker's choice); the reply coming back on
  that connection becomes that context's latest message.
- The node's reply on a connection answers the request last received on it: its parent is
  that context's latest message, and the context closes.
- A context *waits* from the moment it sends a call until a message arrives in it: sequential
  code does nothing more until the answer is back. Parallel calls leave within `fanout_s` of
  each other, so a context that sent a call that recently may still send another.
- A handler may fire a call as it answers (fire-and-forget: the call leaves just after the
  reply, an event loop's next turn), or go on working once the answer is out (PHP's work
  after the response: queries in a row): a context that closed, or last heard back from
  such a call, less than `afterward_s` ago may still send one.
- A call nothing answers (a connection's last message: MySQL's COM_QUIT) does not make its
  context wait. On a node serving one request per thread, a thread with no request open is
  still working on the last it answered, however long ago (within the window).
- A spontaneous call roots a context that opens when its first answer arrives (a timer's
  chain of calls). Contexts with no message for longer than the window are forgotten.
- A worker (a thread of a process the node hands its requests to, unseen: `hidden_workers`)
  serves one request at a time: once one of its calls is put in a request's context, its
  calls are that context's while it is open; a free worker's first call starts one of the
  oldest requests that have sent nothing yet (a pool takes its queue in order of arrival),
  or goes on with the chain its own spontaneous call began (a request that arrived before
  the trace did).

A walker is copied when a call's context is in doubt (`node_beam`), so it keeps only what is
live: open contexts, requests not yet answered, calls not yet answered. Copies share their
contexts (a context is never changed once made: a change replaces it), so a copy costs a few
dict copies at C speed, not a Python loop over a busy server's hundreds of open requests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from linkgrad.paths.messages import NO_THREAD

__all__ = [
    "SWEEPS_PER_WINDOW",
    "WAITING_LIMIT_S",
    "WAITING_OFFERED",
    "Context",
    "ContextWalker",
    "is_waiting",
]

SWEEPS_PER_WINDOW = 8  # how often forgotten contexts are let go (they are never offered)
# A pool of workers takes waiting requests in their order of arrival (Passenger's queue,
# a listen backlog, PHP-FPM's): a free worker's first call belongs to one of the oldest
# few not yet started (two workers taking the two oldest may call first in either order)
WAITING_OFFERED = 2
# A request waiting for its worker or thread longer than this is let go: no client waits
# so long (its reply was lost, or it was given up); kept, it would be offered for ever
WAITING_LIMIT_S = 60.0


@dataclass(slots=True)
class Context:
    """Shared between copies of a walker: replaced, never changed."""

    opened_s: float
    latest_s: float
    latest: int  # message
    acted_s: float | None = None  # when it last sent a call since `latest` arrived
    closed: bool = False  # answered already (offered only to a fire-and-forget call)
    rooted: bool = False  # opened by the answer to a spontaneous call, not by a request
    served: int | None = None  # the connection its request came on
    thread: int = NO_THREAD  # the thread that received its request (or its first answer)
    worker: int = NO_THREAD  # the worker thread serving it (module doc)


def is_waiting(c: Context) -> bool:
    """A request that has sent nothing yet and no worker has taken."""
    return c.worker == NO_THREAD and c.acted_s is None and c.latest_s == c.opened_s \
        and not c.rooted and not c.closed


class ContextWalker:
    def __init__(self, window_s: float, fanout_s: float, afterward_s: float,
                 thread_bound: bool = False, queues: bool = False) -> None:
        self.window_s, self.fanout_s, self.afterward_s = window_s, fanout_s, afterward_s
        # a node serving one request per thread: an answered request stays its thread's
        self.thread_bound = thread_bound
        # a node handing requests to hidden workers: a request may wait for one longer than
        # the window (an overloaded pool's queue); it is kept until a worker takes it
        self.queues = queues
        self.open: dict[int, Context] = {}  # oldest first
        self.rooted: dict[int, float] = {}  # spontaneous calls' contexts, no answer yet
        self.context_of: dict[int, int] = {}  # latest message -> its open context
        self.pending: dict[int, int] = {}  # connection (served) -> its request's context
        self.calls: dict[int, int] = {}  # connection (called) -> its last call's context
        self.just_closed: dict[int, tuple[float, Context]] = {}  # answered within afterward_s
        # thread -> its answered contexts (a call on a thread looks at its own, not at every
        # answered request of a node that keeps them for the window); may hold expired ones
        self.closed_by_thread: dict[int, tuple[int, ...]] = {}
        self.now_s = -math.inf  # the latest time asked about
        self.next_expiry_s = -math.inf
        # thread -> its contexts, oldest first (tuples: shared between copies, replaced)
        self.by_thread: dict[int, tuple[int, ...]] = {}
        self.worker_of: dict[int, int] = {}  # worker thread -> the context it serves
        self.next_id = 0
        self.next_sweep_s = -math.inf

    def copy(self) -> ContextWalker:
        new = ContextWalker.__new__(ContextWalker)
        new.window_s, new.fanout_s, new.afterward_s = self.window_s, self.fanout_s, \
            self.afterward_s
        new.thread_bound, new.queues = self.thread_bound, self.queues
        new.open = dict(self.open)
        new.rooted = dict(self.rooted)
        new.context_of = dict(self.context_of)
        new.pending = dict(self.pending)
        new.calls = dict(self.calls)
        new.just_closed = dict(self.just_closed)  # answered contexts: replaced, not changed
        new.closed_by_thread = dict(self.closed_by_thread)
        new.now_s, new.next_expiry_s = self.now_s, self.next_expiry_s
        new.by_thread = dict(self.by_thread)
        new.worker_of = dict(self.worker_of)
        new.next_id, new.next_sweep_s = self.next_id, self.next_sweep_s
        return new

    def signature(self) -> tuple[frozenset, frozenset]:
        """What decides this walker's future: two walkers with equal signatures treat every
        later event alike (contexts named by their latest message: ids differ by history)."""
        def name(ctx: int) -> tuple[object, ...]:
            c = self.open.get(ctx)
            if c is not None:
                return ("open", c.latest, c.acted_s)
            closed = self.just_closed.get(ctx)
            if closed is not None:
                return ("closed", closed[1].latest)
            return ("rooted",) if ctx in self.rooted else ("gone",)
        # a spontaneous call's context that has not acted is left out, an approximation: it
        # only offers later calls one more parent, and hypotheses that differ in it alone
        # would otherwise be kept apart for a whole window (the beam full of them)
        return (frozenset((c.latest, c.acted_s, c.served, c.worker) for c in self.open.values()
                          if not c.rooted or c.acted_s is not None),
                frozenset([*(("call", conn, name(ctx)) for conn, ctx in self.calls.items()),
                           *(("closed", c.latest, t) for t, c in self.just_closed.values()
                             if not self._expired(t, c, self.now_s))]))

    def _new(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def _arrive(self, ctx: int, t: float, msg: int) -> None:
        c = self.open[ctx]
        self.context_of.pop(c.latest, None)
        self.open[ctx] = Context(c.opened_s, t, msg, None, c.closed, c.rooted, c.served,
                                 c.thread, c.worker)
        self.context_of[msg] = ctx

    def _close(self, ctx: int) -> None:
        c = self.open.pop(ctx, None)
        if c is not None:
            self.context_of.pop(c.latest, None)
            if c.served is not None and self.pending.get(c.served) == ctx:
                del self.pending[c.served]

    def request_arrived(self, conn: int, msg: int, t: float, thread: int = NO_THREAD) -> None:
        earlier = self.pending.get(conn)
        if earlier is not None and is_waiting(self.open[earlier]):
            # a connection carries one request at a time: one still waiting when the next
            # comes was answered unseen (or never will be), and must not wait on for ever
            self._close(earlier)
        ctx = self._new()
        self.open[ctx] = Context(t, t, msg, served=conn, thread=thread)
        if thread != NO_THREAD:
            self._on_thread(thread, ctx)
        self.context_of[msg] = ctx
        self.pending[conn] = ctx

    def reply_arrived(self, conn: int, msg: int, t: float, thread: int = NO_THREAD) -> None:
        ctx = self.calls.pop(conn, None)  # a connection's messages alternate: one answer
        if ctx is None:
            return
        if ctx in self.rooted:
            del self.rooted[ctx]
            self.open[ctx] = Context(t, t, msg, rooted=True, thread=thread)
            if thread != NO_THREAD:
                self._on_thread(thread, ctx)
            self.context_of[msg] = ctx
        elif ctx in self.open:
            self._arrive(ctx, t, msg)
        elif ctx in self.just_closed:  # work after the answer goes on: a chain of calls
            at, c = self.just_closed[ctx]
            if not self._expired(at, c, t):
                self.just_closed[ctx] = (t, replace(c, latest_s=t, latest=msg, acted_s=None))

    def answers_busy_worker(self, conn: int) -> bool:
        """Whether the node's reply on `conn` would answer a request whose hidden worker
        still waits for a call's answer (a worker serves its request sequentially: it
        cannot be, unless this walker gave the worker's calls to the wrong request)."""
        ctx = self.pending.get(conn)
        c = self.open.get(ctx) if ctx is not None else None
        return c is not None and c.worker != NO_THREAD and c.acted_s is not None

    def chain_of(self, worker: int) -> Context | None:
        """The open chain `worker`'s own call began (a request from before the trace), if it
        is on one."""
        ctx = self.worker_of.get(worker)
        c = self.open.get(ctx) if ctx is not None else None
        return c if c is not None and c.rooted else None

    def serves_request(self, worker: int) -> bool:
        """Whether hidden `worker` is on a request of the trace not yet answered (it takes
        no other until it answers that one)."""
        ctx = self.worker_of.get(worker)
        c = self.open.get(ctx) if ctx is not None else None
        return c is not None and not c.rooted

    def workers_on_chains(self) -> int:
        """How many hidden workers are on a chain their own call began (a request from
        before the trace, unseen)."""
        return sum(1 for ctx in self.worker_of.values() if ctx in self.rooted or (
            (c := self.open.get(ctx)) is not None and c.rooted))

    def answer(self, conn: int, t: float) -> int | None:
        """The parent of this node's reply on `conn` (None: its request is not in the trace),
        closing that request's context."""
        if t >= self.next_expiry_s:  # a node that never calls is never asked `ready`
            self._expire(t)
        ctx = self.pending.pop(conn, None)
        c = self.open.get(ctx) if ctx is not None else None
        if c is None:
            return None
        self._close(ctx)
        self.just_closed[ctx] = (t, replace(c, closed=True))
        if c.thread != NO_THREAD:
            self.closed_by_thread[c.thread] = (*self.closed_by_thread.get(c.thread, ()), ctx)
            if self.thread_bound:
                self._over_on_thread(c)
        return c.latest

    def _over_on_thread(self, answered: Context) -> None:
        """A thread serving its requests one at a time that answers one is done with a chain
        its calls rooted (a request from before the trace, unseen): left open, that would
        stay the thread's own and take the calls of its next requests. (An earlier request
        still open is not: a few are answered out of order, `threads`. The chain's own
        reply, to a request the trace did not see, answers nothing here: the chain ends at
        the thread's next answer.)"""
        for k in self.by_thread.get(answered.thread, ()):
            c = self.open.get(k)
            if c is not None and c.rooted:
                self._close(k)

    def ready(self, t: float, thread: int | None = None, worker: int | None = None
              ) -> list[Context]:
        """The open contexts that may send a call at `t` (not waiting), oldest first; with
        `thread`, only that thread's (a node serving one request per thread: a lookup, not
        a walk over hundreds of open requests); with `worker`, the request it serves while
        that is open, else the requests no worker has started and its own chain (module
        doc)."""
        self.now_s = t
        if self.just_closed and t >= self.next_expiry_s:
            self._expire(t)
        if t >= self.next_sweep_s:
            self._sweep(t)
        fresh, fanout = t - self.window_s, self.fanout_s
        if worker is not None:
            taken = self.worker_of.get(worker)
            own = self.open.get(taken) if taken is not None else None
            if own is not None and not own.rooted:
                candidates: Iterable[Context] = (own,)
                serving = True
            else:
                # a free worker takes a request no worker has started: one that has sent
                # nothing yet; or goes on with the chain its spontaneous call began (a
                # request that came before the trace)
                waiting = [c for c in self.open.values() if is_waiting(c)
                           and (self.queues or c.latest_s >= fresh)]
                waiting.sort(key=lambda c: c.opened_s)
                candidates = waiting[:WAITING_OFFERED]
                if own is not None and own.latest_s >= fresh and (
                        own.acted_s is None or t - own.acted_s <= fanout):
                    candidates.append(own)
                return candidates + self._closed_ready(t, thread, worker, False)
        elif thread is None:
            candidates = self.open.values()
            serving = bool(candidates)
        else:
            # a thread serves one request at a time: the one it has begun; or, if none,
            # one of those that reached it and wait their turn (in the listen backlog,
            # however long: not swept) -- mostly the oldest, but a kept-alive connection's
            # next request can come first, so each is offered; a chain its spontaneous
            # calls rooted only when it has no request
            mine = [c for k in self.by_thread.get(thread, ()) if (c := self.open.get(k))]
            begun = next((c for c in mine if not c.rooted and not is_waiting(c)), None)
            waiting = [c for c in mine if is_waiting(c)]
            serving = begun is not None or (bool(mine) and not waiting)
            if begun is None and waiting:
                # a request that has done nothing yet may also wait behind the work its
                # thread goes on with after answering the last one (PHP's deferred updates,
                # MediaWiki's jobs)
                return waiting + self._closed_ready(t, thread, worker, False)
            candidates = (begun,) if begun is not None else mine[:1]  # or a rooted chain
        ready = [c for c in candidates if c.latest_s >= fresh and (
            c.acted_s is None or t - c.acted_s <= fanout)]
        return ready + self._closed_ready(t, thread, worker, serving)

    def _closed_ready(self, t: float, thread: int | None, worker: int | None,
                      serving: bool) -> list[Context]:
        """The answered contexts that may still send a call at `t` (module doc); `serving`:
        the thread or worker has a request open (a thread's: one it has begun, or a chain
        its calls rooted with no request waiting)."""
        ready: list[Context] = []
        fanout = self.fanout_s
        if self.just_closed:
            soon = t - self.afterward_s
            answered = self.just_closed.values() if thread is None else [
                self.just_closed[k] for k in self.closed_by_thread.get(thread, ())
                if k in self.just_closed]
            # a worker's own first: the cheapest test, and most answered contexts fail it
            closed = [(at, c) for at, c in answered if (worker is None or c.worker == worker)
                      and (thread is None or c.thread == thread)
                      and (c.acted_s is None or t - c.acted_s <= fanout)
                      and not self._expired(at, c, t)]
            ready += [c for at, c in closed if at >= soon or c.acted_s is not None]
            if thread is not None and not serving and closed:
                # a thread that serves one request at a time and has none open, or one
                # that has not begun, may still be working on the last it answered (PHP's
                # work after the response), however long after its answer
                at, last = max(closed, key=lambda x: x[0])
                if at < soon and last.acted_s is None:
                    ready.append(last)
        return ready

    def _expired(self, at: float, c: Context, t: float) -> bool:
        """Whether an answered context may no longer send a call at `t`: one waiting on its
        own call waits as an open one would; one its thread answered is its thread's until
        that serves another (`_closed_ready`)."""
        return at < t - (self.afterward_s if c.acted_s is None and not (
            self.thread_bound and c.thread != NO_THREAD) else self.window_s)

    def _expire(self, t: float) -> None:
        """Let go of the answered contexts expired at `t` (between two passes, `_expired`
        keeps them from being offered: a pass per call would walk them all each time)."""
        for ctx in [k for k, (at, c) in self.just_closed.items() if self._expired(at, c, t)]:
            del self.just_closed[ctx]
        self.closed_by_thread = {
            thread: kept for thread, ctxs in self.closed_by_thread.items()
            if (kept := tuple(k for k in ctxs if k in self.just_closed))}
        self.next_expiry_s = t + self.window_s / SWEEPS_PER_WINDOW

    def _on_thread(self, thread: int, ctx: int) -> None:
        self.by_thread[thread] = (*(k for k in self.by_thread.get(thread, ())
                                    if k in self.open), ctx)

    def _sweep(self, t: float) -> None:
        """Forget the contexts silent for the window, spontaneous calls unanswered for it,
        and calls whose context is gone (the last call on a connection is often never
        answered: MySQL's COM_QUIT on a connection per request; kept, they would pile up
        and every signature would walk them)."""
        for ctx in [k for k, c in self.open.items() if c.latest_s < t - self.window_s
                    and not (is_waiting(c) and c.opened_s >= t - WAITING_LIMIT_S and (
                        self.queues or (self.thread_bound and c.thread != NO_THREAD)))]:
            self._close(ctx)
        for ctx in [k for k, at in self.rooted.items() if at < t - self.window_s]:
            del self.rooted[ctx]
        live = self.open.keys() | self.just_closed.keys() | self.rooted.keys()
        for conn in [k for k, ctx in self.calls.items() if ctx not in live]:
            del self.calls[conn]
        self.next_sweep_s = t + self.window_s / SWEEPS_PER_WINDOW

    def call_sent(self, conn: int, parent: int | None, t: float,
                  worker: int = NO_THREAD, waits: bool = True) -> None:
        """Put the call in its parent's context, or in a new one it roots; a `worker`'s call
        in a request's context makes the worker that context's (module doc). A call that is
        never answered (not `waits`) leaves its context as ready as it was."""
        ctx = self.context_of.get(parent) if parent is not None else None
        if ctx is None and parent is not None:
            ctx = next((k for k, (_, c) in self.just_closed.items() if c.latest == parent), None)
            if ctx is not None:  # after its answer: it waits for this call's, as an open one
                at, c = self.just_closed[ctx]
                if waits:
                    self.just_closed[ctx] = (at, replace(c, acted_s=t))
                self.calls[conn] = ctx
                return
        if ctx is None:
            ctx = self._new()
            self.rooted[ctx] = t
            if worker != NO_THREAD:
                self.worker_of[worker] = ctx
        else:
            c = self.open[ctx]
            serving = c.worker
            if worker != NO_THREAD:
                serving = worker
                self.worker_of[worker] = ctx
            self.open[ctx] = Context(c.opened_s, c.latest_s, c.latest,
                                     t if waits else c.acted_s, c.closed, c.rooted,
                                     c.served, c.thread, serving)
        self.calls[conn] = ctx

"""`python -m injector`: the delay daemon, driven by JSON lines on stdin, answering on stdout.

Requests and replies are `linkgrad.protocol.injector`'s, served by
`linkgrad.protocol.jsonlines`: `{"id": 1, "cmd": "health"|"add"|"schedule"|"remove"|"stats"|
"stop", ...}`; every answer carries the request's id and `ok`, with `result` or `error`
({"kind": "input" or "runtime", "message"}). The channel is the lease: when stdin closes
(coordinator gone, SSH cut), every injection stops and every rule is removed. So do SIGTERM and
SIGINT. A watchdog process (`injector.watchdog`) lets the held packets pass and removes the
rules if the daemon is killed outright, or stalls (stopped, or a thread stuck) for half a second
while packets wait; a stalled daemon then stops, saying so, when it runs again. """

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from injector.engine import Engine
from injector.link import Endpoint, Link, parse_endpoint
from injector.nfq import require_netfilterqueue
from injector.schedule import Caps, build_schedule
from injector.watchdog import Watchdog
from linkgrad.errors import InputError, LinkgradError, Problem
from linkgrad.protocol import injector as protocol
from linkgrad.protocol import jsonlines
from linkgrad.protocol.base import Empty, Failed, Request, Result, Stopped
from linkgrad.protocol.fields import LIMIT_DURATION_S, LIMIT_MAGNITUDE_MS
from linkgrad.protocol.injector import LinkSpec
from linkgrad.protocol.jsonlines import LineWriter, StopServing


def link_from_spec(spec: LinkSpec) -> Link:
    return Link(spec.proto, _endpoint(spec.src, "link.src"), _endpoint(spec.dst, "link.dst"))


def _endpoint(text: str | None, field: str) -> Endpoint:
    return parse_endpoint(text, field) if text else Endpoint()


class Daemon:
    """Maps typed requests to the engine; no I/O of its own beyond the results it returns."""

    def __init__(self, engine: Engine, caps: Caps, clock: Callable[[], float] = time.time):
        self.engine = engine
        self.caps = caps
        self.clock = clock

    def handle(self, request: Request[Any]) -> Result:
        match request:
            case protocol.HealthRequest():
                return self.health()
            case protocol.Add(link=spec, schedule=schedule_spec):
                link = link_from_spec(spec)
                schedule = build_schedule(schedule_spec, self.clock(), self.caps)
                return protocol.Added(link_id=self.engine.add_link(link, schedule),
                                      link=str(link), schedule_id=0)
            case protocol.SetSchedule(link_id=link_id, schedule=spec):
                schedule = build_schedule(spec, self.clock(), self.caps)
                return protocol.ScheduleSet(schedule_id=self.engine.set_schedule(link_id,
                                                                                 schedule))
            case protocol.Remove(link_id=link_id):
                return protocol.Removed(stats=self.engine.remove_link(link_id))
            case protocol.StatsRequest(link_id=link_id, drop_times=drop_times):
                stats = self._stats(bool(drop_times))
                if link_id is None:
                    return protocol.AllStats(links=stats)
                # one link: {} when there is none of that id, as it always answered
                return protocol.AllStats(links={str(link_id): stats[str(link_id)]}) \
                    if str(link_id) in stats else Empty()
            case protocol.Stop():
                raise StopServing(protocol.Stopping(stats=self._stats()))
        raise InputError(Problem(f"unknown command {request.cmd!r}", field="cmd"))

    def _stats(self, drop_times: bool = False) -> dict[str, protocol.LinkStats]:
        return {str(k): v for k, v in self.engine.stats(drop_times).items()}

    def health(self) -> protocol.Health:
        stats = self.engine.stats()
        return protocol.Health(
            pid=os.getpid(), backend="nfqueue", chain=self.engine.firewall.chain,
            links=len(stats), held=sum(s.held for s in stats.values()),
            callback_errors=self.engine.callback_errors, realtime=self.engine.realtime,
            stale_removed=self.engine.stale_removed,
            caps=protocol.Caps(max_magnitude_ms=self.caps.max_magnitude_ms,
                               max_duration_s=self.caps.max_duration_s))


def _on_signal(signum: int, _frame: object) -> None:
    raise StopServing


def serve(engine: Engine, caps: Caps, stdin: IO[bytes] | IO[str], stdout: IO[str],
          reaper: Callable[[str], Watchdog | None] = Watchdog,
          clock: Callable[[], float] = time.time) -> int:
    """The daemon's life: start the engine, say ready, answer requests until stop or EOF,
    then undo everything and say stopped. (`reaper`: the watchdog, none for an in-process
    engine that changes no rules, as the tests' fake remote has; `clock`: unix time for
    schedules.) A daemon whose watchdog took over after a stall stops with its reason."""
    daemon = Daemon(engine, caps, clock)
    out = LineWriter(stdout)
    reason = "signal"
    guard = reaper(engine.firewall.chain)
    try:
        if guard is not None:
            engine.attach(guard)
        engine.start()
        out.write(protocol.InjectorReady(pid=os.getpid(), chain=engine.firewall.chain,
                                         stale_removed=engine.stale_removed))
        reason = jsonlines.serve(stdin, out, protocol.INJECTOR_REQUEST, daemon.handle)
    except StopServing:
        reason = "signal"
    finally:
        _close(engine, guard)
    if guard is not None and guard.reason is not None:
        reason = guard.reason
    out.write(Stopped(reason=reason))
    return 0


def _close(engine: Engine, watchdog: Watchdog | None) -> None:
    """Stop the engine; tell the watchdog all is clean only if it is (else it cleans up)."""
    clean = False
    try:
        engine.close()
        clean = True
    finally:
        if watchdog is not None:
            watchdog.release(clean)


MAX_QUEUE_LEN = 1 << 20
def _check_queue(queue_base: int, max_queue_len: int) -> None:
    """NFQUEUE numbers are 16 bits (the base and one per link after it)."""
    problems = []
    if not 0 <= queue_base <= 65535 - Engine.MAX_LINKS:
        problems.append(Problem(f"{queue_base} is not a queue number 0-"
                                f"{65535 - Engine.MAX_LINKS}", field="--queue"))
    if not 1 <= max_queue_len <= MAX_QUEUE_LEN:
        problems.append(Problem(f"{max_queue_len} is not a queue length 1-{MAX_QUEUE_LEN}",
                                field="--max-queue-len"))
    if problems:
        raise InputError(problems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m injector", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queue", type=int, default=4200,
                        help="base NFQUEUE number; link i uses base + i (default 4200)")
    parser.add_argument("--max-magnitude-ms", type=float, default=Caps.max_magnitude_ms,
                        help="cap on any delay (default %(default)s; at most "
                             f"{LIMIT_MAGNITUDE_MS:g})")
    parser.add_argument("--max-duration-s", type=float, default=Caps.max_duration_s,
                        help="cap on any schedule's length (default %(default)s; at most "
                             f"{LIMIT_DURATION_S:g})")
    parser.add_argument("--realtime", action="store_true",
                        help="run the engine's threads under SCHED_FIFO: accurate on a loaded "
                             "host, about 3x the CPU per packet")
    parser.add_argument("--max-queue-len", type=int, default=4096,
                        help="packets the kernel queues per link before failing open")
    args = parser.parse_args(argv)
    try:
        caps = Caps(args.max_magnitude_ms, args.max_duration_s)  # before anything is touched
        require_netfilterqueue()
        _check_queue(args.queue, args.max_queue_len)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, _on_signal)
        engine = Engine(queue_base=args.queue, max_queue_len=args.max_queue_len,
                        realtime=args.realtime)
        return serve(engine, caps, sys.stdin.buffer, sys.stdout)
    except LinkgradError as e:
        LineWriter(sys.stdout).write(Failed(message=str(e)))
        print(f"injector: {e}", file=sys.stderr)
        return e.exit_code

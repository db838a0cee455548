"""`python -m sniffer`: reports the links that carried traffic, over JSON lines on stdio.

Requests (`linkgrad.protocol.sniffer`, served by `linkgrad.protocol.jsonlines`): `{"id": 1,
"cmd": "health" | "poll" | "watch" | "unwatch" | "profile" | "unprofile" | "trace" | "untrace" |
"stop", ...}`.
`poll` answers with every link that carried at least `threshold` messages since the previous
poll; `watch` with `interval_s` emits such a report as an event (`{"event": "report", ...}`)
every interval until `unwatch`, which first emits a last report up to that moment. `profile`
runs SNAP (`linkgrad.protocol.snap`: `{"event": "snap", ...}` every report interval) until
`unprofile`, likewise with a last report. `trace` captures the host's TCP messages for causal
paths (`linkgrad.protocol.trace`: `{"event": "trace", ...}` every report interval) until
`untrace`, likewise. Closing
stdin (the SSH channel) ends the daemon.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from linkgrad.errors import InputError, Problem
from linkgrad.protocol import jsonlines
from linkgrad.protocol import sniffer as protocol
from linkgrad.protocol.base import Empty, Request, Result, Stopped
from linkgrad.protocol.hosts import Probe, Unprobe
from linkgrad.protocol.jsonlines import LineWriter, StopServing, leave_signals_to_main_thread
from linkgrad.protocol.snap import Profile, Unprofile
from linkgrad.protocol.sniffer import Report, ReportEvent
from linkgrad.protocol.trace import TraceRequest, Untrace
from sniffer.host_prober import HostProber
from sniffer.kernel import (
    ClosedSockets,
    dump_sockets,
    ephemeral_range,
    ipv6_addresses,
    socket_owners,
)
from sniffer.links import Process, SocketRecord, active, link_counts, match_closed
from sniffer.profiling import Profiler
from sniffer.tracing import MessageTracer

KEEP_VANISHED_POLLS = 2  # a socket gone from the dump waits this long for its closing notice


class Sniffer:
    """Snapshots sockets and turns the difference into link message counts.

    `closed` drains the sockets the kernel freed since the last call, with their final
    counters: a socket that closed between two polls is counted to its last segment.
    """

    def __init__(self, dump: Callable[[], list[SocketRecord]] = dump_sockets,
                 owners: Callable[[], dict[int, Process]] = socket_owners,
                 ephemeral: tuple[int, int] | None = None,
                 clock: Callable[[], float] = time.time,
                 closed: Callable[[], list[SocketRecord]] = list,
                 losses: Callable[[], int] = lambda: 0) -> None:
        self.dump, self.owners, self.clock, self.closed = dump, owners, clock, closed
        self.losses = losses  # the closing notices' losses so far (ClosedSockets.lost)
        self.losses_told = losses()
        self.ephemeral = ephemeral or ephemeral_range()
        baseline = self.dump()
        # what closed before the first snapshot is not ours to count: drained after the dump,
        # so one closing in between is left out of the baseline too (nor counted whole later)
        gone = {s.identity for s in self.closed()}
        self.previous = {s.key: s for s in baseline if s.identity not in gone}
        self.vanished: dict[tuple[object, ...], int] = {}  # key -> polls since last seen
        self.known_owners = self.owners()
        self.since = self.clock()
        self.lock = threading.Lock()

    def poll(self, threshold: int = 1) -> Report:
        with self.lock:
            current = self.dump()
            # drained after the dump, so a last report has every socket closed before it; one
            # closing in between is in both, and its notice's final counters win
            ended = match_closed(self.closed(), {**self.previous, **{s.key: s for s in current}})
            closed_now = {s.identity for s in ended}
            current = [s for s in current if s.identity not in closed_now]
            owners = self.owners()
            counts = link_counts(self.previous, [*current, *ended],
                                 {**self.known_owners, **owners}, self.ephemeral)
            now = self.clock()
            losses = self.losses()
            report = Report(from_s=self.since, to_s=now, links=tuple(
                link.count(n) for link, n in active(counts, threshold).items()),
                notice_losses=(losses - self.losses_told) or None)
            self.losses_told = losses
            self._carry(current, ended)
            self.known_owners = owners
            self.since = now
            return report

    def _carry(self, current: list[SocketRecord], ended: list[SocketRecord]) -> None:
        """The next baseline: this dump, plus sockets missing from it whose closing notice may
        still come (so it then counts only what they sent since they were last seen)."""
        seen = {s.key: s for s in current}
        gone = {s.key for s in ended}
        kept = {}
        for key, s in self.previous.items():
            if key in seen or key in gone:
                continue
            age = self.vanished.get(key, 0) + 1
            if age <= KEEP_VANISHED_POLLS:
                kept[key] = s
                self.vanished[key] = age
        self.vanished = {k: a for k, a in self.vanished.items() if k in kept}
        self.previous = {**kept, **seen}


class Service:
    """The sniffer's requests, and its `watch` thread's reports as events."""

    def __init__(self, sniffer: Sniffer, out: IO[str],
                 closing: ClosedSockets | None = None, tracing: bool = True) -> None:
        self.sniffer = sniffer
        self.out = LineWriter(out)
        self.watching = threading.Event()
        self.woken = threading.Event()  # set by unwatch: the watch thread leaves now
        self.watcher: threading.Thread | None = None
        self.threshold = 1
        self.profiler = Profiler(self.out, sniffer.ephemeral, closing, tracing)
        self.tracer = MessageTracer(self.out, capture=tracing)
        self.prober = HostProber(self.out)
        self.closing = closing

    def handle(self, request: Request[Any]) -> Result:
        match request:
            case protocol.HealthRequest():
                lo, hi = self.sniffer.ephemeral
                return protocol.SnifferHealth(pid=os.getpid(), ephemeral_range=(lo, hi),
                                              watching=self.watching.is_set())
            case protocol.Poll(threshold=threshold):
                return self.sniffer.poll(threshold)
            case protocol.Watch(interval_s=interval, threshold=threshold):
                self.unwatch()
                self.threshold = threshold
                self.woken.clear()
                self.watching.set()
                self.watcher = threading.Thread(target=self._watch, args=(interval, threshold),
                                                daemon=True)
                self.watcher.start()
                return protocol.Watching(interval_s=interval)
            case protocol.Unwatch():
                self.unwatch()
                return Empty()
            case Profile():
                try:
                    return self.profiler.start(request)
                except ValueError as e:  # settings that contradict each other
                    named = re.match(r"\w+", str(e))  # the messages start with the field
                    raise InputError(Problem(str(e), field=named.group() if named else None)) \
                        from e
            case Unprofile():
                return self.profiler.stop()
            case TraceRequest():
                return self.tracer.start(request)
            case Untrace():
                return self.tracer.stop()
            case Probe():
                return self.prober.start(request)
            case Unprobe():
                return self.prober.stop()
            case protocol.Stop():
                raise StopServing(Empty())
        raise InputError(Problem(f"unknown command {request.cmd!r}", field="cmd"))

    def report(self, threshold: int) -> None:
        self.out.write(ReportEvent(**dict(self.sniffer.poll(threshold))))

    def unwatch(self) -> None:
        """Stop watching (at once, not at the next interval); a last report covers the time
        since the previous one."""
        self.watching.clear()
        self.woken.set()
        if self.watcher is not None:
            self.watcher.join(timeout=10)
            self.watcher = None
            if self.closing is not None:  # the kernel sends a notice a moment after the close
                self.closing.settle()
            self.report(self.threshold)

    def _watch(self, interval: float, threshold: int) -> None:
        leave_signals_to_main_thread()
        next_at = time.monotonic() + interval
        while self.watching.is_set():
            if self.woken.wait(max(0.0, next_at - time.monotonic())):
                return
            self.report(threshold)
            next_at += interval


def serve(service: Service, stdin: IO[bytes] | IO[str]) -> str:
    """Answer requests until stop or end of input; returns why it stopped."""
    return jsonlines.serve(stdin, service.out, protocol.SNIFFER_REQUEST, service.handle)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        closing: ClosedSockets | None = ClosedSockets()
        missing = None
    except OSError as e:  # no CAP_NET_ADMIN, or a kernel without sock_diag broadcasts
        closing, missing = None, f"closed sockets not reported ({e}): a connection's last " \
            "interval is not counted"
    try:
        own_ipv6: tuple[str, ...] | None = ipv6_addresses()
    except OSError as e:  # the coordinator then cannot name the hosts of an IPv6 link
        own_ipv6 = None
        missing = "; ".join(w for w in (missing, f"IPv6 addresses not read ({e}): IPv6 links "
                                        "are not named") if w)
    service = Service(Sniffer(closed=closing.drain if closing else list,
                              losses=closing.losses if closing else lambda: 0),
                      sys.stdout, closing)
    try:
        return run(service, sys.stdin.buffer, missing, own_ipv6, closing is not None)
    finally:
        if closing is not None:
            closing.close()
            if closing.lost:  # what the reports counted, by kind: for whoever reads its stderr
                print("sniffer: closing notices lost: " + ", ".join(
                    f"{what} x{n}" for what, n in closing.lost.items()), file=sys.stderr)


def boot_id() -> str | None:
    """This kernel's boot: the same in every namespace and container of the machine."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:64] or None
    except OSError:
        return None


def run(service: Service, stdin: IO[bytes] | IO[str], warning: str | None = None,
        ipv6: tuple[str, ...] | None = None, closed_sockets: bool | None = None) -> int:
    """The daemon's life: say ready (with the host's IPv6 addresses `ipv6`, None: unknown),
    answer until stop or EOF, a last report, say stopped. `closed_sockets`: whether the
    kernel's closing notices are heard (default: when there is no warning)."""
    service.out.write(protocol.SnifferReady(
        pid=os.getpid(), warning=warning, ipv6_addresses=ipv6, boot_id=boot_id(),
        closed_sockets=warning is None if closed_sockets is None else closed_sockets))
    try:
        reason = serve(service, stdin)
    except KeyboardInterrupt:
        reason = "signal"
    finally:
        service.unwatch()
        service.profiler.stop()
        service.tracer.stop()
        service.prober.stop()
    service.out.write(Stopped(reason=reason))
    return 0

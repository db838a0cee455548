"""The sniffer's `trace` command: a message capture, a `trace` event every report interval, a
last one on `untrace` (or when the daemon stops)."""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Callable, Sequence

from linkgrad.errors import RuntimeFailure
from linkgrad.protocol.jsonlines import LineWriter, leave_signals_to_main_thread
from linkgrad.protocol.trace import TRACER_START_S, TraceReportEvent, TraceRequest, Tracing
from sniffer.links import plain_address
from sniffer.message_assembly import HostMessage
from sniffer.message_capture import CaptureSettings, Endpoint, MessageCapture, Opening
from sniffer.socket_calls import OFF, SocketCallTracer, own_netns, probe
from sniffer.thread_changes import MAP_KEYS_MAX, ThreadChangeParser, ThreadLog, build_program

# how far bpftrace's lines may lag the packets (it polls its perf buffers): a message that
# began less than this before a report waits for the next one
THREAD_LAG_S = 0.5


def host_addresses() -> tuple[str, ...]:
    """This namespace's IPv4 and IPv6 addresses, loopback included (the coordinator tells
    one host's loopback from another's)."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = [a.get_attr("IFA_ADDRESS") for family in (socket.AF_INET, socket.AF_INET6)
                 for a in ipr.get_addr(family=family)]
        return tuple(sorted({plain_address(a) for a in found if a}))


def capture_problem() -> str | None:
    """Why this host cannot capture (None: it can)."""
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0).close()
    except PermissionError:
        return "no packet capture (needs root or CAP_NET_RAW): no messages from this host"
    except OSError as e:
        return f"no packet capture ({e}): no messages from this host"
    return None


class MessageTracer:
    """One trace at a time; `start` replaces a running one (after its last report)."""

    def __init__(self, out: LineWriter, capture: bool = True) -> None:
        self.out = out
        self.can_capture = capture  # False: an in-process fake host, sharing its namespace
        self.capture: MessageCapture | None = None
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.report_interval_s = 1.0
        self.since = 0.0
        self.addresses: tuple[str, ...] = ()
        self.missing: tuple[str, ...] = ()
        self.thread_tracer: SocketCallTracer | None = None  # each socket's thread
        self.thread_log = ThreadLog()
        # messages too recent for their threads' lines to be in (bpftrace's output lags),
        # and their process names: in the next report
        self.held: list[HostMessage] = []
        self.held_names: dict[tuple[Endpoint, Endpoint], str] = {}

    def start(self, request: TraceRequest) -> Tracing:
        self.stop()
        self.addresses = host_addresses()
        problem = capture_problem() if self.can_capture else \
            "an in-process host shares its namespace: no messages captured"
        self.missing = (problem,) if problem else ()
        if problem is None:
            settings = CaptureSettings(exclude_ports=request.exclude_ports,
                                       idle_s=request.idle_s,
                                       max_messages=request.max_messages)
            # threads first: a message captured before bpftrace is attached has none, and a
            # node's calls without threads are linked by timing, at a beam's cost
            self._follow_threads()
            self.capture = MessageCapture(settings, set(self.addresses)).start()
            self.report_interval_s = request.report_interval_s
            self.since = time.time()
            self.stopping.clear()
            self.thread = threading.Thread(target=self._run, name="trace-reports", daemon=True)
            self.thread.start()
        return Tracing(addresses=self.addresses, missing=self.missing)

    def stop(self) -> Tracing:
        """Stop capturing; a last report holds every message up to now."""
        result = Tracing(addresses=self.addresses, missing=self.missing)
        if self.thread is not None:
            self.stopping.set()
            self.thread.join(timeout=10)
            self.thread = None
        if self.capture is not None:
            self.capture.stop()
            self._report(final=True)
            self.capture = None
        if self.thread_tracer is not None:
            self.thread_tracer.stop()
            self.thread_tracer = None
        return result

    def _follow_threads(self) -> None:
        """Each socket's thread from bpftrace, or why not in `missing` (calls are then
        linked by timing alone)."""
        self.thread_log, self.held, self.held_names = ThreadLog(), [], {}
        config = probe()
        why = config if isinstance(config, str) else None
        if not isinstance(config, str):
            try:
                self.thread_tracer = tracer = SocketCallTracer(
                    config, program=build_program(own_netns()),
                    parser=ThreadChangeParser(wall_offset_s=0.0),
                    map_keys_max=MAP_KEYS_MAX).start(keep_late=True)
                if tracer.late:
                    self.missing += (f"threads late: bpftrace had not attached after "
                                     f"{TRACER_START_S:g} s (a busy machine); calls before it "
                                     "did are linked by timing alone",)
            except RuntimeFailure as e:
                why = str(e)
        if why is not None:
            self.missing += (f"no threads ({why.removesuffix(': ' + OFF)}): calls linked "
                             f"by timing alone",)

    def _run(self) -> None:
        leave_signals_to_main_thread()
        while not self.stopping.wait(self.report_interval_s):
            self._report()

    def _report(self, final: bool = False) -> None:
        """The messages finished since the last report, with their threads if traced (the
        last report: after bpftrace has said all it saw)."""
        assert self.capture is not None
        messages, processes, listening = self.capture.drain()
        openings = self.capture.drain_openings()
        now = time.time()
        tracer = self.thread_tracer
        if tracer is not None:
            if final:
                tracer.stop()  # its readers joined: every line it printed is in
            self.thread_log.add(tracer.drain())
            self.thread_log.forget_before(now)
            messages, processes = self.held + messages, {**self.held_names, **processes}
            cut = math.inf if final else now - THREAD_LAG_S
            self.held = [m for m in messages if m.first_s > cut]
            self.held_names = {k: processes[k] for m in self.held
                               for k in ((m.local, m.remote), (m.remote, m.local))
                               if k in processes}
            messages = [m for m in messages if m.first_s <= cut]
        self.out.write(report_event(self.since, now, messages, processes, listening,
                                    self.capture.stats(), self.capture.error,
                                    None if tracer is None else self.thread_log.thread_at,
                                    openings))
        self.since = now


def report_event(from_s: float, to_s: float, messages: list[HostMessage],
                 processes: dict[tuple[Endpoint, Endpoint], str], listening: set[Endpoint],
                 stats: dict[str, int], error: str | None,
                 thread_of: Callable[[Endpoint, Endpoint, float], int] | None = None,
                 openings: Sequence[Opening] = ()) -> TraceReportEvent:
    """A `trace` event (linkgrad.protocol.trace), endpoints and process names listed once;
    with `thread_of`, the thread at this end of each message; the connections opened."""
    endpoints: dict[Endpoint, int] = {}
    names: dict[str, int] = {}
    rows = []
    threads = []

    def row(local: Endpoint, remote: Endpoint, sent: bool, m: HostMessage) -> None:
        if thread_of is not None:
            threads.append(thread_of(local, remote, m.first_s))
        name = processes.get((local, remote))
        rows.append((endpoints.setdefault(local, len(endpoints)),
                     endpoints.setdefault(remote, len(endpoints)), sent, m.seq_first,
                     m.seq_end, m.first_s, m.last_s, False,
                     names.setdefault(name, len(names)) if name else -1))

    for m in messages:
        if m.loopback:  # both ends here: a sent row and a received one, each its process
            src, dst = (m.local, m.remote) if m.sent else (m.remote, m.local)
            row(src, dst, True, m)
            row(dst, src, False, m)
        else:
            row(m.local, m.remote, m.sent, m)
    opened = tuple((endpoints.setdefault(o.client, len(endpoints)),
                    endpoints.setdefault(o.server, len(endpoints)), o.time_s) for o in openings)
    return TraceReportEvent(from_s=from_s, to_s=to_s, endpoints=tuple(endpoints),
                            processes=tuple(names), listening=tuple(sorted(listening)),
                            messages=tuple(rows), threads=tuple(threads), openings=opened,
                            segments=stats["segments"],
                            dropped_messages=stats["dropped_messages"],
                            ring_drops=stats["ring_drops"], error=error)

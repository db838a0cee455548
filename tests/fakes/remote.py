"""A fake remote for the run loop (after fabric's `testing/base.py`): hosts whose daemons are
the real injector and sniffer request handlers, run in-process over pipes, in virtual time.

- `FakeClock`: sleeping advances time at once, in small steps, after the application has
  served each step; a test can make it raise KeyboardInterrupt at a given time (Ctrl-C).
- `FakeApplication`: a three-tier application (web -> app -> db) with known link gradients:
  each transaction crosses app->db and db->app a fixed number of times, and every crossing
  pays whatever delay a fake injector holds that link at that moment. It writes an nginx log
  (`$msec $request_time "$request" $status`) and keeps socket counters the sniffers read.
- `FakeEngine`: the injector engine without iptables or NFQUEUE: links, schedules and the
  delay "applied" to each crossing, in the real daemon's statistics.
- `FakeRemote`/`FakeHosts.connect`: what `Session` gets instead of SSH.

Nothing here needs root; the daemons' request handling, the JSON-lines protocol, the
session, the log follower, the estimator and the run's phases are all the real ones.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

import numpy as np

from coordinator.config.experiment import Experiment, Host, Ssh
from injector.calipers import Calipers, delay_summary
from injector.daemon import serve as serve_injector
from injector.link import Link
from injector.schedule import Caps, Schedule
from linkgrad.errors import RuntimeFailure
from linkgrad.protocol import injector as protocol
from sniffer.daemon import Service, Sniffer
from sniffer.daemon import run as run_sniffer
from sniffer.host_probe import read_host
from sniffer.links import Process, SocketRecord

START_S = 1_700_000_000.0
STEP_S = 0.1
LOG_FORMAT = '$msec $request_time "$request" $status'
ADDRESSES = {"web": "10.9.0.1", "app": "10.9.0.2", "db": "10.9.0.3"}
APP_PORT, DB_PORT, CLIENT_PORT = 8000, 5432, 40001  # CLIENT_PORT: app's ephemeral to db


# A regression suite of the fake experiment alone, and that experiment's file as a suite
# names it (a night's runs are made with `fake_experiment`): tests/test_regress_fake_nights.py
# and the fuzz campaign's regress inputs.
NIGHT_SUITE = """\
name: fake-nights
testbed: {tag: nt}
experiments:
  - experiment: fake.yaml
checks:
  gradients: {alpha: 0.01, min_change: 0.25}
output: out
"""
NIGHT_EXPERIMENT = "name: fake\ntestbed: nt\ntransactions: {two: ^/two, none: ^/none}\n"


def fake_experiment(directory: Path, parameters: dict[str, Any] | None = None,
                    **fields: Any) -> Experiment:
    """The experiment the fake application is measured with: both directions of app<->db, two
    at once, a fixed 10 ms wave of 4 cycles of 8 s after 30 s of training, for `/two` and
    `/none`; `parameters` and `fields` change it. The known_hosts it names is made in
    `directory` (a run requires it; the fake never reads it)."""
    (directory / "known_hosts").write_text("")
    return Experiment.model_validate({
        "name": "fake",
        "hosts": [{"name": name, "address": address} for name, address in ADDRESSES.items()],
        "ssh": {"known_hosts": str(directory / "known_hosts")},
        "web_log": {"host": "web", "path": "/var/log/nginx/access.log", "format": "nginx",
                    "log_format": LOG_FORMAT},
        "transactions": {"two": "^/two", "none": "^/none"},
        "parameters": {"training_s": 30, "period_s": 8, "cycles": 4, "magnitude_ms": 10,
                       "adaptive": False, "include": ["app->db", "db->app"],
                       "concurrent": 2, **(parameters or {})},
        "output": str(directory / "runs"), **fields})


class FakeClock:
    """Virtual unix time. `sleep` serves the application step by step and waits until the
    log follower has read every line, so what the run sees is what a live run would."""

    def __init__(self, start_s: float = START_S) -> None:
        self.now = start_s
        self.steps: list[Callable[[float, float], None]] = []  # called per step [t0, t1)
        self.interrupt_at: float | None = None  # Ctrl-C at this time

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        end = self.now + max(seconds, 0.0)
        while self.now < end:
            step_end = min(end, self.now + STEP_S)
            for serve in self.steps:
                serve(self.now, step_end)
            self.now = step_end
            if self.interrupt_at is not None and self.now >= self.interrupt_at:
                self.interrupt_at = None
                raise KeyboardInterrupt


# ------------------------------------------------------------------------------- channels


class QueueChannel:
    """Lines pushed by the fake (the followed log, an idle workload); `drained` waits until the
    reader has taken every line pushed so far."""

    def __init__(self) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.closed = threading.Event()

    def push(self, line: str) -> None:
        if not self.closed.is_set():
            self.queue.put(line)

    def drained(self, timeout_s: float = 10.0) -> None:
        with self.queue.all_tasks_done:  # Queue.join, with a time limit
            while self.queue.unfinished_tasks:
                assert self.queue.all_tasks_done.wait(timeout_s), \
                    "the log follower stopped reading"

    def send(self, data: bytes) -> None:
        pass

    def lines(self) -> Iterator[str]:
        while (line := self.queue.get()) is not None:
            yield line
            self.queue.task_done()  # resumed: the reader is done with that line
        self.queue.task_done()

    def close_input(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self.queue.put(None)

    def exit_status(self, timeout_s: float) -> int | None:
        return 0 if self.closed.is_set() else None

    def close(self) -> None:
        self.close_input()


class ThreadChannel:
    """A daemon run in a thread, its stdin and stdout over pipes, as a child process would."""

    def __init__(self, daemon: Callable[[IO[str], IO[str]], int], name: str) -> None:
        to_r, self._to_w = os.pipe()
        self._from_r, from_w = os.pipe()
        self._stdin = os.fdopen(to_r, "r")
        self._stdout = os.fdopen(from_w, "w")
        self._writer = os.fdopen(self._to_w, "wb")
        self._reader = os.fdopen(self._from_r, "r")
        self.status: int | None = None
        self.thread = threading.Thread(target=self._main, args=(daemon,), name=name,
                                       daemon=True)
        self.thread.start()

    def _main(self, daemon: Callable[[IO[str], IO[str]], int]) -> None:
        try:
            self.status = daemon(self._stdin, self._stdout)
        except BaseException:
            self.status = 1  # as a process that died of an exception
        finally:
            self._stdout.close()
            self._stdin.close()

    def send(self, data: bytes) -> None:
        self._writer.write(data)
        self._writer.flush()

    def lines(self) -> Iterator[str]:
        for line in self._reader:
            yield line.rstrip("\n")

    def close_input(self) -> None:
        if not self._writer.closed:
            self._writer.close()

    def exit_status(self, timeout_s: float) -> int | None:
        self.thread.join(timeout_s)
        return None if self.thread.is_alive() else self.status

    def close(self) -> None:
        self.close_input()
        self._reader.close()


# -------------------------------------------------------------------------------- injector


@dataclass
class _FakeLink:
    link: Link
    schedule: Schedule
    schedule_id: int = 0
    applied: dict[tuple[int, str], Calipers] = field(default_factory=dict)

    def matches(self, src: str, sport: int, dst: str, dport: int) -> bool:
        return all(_end_matches(end, addr, port)
                   for end, addr, port in ((self.link.src, src, sport),
                                           (self.link.dst, dst, dport)))

    def delay_s(self, t_s: float) -> float:
        delay = self.schedule.delay_s(t_s)
        self.applied.setdefault((self.schedule_id, self.schedule.phase(t_s)),
                                Calipers()).add(delay)
        return delay

    def stats(self) -> protocol.LinkStats:
        phases: dict[str, dict[str, protocol.PhaseStats]] = {}
        for (schedule_id, phase), calipers in sorted(self.applied.items()):
            phases.setdefault(str(schedule_id), {})[phase] = protocol.PhaseStats(
                actual=delay_summary(calipers), error=delay_summary(Calipers()))
        return protocol.LinkStats(link=str(self.link), schedule_id=self.schedule_id,
                                  dropped=0, held=0, schedules=phases)


def _end_matches(end: object, addr: str, port: int) -> bool:
    address, want_port = getattr(end, "address", None), getattr(end, "port", 0)
    if want_port and want_port != port:
        return False
    return address is None or ipaddress.ip_address(addr) in ipaddress.ip_network(address)


@dataclass
class _Firewall:
    chain: str = "LINKGRAD-FAKE"


class FakeEngine:
    """`injector.engine.Engine`'s interface, holding no packets: the application asks it for
    the delay of each crossing, and its statistics are what that delay was."""

    def __init__(self, close_fails: bool = False, dies: bool = False) -> None:
        self.links: dict[int, _FakeLink] = {}
        self.firewall = _Firewall()
        self.callback_errors, self.realtime, self.stale_removed = 0, False, False
        self.started = self.closed = False
        self.close_fails, self.dies = close_fails, dies
        self.lock = threading.Lock()
        self._ids = itertools.count(1)

    def start(self) -> FakeEngine:
        self.started = True
        return self

    def close(self) -> None:
        with self.lock:
            self.links.clear()  # as the real engine removes every rule
        self.closed = True
        if self.close_fails:
            raise RuntimeFailure("iptables: cannot remove the chain (fake)")

    def add_link(self, link: Link, schedule: Schedule) -> int:
        if self.dies:  # not an error it answers: the daemon is gone (a crash, the OOM killer)
            raise SystemExit(137)
        with self.lock:
            link_id = next(self._ids)
            self.links[link_id] = _FakeLink(link, schedule)
            return link_id

    def set_schedule(self, link_id: int, schedule: Schedule) -> int:
        with self.lock:
            fake = self.links[link_id]
            fake.schedule, fake.schedule_id = schedule, fake.schedule_id + 1
            return fake.schedule_id

    def remove_link(self, link_id: int) -> protocol.LinkStats:
        with self.lock:
            return self.links.pop(link_id).stats()

    def stats(self, drop_times: bool = False) -> dict[int, protocol.LinkStats]:
        with self.lock:  # the fake drops nothing: no drop times to give
            return {i: fake.stats().model_copy(update={"drop_times_s": () if drop_times
                                                       else None})
                    for i, fake in self.links.items()}

    def delay_s(self, src: str, sport: int, dst: str, dport: int, t_s: float) -> float:
        with self.lock:
            return sum(f.delay_s(t_s) for f in self.links.values()
                       if f.matches(src, sport, dst, dport))


# ----------------------------------------------------------------------------- application


@dataclass
class FakeApplication:
    """Requests at `rate_per_s` (Poisson), each transaction a number of app->db queries;
    every crossing of app->db and of db->app pays the delay the fake injectors hold."""

    clock: FakeClock
    crossings: dict[str, int]  # transaction path -> app<->db round trips (its gradient)
    rate_per_s: float = 40.0
    service_ms: float = 20.0
    collapse_when_delayed: bool = False  # throughput falls to a tenth while a delay is on
    seed: int = 1
    engines: list[FakeEngine] = field(default_factory=list)
    logs: list[QueueChannel] = field(default_factory=list)
    segments: dict[tuple[str, str], int] = field(default_factory=dict)  # (from, to) -> segs
    pending: list[tuple[float, str]] = field(default_factory=list)  # (end, log line)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.paths = sorted(self.crossings)
        self.clock.steps.append(self.serve)

    def _delay_s(self, src: str, dst: str, t_s: float) -> float:
        sport, dport = (CLIENT_PORT, DB_PORT) if src == "app" else (DB_PORT, CLIENT_PORT)
        return sum(e.delay_s(ADDRESSES[src], sport, ADDRESSES[dst], dport, t_s)
                   for e in self.engines)

    def _count(self, src: str, dst: str, n: int) -> None:
        self.segments[(src, dst)] = self.segments.get((src, dst), 0) + n

    def serve(self, t0: float, t1: float) -> None:
        """Every request that starts in [t0, t1); the log gets each line at its end."""
        rate = self.rate_per_s
        if self.collapse_when_delayed and any(e.links for e in self.engines):
            rate /= 10
        for start in np.sort(self.rng.uniform(t0, t1, self.rng.poisson(rate * (t1 - t0)))):
            path = self.paths[self.rng.integers(len(self.paths))]
            t = start + self.rng.exponential(self.service_ms / 1e3 / 2)
            for _ in range(self.crossings[path]):  # query, answer, query, answer...
                t += 0.001 + self._delay_s("app", "db", t)
                t += 0.001 + self._delay_s("db", "app", t)
            end = t + self.rng.exponential(self.service_ms / 1e3 / 2)
            self._count("web", "app", 1)
            self._count("app", "web", 1)
            self._count("app", "db", self.crossings[path])
            self._count("db", "app", self.crossings[path])
            self.pending.append((end, f'{end:.3f} {end - start:.3f} "GET {path} HTTP/1.1" 200'))
        self.pending.sort()
        due = [line for end, line in self.pending if end < t1]
        self.pending = [(end, line) for end, line in self.pending if end >= t1]
        for log in self.logs:
            for line in due:
                log.push(line)
            log.drained()

    def sockets(self, host: str) -> list[SocketRecord]:
        """What sock_diag would give on `host`: its end of web<->app and app<->db."""
        s = self.segments.get
        pairs = {"web": [("web", 40002, "app", APP_PORT)],
                 "app": [("app", APP_PORT, "web", 40002), ("app", CLIENT_PORT, "db", DB_PORT)],
                 "db": [("db", DB_PORT, "app", CLIENT_PORT)]}[host]
        return [SocketRecord("tcp", ADDRESSES[a], ap, ADDRESSES[b], bp, inode=100 + i,
                             segs_out=s((a, b), 0), segs_in=s((b, a), 0))
                for i, (a, ap, b, bp) in enumerate(pairs)]


OWNERS = {"web": "nginx", "app": "python", "db": "postgres"}


# ---------------------------------------------------------------------------------- hosts


@dataclass
class FakeHosts:
    """The hosts `Session` connects to; `connect` is its connection factory."""

    app: FakeApplication
    broken_sniffer: set[str] = field(default_factory=set)  # hosts whose sniffer cannot start
    failing_injector: set[str] = field(default_factory=set)  # engine fails to clean up
    refusing_injector: set[str] = field(default_factory=set)  # cannot start (queue in use)
    dying_injector: set[str] = field(default_factory=set)  # dies at its first request
    unreachable: set[str] = field(default_factory=set)  # ssh cannot connect
    connected: list[str] = field(default_factory=list)  # hosts connected to, in order
    engines: dict[str, list[FakeEngine]] = field(default_factory=dict)
    channels: list[ThreadChannel | QueueChannel] = field(default_factory=list)

    def connect(self, host: Host, ssh: Ssh) -> FakeRemote:
        if host.name in self.unreachable:
            raise RuntimeFailure(f"ssh {host.name} ({ADDRESSES[host.name]}): timed out")
        self.connected.append(host.name)
        return FakeRemote(self, host.name)

    def daemons_running(self) -> list[str]:
        return [c.thread.name for c in self.channels
                if isinstance(c, ThreadChannel) and c.thread.is_alive()]


@dataclass
class FakeRemote:
    hosts: FakeHosts
    name: str
    commands: list[list[str]] = field(default_factory=list)

    @property
    def address(self) -> str:
        return ADDRESSES[self.name]

    def run(self, argv: list[str], timeout_s: float = 30.0) -> str:
        raise RuntimeFailure(f"{self.name}: the fake remote runs no command {argv}")

    def open_lines(self, argv: list[str]) -> ThreadChannel | QueueChannel:
        self.commands.append(list(argv))
        if argv[1:3] == ["-m", "sniffer"]:
            channel: ThreadChannel | QueueChannel = ThreadChannel(self._sniffer,
                                                                  f"sniffer on {self.name}")
        elif argv[1:3] == ["-m", "injector"]:
            channel = ThreadChannel(self._injector(argv), f"injector on {self.name}")
        elif "tail" in argv:
            channel = QueueChannel()
            self.hosts.app.logs.append(channel)
        else:  # the workload: the fake application has its own users
            channel = QueueChannel()
        self.hosts.channels.append(channel)
        return channel

    def _sniffer(self, stdin: IO[str], stdout: IO[str]) -> int:
        if self.name in self.hosts.broken_sniffer:
            stdout.write('{"event": "error", "message": "sock_diag: permission denied"}\n')
            return 1
        app, clock = self.hosts.app, self.hosts.app.clock
        sniffer = Sniffer(lambda: app.sockets(self.name),
                          lambda: {100 + i: Process(10 + i, OWNERS[self.name]) for i in range(2)},
                          ephemeral=(32768, 60999), clock=clock.time)
        # SNAP profiles this machine's real sockets (cheap), without bpftrace: the fake hosts
        # share one process, and their calls are no real host's
        service = Service(sniffer, stdout, tracing=False)
        # the host probe reads this machine's real /proc, timed by the run's clock so its
        # reports fall in the run's phases
        service.prober.read = partial(read_host, clock=clock.time)
        return run_sniffer(service, stdin)

    def _injector(self, argv: list[str]) -> Callable[[IO[str], IO[str]], int]:
        caps = Caps(float(argv[argv.index("--max-magnitude-ms") + 1]),
                    float(argv[argv.index("--max-duration-s") + 1]))
        if self.name in self.hosts.refusing_injector:
            return _refuse
        engine = FakeEngine(close_fails=self.name in self.hosts.failing_injector,
                            dies=self.name in self.hosts.dying_injector)
        self.hosts.app.engines.append(engine)
        self.hosts.engines.setdefault(self.name, []).append(engine)
        clock = self.hosts.app.clock

        def daemon(stdin: IO[str], stdout: IO[str]) -> int:  # the real serve loop
            return serve_injector(engine, caps, stdin, stdout,  # type: ignore[arg-type]
                                  reaper=lambda chain: None, clock=clock.time)

        return daemon

    def close(self) -> None:
        pass


def _refuse(stdin: IO[str], stdout: IO[str]) -> int:
    """An injector that cannot start, as `python -m injector` says so and exits 1."""
    stdout.write('{"event": "error", "message": "NFQUEUE 4700 is in use"}\n')
    return 1


"""The SSH side of a run: a connection per host, a sniffer on each, an injector where delay is
needed, the followed web log and the workload. `close()` ends every lease.

The connections come from a factory (`connect`): SSH by default, or a fake remote whose
daemons run in-process, so the run loop and its failure paths are tested without root.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from coordinator.config.experiment import Experiment, Host, Ssh
from coordinator.config.experiment_files import require_local_files
from coordinator.config.hosts_file import HostsFile, ProbePhase
from coordinator.config.snap_file import HostSnapReport
from coordinator.live.clock import SYSTEM, Clock, sleep_checking
from coordinator.live.fanout import DEFAULT_PARALLEL, HostResults, each_host
from coordinator.live.logfollow import LogFollower, follow_argv
from coordinator.live.ssh import Connection, Endpoint, check_endpoints, endpoint_for
from linkgrad.errors import RuntimeFailure
from linkgrad.protocol.hosts import HostReportEvent, Probing
from linkgrad.protocol.injector import InjectorReady
from linkgrad.protocol.jsonlines import Channel, DaemonClient
from linkgrad.protocol.snap import Profile, Profiling, SnapReportEvent, Unprofile
from linkgrad.protocol.sniffer import Report, ReportEvent, SnifferReady
from linkgrad.protocol.trace import (
    TRACER_START_S,
    TraceReportEvent,
    TraceRequest,
    Tracing,
    Untrace,
)
from linkgrad.snap.shared_budget import shared_budgets

QUEUE_BASE = 4700
# Daemons stopped at once over connections already made: sshd's MaxStartups counts only
# connections being made, and a stop costs a host little, so this bounds only the
# coordinator's own threads, one per host under way. Starts are `ssh.parallel` at a time: a
# daemon's start is most of a second of CPU (interpreter, imports), and fifty at once on hosts
# sharing cores (a testbed, VMs on one hypervisor) took half as long again in all as ten at a
# time (benchmarks/RESULTS.md, fanout_profile).
CHANNELS_AT_ONCE = 64


class Remote(Protocol):
    """A host as the run uses it (`ssh.Connection`, or a fake)."""

    name: str
    address: str

    def run(self, argv: list[str], timeout_s: float = 30.0) -> str: ...

    def open_lines(self, argv: list[str]) -> Channel: ...

    def close(self) -> None: ...


Connect = Callable[[Host, Ssh], Remote]
Say = Callable[[str], None]  # a line of progress for the person running linkgrad


def ssh_connect(host: Host, ssh: Ssh) -> Remote:
    return Connection(endpoint_for(host, ssh), ssh.connect_timeout_s)


def check_local_files(experiment: Experiment) -> dict[str, Endpoint]:
    """Every local file an SSH connection to the experiment's hosts reads (its ssh_config,
    known_hosts and keys, and the files the ssh_config gives), checked without connecting:
    InputError at the file, line and field at fault; else every host's endpoint. A command
    calls it before its first side effect, so bad input leaves nothing behind, and connects to
    the endpoints it returns (`Session.endpoints`): the ssh_config is looked up once per host,
    as each lookup runs its `Match exec` commands."""
    assert experiment.ssh is not None
    require_local_files(experiment)
    return check_endpoints(experiment.hosts, experiment.ssh)


def _connect_to(endpoints: dict[str, Endpoint], host: Host, ssh: Ssh) -> Remote:
    return Connection(endpoints[host.name], ssh.connect_timeout_s)


# what a user checks on a host whose daemon did not confirm it stopped (the connection was
# lost, or the daemon killed): the injector's watchdog removes its chain when the daemon dies
INJECTOR_LEFT_BEHIND = ("its watchdog removes its rules when it dies; check the host "
                        "(iptables -S | grep LINKGRAD)")
SNIFFER_LEFT_BEHIND = ("it holds no rules, and ends, with what it started, when the host's "
                       "sshd closes its connection; check the host (pgrep -af 'm sniffer')")


def no_linkgrad_hint(error: str, python: str) -> str:
    """What to do when a daemon did not start because the host has no linkgrad where
    `ssh.python` says (the shell found no such command, or the python no such module)."""
    if "exit status 127" in error or "exit status 126" in error \
            or "No module named" in error:
        return (f"; is ssh.python ({python}) a python with linkgrad there? "
                "`linkgrad deploy EXPERIMENT.yaml` puts it on every host")
    return ""


@dataclass
class Session:
    """Every connection and daemon of a run; `close()` ends every lease."""

    experiment: Experiment
    connect: Connect = ssh_connect
    clock: Clock = SYSTEM
    endpoints: dict[str, Endpoint] | None = None  # as the command's `check_local_files` gave
    connections: dict[str, Remote] = field(default_factory=dict)
    sniffers: dict[str, DaemonClient] = field(default_factory=dict)
    injectors: dict[str, DaemonClient] = field(default_factory=dict)
    reports: list[tuple[str, Report]] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)  # address -> host
    ipv6_addresses: dict[str, str] = field(default_factory=dict)  # as its sniffer says
    log: LogFollower | None = None
    workload: Channel | None = None
    warnings: list[str] = field(default_factory=list)  # what a daemon could not do
    # per host, times its sniffer lost the kernel's notices of closed sockets; and what its
    # socket-call tracer could not count (SNAP)
    notice_losses: Counter[str] = field(default_factory=Counter)
    socket_calls_lost: dict[str, str] = field(default_factory=dict)
    snap_reports: list[HostSnapReport] = field(default_factory=list)  # in arrival order
    profiling: dict[str, Profiling] = field(default_factory=dict)  # host -> what it can give
    unprofiled: set[str] = field(default_factory=set)  # hosts whose profiling has ended
    trace_events: dict[str, list[TraceReportEvent]] = field(default_factory=dict)  # by host
    tracing: dict[str, Tracing] = field(default_factory=dict)  # host -> its addresses
    untraced: set[str] = field(default_factory=set)  # hosts whose tracing has ended
    probing: dict[str, Probing] = field(default_factory=dict)  # host -> its probe's context
    host_reports: dict[str, list[HostReportEvent]] = field(default_factory=dict)  # by host
    probe_phases: list[ProbePhase] = field(default_factory=list)  # the last one running
    probe_failed: set[str] = field(default_factory=set)  # hosts not probed any more
    series_before: HostsFile | None = None  # hosts.json as this session found it
    absent: dict[str, str] = field(default_factory=dict)  # optional host left out -> why

    def open(self, sniffers: bool = True) -> Session:
        """Connect to every host; start the sniffers (unless not wanted), follow the web log
        and start the workload."""
        self.open_hosts(sniffers)
        return self.follow_log().start_workload()

    def follow_log(self) -> Session:
        """Follow the experiment's web log from now on (its hosts open)."""
        e = self.experiment
        assert e.ssh is not None
        assert e.web_log is not None
        channel = self.connections[e.web_log.host].open_lines(
            follow_argv(e.ssh.python, e.web_log.path))
        try:
            self.log = LogFollower(channel, f"{e.web_log.host}:{e.web_log.path}",
                                   e.web_log.format, e.web_log.log_format, self.clock)
        except BaseException:  # no follower to close it: the channel goes now
            channel.close()
            raise
        return self

    def start_workload(self) -> Session:
        """The experiment's workload, if it has one; leased: it ends with its channel, as the
        daemons do."""
        e = self.experiment
        if e.workload is not None and e.ssh is not None:
            self.workload = self.connections[e.workload.host].open_lines(
                [e.ssh.python, "-m", "injector.leased", "--", *self._workload_argv()])
        return self

    def open_hosts(self, sniffers: bool = True) -> Session:
        """Connect to every host and start the sniffers (unless not wanted)."""
        e = self.experiment
        assert e.ssh is not None
        # every ssh_config and known_hosts read before any host is connected to: `linkgrad
        # run` checked them before it wrote its run directory and hands over the endpoints;
        # predict --validate has written nothing and relies on the check here
        connect = self.connect
        if connect is ssh_connect:
            connect = partial(_connect_to, self.endpoints if self.endpoints is not None
                              else check_local_files(e))
        hosts = {h.name: h for h in e.hosts}
        ssh = e.ssh

        def connected(name: str, remote: Remote) -> None:
            self.connections[name] = remote
            self.addresses[hosts[name].address or remote.address] = name

        reached = each_host(hosts, lambda name: connect(hosts[name], ssh), ssh.parallel,
                            keep=connected)
        self.connections = {n: self.connections[n] for n in hosts if n in self.connections}
        self._leave_out(reached, "connect")
        if sniffers:
            started = each_host(self.connections, self._start_sniffer, ssh.parallel,
                                keep=self.sniffers.__setitem__)
            self.sniffers = {n: self.sniffers[n] for n in self.connections if n in self.sniffers}
            self._leave_out(started, "start the sniffer")
        self.warnings += [f"{d.what}: {d.ready.warning}" for d in self.sniffers.values()
                          if isinstance(d.ready, SnifferReady) and d.ready.warning]
        self.ipv6_addresses = ipv6_hosts({name: d.ready.ipv6_addresses or ()
                                          for name, d in self.sniffers.items()
                                          if isinstance(d.ready, SnifferReady)})
        return self

    @property
    def _parallel(self) -> int:
        ssh = self.experiment.ssh
        return ssh.parallel if ssh is not None else DEFAULT_PARALLEL

    @property
    def _optional(self) -> set[str]:
        return {h.name for h in self.experiment.hosts if h.optional}

    def _start_sniffer(self, name: str) -> DaemonClient:
        e = self.experiment
        assert e.ssh is not None
        try:
            return DaemonClient(self.connections[name].open_lines(
                [e.ssh.python, "-m", "sniffer"]), f"sniffer on {name}", SnifferReady,
                on_event=lambda m, n=name: self._report(n, m), left_behind=SNIFFER_LEFT_BEHIND)
        except RuntimeFailure as error:
            raise RuntimeFailure(f"{error}{no_linkgrad_hint(str(error), e.ssh.python)}"
                                 ) from error

    def _leave_out(self, results: HostResults[Any], what: str) -> None:
        """HostsFailed if a host that is not optional failed to `what` (every failure named,
        the optional ones too); else each failed optional host is closed, left out of the
        session and said."""
        results.raise_failed(what, self._optional)
        for name, error in results.failed.items():
            self.absent[name] = reason = f"could not {what}: {error}"
            self.warnings.append(f"{name} left out (optional): {reason}; its links are not "
                                 "measured")
            for held in (self.sniffers, self.connections):
                if (closer := held.pop(name, None)) is not None:
                    try:
                        closer.close()
                    except Exception as e:  # said; the host is left out anyway
                        self.warnings.append(f"{name}: closing it: {e}")

    def loss_warnings(self) -> list[str]:
        """Each host whose sniffer lost what it counts, said once."""
        return [*(f"sniffer on {host}: the kernel's notices of closed sockets were lost {n} "
                  "time(s) (their queue overran, or one was unreadable): a connection that "
                  "closed then counts to the last poll before it, in the graph and SNAP's "
                  "statistics, and one shorter than a poll is missing from both"
                  for host, n in sorted(self.notice_losses.items())),
                *(f"sniffer on {host}: SNAP's socket-call tracer: {what}; what SNAP reads "
                  "from the calls there undercounts"
                  for host, what in sorted(self.socket_calls_lost.items()))]

    def _report(self, host: str, message: dict[str, Any]) -> None:  # free-form: as decoded
        if message.get("event") == "report":
            report = ReportEvent.model_validate(message)
            self.reports.append((host, report))
            if report.notice_losses:
                self.notice_losses[host] += report.notice_losses
        elif message.get("event") == "snap":
            snap = SnapReportEvent.model_validate(message)
            self.snap_reports.append(HostSnapReport.of(host, snap))
            if snap.notice_losses:
                self.notice_losses[host] += snap.notice_losses
            if snap.socket_calls_lost:
                self.socket_calls_lost[host] = snap.socket_calls_lost  # the tracer's total
        elif message.get("event") == "trace":
            self.trace_events.setdefault(host, []).append(
                TraceReportEvent.model_validate(message))
        elif message.get("event") == "host":
            self.host_reports.setdefault(host, []).append(
                HostReportEvent.model_validate(message))
        elif message.get("event") == "snap_error":
            self.warnings.append(f"sniffer on {host}: {message.get('message')}")

    def start_profiling(self, request: Profile) -> list[str]:
        """SNAP on every host, for as long as the run goes; what each host cannot give.
        HostsFailed if it does not start on a host that is not optional (the hosts it
        started on are unprofiled at the end all the same)."""
        budgets, shared = shared_budgets(
            {name: d.ready.boot_id if isinstance(d.ready, SnifferReady) else None
             for name, d in self.sniffers.items()}, request.cpu_lower_pct, request.cpu_upper_pct)

        def start(name: str) -> Profiling:
            share = budgets[name]
            own = request.model_copy(update={"cpu_lower_pct": share.cpu_lower_pct,
                                             "cpu_upper_pct": share.cpu_upper_pct})
            # the sniffer's first read and the tracer's start (up to TRACER_START_S) come first
            return self.sniffers[name].call(own, timeout_s=3 * TRACER_START_S)

        started = each_host(self.sniffers, start, self._parallel, keep=self.profiling.__setitem__)
        started.raise_failed("start SNAP", self._optional)
        return [*([shared] if shared else []),
                *(f"SNAP on {name}: {missing}" for name, got in started.succeeded.items()
                  for missing in got.missing),
                *(f"SNAP on {name} (optional): did not start: {e}"
                  for name, e in started.failed.items())]

    def stop_profiling(self) -> list[str]:
        """Every host's last SNAP report (it comes before the answer); what failed."""
        names = [name for name in self.profiling if name not in self.unprofiled]
        self.unprofiled.update(names)
        stopped = each_host(names, lambda name: self.sniffers[name].call(Unprofile()),
                            CHANNELS_AT_ONCE)
        # reported; the other hosts' reports still count
        return [f"SNAP on {name}: {e}" for name, e in stopped.failed.items()]

    def start_tracing(self, request: TraceRequest) -> list[str]:
        """Message capture on every host (WAP5's trace); what each host cannot give."""
        # every host at once: each starts a bpftrace (a second or two), and hosts started
        # one after the other would miss each other's first messages
        with ThreadPoolExecutor(max_workers=max(1, len(self.sniffers))) as pool:
            # the bpftrace's start, and as much again for the capture's under that load
            started = {name: pool.submit(sniffer.call, request, 2 * TRACER_START_S)
                       for name, sniffer in self.sniffers.items()}
        notes, failed = [], None
        for name, future in started.items():  # every host that started is untraced later
            try:
                self.tracing[name] = got = future.result()
            except Exception as e:
                failed = failed or e
                continue
            notes += [f"tracing on {name}: {missing}" for missing in got.missing]
        if failed is not None:
            raise failed
        return notes

    def stop_tracing(self) -> list[str]:
        """Every host's last trace report (it comes before the answer); what failed."""
        names = [name for name in self.tracing if name not in self.untraced]
        self.untraced.update(names)
        with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:  # at once, too
            stopped = {name: pool.submit(self.sniffers[name].call, Untrace(), 60.0)
                       for name in names}
        problems = []
        for name, future in stopped.items():
            try:
                future.result()
            except Exception as e:  # reported; the other hosts' messages still count
                problems.append(f"tracing on {name}: {e}")
        return problems

    def _workload_argv(self) -> list[str]:
        w, e = self.experiment.workload, self.experiment
        assert w is not None
        assert e.ssh is not None
        if w.argv is not None:
            return list(w.argv)
        mix = w.mix or ",".join(f"{_example_path(p)}=1" for p in e.transactions.values())
        load = ["--rate", str(w.rate_per_s)] if w.rate_per_s is not None else \
            ["--clients", str(w.clients)] + ([] if w.think_s is None else
                                              ["--think-s", str(w.think_s)])
        return [e.ssh.python, "-m", "testbed.loadgen", "--url", e.frontend_url or "",
                "--mix", mix, *load, "--duration", "86400", "--timeout-s", str(w.timeout_s),
                "--json"]

    def injector(self, host: str) -> DaemonClient:
        if host not in self.injectors:
            e = self.experiment
            assert e.ssh is not None
            argv = [e.ssh.python, "-m", "injector", "--queue", str(QUEUE_BASE),
                    "--max-magnitude-ms", str(e.parameters.max_delay_ms),
                    "--max-duration-s", str(e.parameters.max_duration_s)]
            self.injectors[host] = DaemonClient(self.connections[host].open_lines(argv),
                                                f"injector on {host}", InjectorReady,
                                                left_behind=INJECTOR_LEFT_BEHIND)
        return self.injectors[host]

    def link_injector(self, src_host: str, dst_host: str) -> DaemonClient:
        """The daemon that delays src->dst, as `inject_at` says: the receiver's holds a packet
        at no cost to the sending socket, as a network's delay would (the default); the sender's
        keeps it charged there."""
        at = self.experiment.parameters.inject_at
        return self.injector(dst_host if at == "receiver" else src_host)

    def close(self) -> list[str]:
        """Injectors first (the lease: they stop and remove their rules), then the sniffers,
        the log, the workload and the connections; each stage on every host at once (at most
        CHANNELS_AT_ONCE).

        One host's failure must not keep the others injecting, so every close is tried and
        every failure returned, for run.json and the exit code.
        """
        problems = []
        stages: list[dict[str, Any]] = [
            dict(self.injectors), dict(self.sniffers),
            {"log": self.log, "workload": _Leased(self.workload) if self.workload else None},
            dict(self.connections)]
        for stage in stages:
            closers = {key: c for key, c in stage.items() if c is not None}
            closed = each_host(closers, lambda key, c=closers: c[key].close(), CHANNELS_AT_ONCE)
            for key, e in closed.failed.items():
                what = getattr(closers[key], "what", type(closers[key]).__name__)
                problems.append(str(e) if str(e).startswith(what) else f"{what}: {e}")
        return problems


@dataclass
class _Leased:
    """The workload's channel: closing its input ends the command (injector.leased)."""

    channel: Channel
    what: str = "workload"

    def close(self) -> None:
        self.channel.close()


def ipv6_hosts(own: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """IPv6 address -> host, from each host's own addresses (its sniffer's). An address two
    hosts claim (a copied link-local address, an anycast) names neither: a link to it cannot
    be put on one host."""
    claims: dict[str, set[str]] = {}
    for host, addresses in own.items():
        for address in addresses:
            claims.setdefault(address, set()).add(host)
    return {a: next(iter(hosts)) for a, hosts in claims.items() if len(hosts) == 1}


def _example_path(pattern: str) -> str:
    """A URL a transaction regex matches, for the testbed's load generator (`^/a/b` -> /a/b)."""
    return pattern.lstrip("^").rstrip("$").replace("\\?", "?").replace("\\", "")


def sigterm_as_interrupt(signum: int, _frame: object) -> None:
    """A SIGTERM handler that ends a command like Ctrl-C, so every lease is closed."""
    raise KeyboardInterrupt


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within it, SIGTERM and SIGHUP (the terminal closed) raise KeyboardInterrupt, as Ctrl-C
    does, so every lease is closed; SIGHUP stays ignored under nohup. The handlers before are
    put back after."""
    signals = [signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signals.append(signal.SIGHUP)
    previous = {s: signal.signal(s, sigterm_as_interrupt) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def observe(session: Session, start: Callable[[], list[str]], stop: Callable[[], list[str]],
            duration_s: float, say: Say, warn: Say,
            what: str) -> list[str]:
    """A passive command's session: connect, start the experiment's workload (if it has one)
    and `start` the observation, wait `duration_s` (Ctrl-C ends it early, keeping what was
    seen), `stop` it, close every lease; `say` tells progress, `warn` what a host cannot do.
    Returns what went wrong."""
    problems: list[str] = []
    started = False
    try:
        session.open_hosts().start_workload()
        started = True
        for note in session.warnings + start():
            warn(note)
        say(f"{what} {len(session.sniffers)} host(s) for {duration_s:g} s")
        try:
            sleep_checking(session.clock, duration_s)
        except KeyboardInterrupt:
            say("interrupted: what was seen so far follows")
        problems += stop()
        started = False
    finally:
        if started:  # `start` failed on some hosts: those it started on are stopped
            problems += stop()
        problems += session.close()
    return problems

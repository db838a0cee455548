"""SNAP's validation workload run (§4.1), the part its test and its benchmark share: two
namespaces, the injector on the server's, the six pairs of testbed.snap_workload, and
`python -m sniffer` profiling both ends (one per named `profile` request, all at once over the
same traffic), collected into a plain `Run`.

The workload's programs run under SCHED_FIFO and the injector with --realtime: a late read or a
late ACK on a shared machine is a real receiver problem the classifier rightly reports, but not
one this workload made. Profiling stops `closing_s` before the clients do: what their closing
does is no problem of the workload's. Everything started is stopped, and the namespaces
removed, in `finally`.

Needs root, iptables (the injector's NFQUEUE rules) and `chrt`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from linkgrad.errors import RuntimeFailure
from linkgrad.protocol import jsonlines
from linkgrad.protocol.injector import StatsRequest
from linkgrad.protocol.snap import Profile, Profiling, SnapRecord, SnapReportEvent, Unprofile
from linkgrad.protocol.sniffer import SnifferReady
from testbed.pairs.hosts import TOOLS, Hosts, InjectorProcess, make_pair
from testbed.process_channel import ProcessChannel
from testbed.snap_workload import (
    KINDS,
    LOSSY_INJECTION,
    End,
    WorkloadLine,
    WorkloadSettings,
    blackouts,
    client_args,
    injections,
    port,
    server_args,
)

HOST_OF: dict[End, str] = {"server": "a", "client": "b"}  # the namespace pair's hosts
ENDS: tuple[End, ...] = ("server", "client")
NO_PROBLEM = "app_limited"  # Table 2's class of an interval with none of the five problems
CLOSING_S = 1.5
WORKLOAD_PRIORITY = 5  # SCHED_FIFO, below the injector's threads (10)
INJECTOR_QUEUE = 5600
KERNEL_COUNTERS = ("total_retrans", "total_rto", "dsack_dups")
LINES_TIMEOUT_S = 30.0  # a program's exit after its run (a blackout stalls it ~3 s at most)

# tcp_info of a host's established TCP sockets by local port, through the sniffer's own
# sock_diag reader: the counters the profiler does not report (dsack_dups) beside its totals
TCP_INFO = """
import json, socket, sys
from sniffer.sockdiag import SockDiag
with SockDiag() as diag:
    table = diag.dump(socket.AF_INET, states=1 << 1)
rows = table[table.has_info]
print(json.dumps({int(d["sport"]): {f: int(rows.info[f][i]) for f in sys.argv[1:]}
                  for i, d in enumerate(rows.diag)}))
"""


@dataclass
class Seen:
    """What one end's profiler reported of one connection, summed over its reports."""

    seconds: Counter[str] = field(default_factory=Counter)
    sums: Counter[str] = field(default_factory=Counter)
    delayed_acks: float = 0.0
    polls: int = 0  # intervals that moved data or had a problem (the sums' `polls`)
    problem_intervals: int = 0
    records: list[SnapRecord] = field(default_factory=list)

    def problems(self) -> set[str]:
        held = {c for c, s in self.seconds.items() if s > 0 and c != NO_PROBLEM}
        return held | {c for r in self.records for c in r.classes if c != NO_PROBLEM}

    def records_of(self, name: str) -> list[SnapRecord]:
        return [r for r in self.records if name in r.classes]

    def __str__(self) -> str:
        seconds = {c: round(s, 2) for c, s in self.seconds.items() if s}
        sums = {k: v for k, v in self.sums.items() if v}
        return f"seconds {seconds}, sums {sums}, delayed_acks {self.delayed_acks:.1f}"


@dataclass
class Observed:
    """One `profile` request's sniffers (one per end): their answers and `snap` events, and
    those by workload connection, told by the server's port."""

    request: Profile
    profiling: dict[End, Profiling]
    reports: dict[End, list[SnapReportEvent]]
    seen: dict[tuple[str, End], Seen]  # (kind, end)
    strangers: list[str]  # connections on no port of the workload's


@dataclass
class Run:
    """What one run of the workload gave: the profilers' reports and the workload's own logs
    (its labels: snap_problems.py's JSON lines by (end, kind); the cuts by the schedule)."""

    settings: WorkloadSettings
    start_s: float  # unix s: the injections were added, the clients start
    stop_s: float  # unix s: profiling stopped
    observed: dict[str, Observed]
    labels: dict[tuple[End, str], list[WorkloadLine]]
    servers_tcp_info: dict[int, dict[str, int]]  # the server sockets' KERNEL_COUNTERS by port
    # unix times of the injector's drops on the lossy connection (None: a run saved before)
    drops_s: tuple[float, ...] | None = None

    def label(self, end: End, kind: str, event: str) -> list[WorkloadLine]:
        return [line for line in self.labels[(end, kind)] if line.event == event]

    def cuts(self) -> list[tuple[float, float]]:
        """(from, to) unix s of each blackout of the timeout connection."""
        return blackouts(self.start_s, self.settings)

    def stalls(self) -> list[tuple[float, float]]:
        """(start, end) unix s of each request the timeout client saw stall (a cut's doing)."""
        stalls = []
        for slow in self.label("client", "timeout", "slow"):
            if slow.start is None or slow.end is None:
                raise ValueError(f"a slow request's line without its start and end: {slow}")
            stalls.append((slow.start, slow.end))
        return stalls


class Profiler:
    """`python -m sniffer` profiling one host; its `snap` events, checked against the protocol."""

    def __init__(self, hosts: Hosts, host: str, request: Profile) -> None:
        proc = hosts.popen(host, sys.executable, "-m", "sniffer", stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=False)
        self.reports: list[SnapReportEvent] = []
        self.client = jsonlines.DaemonClient(ProcessChannel(proc),
                                             f"sniffer on {host}", SnifferReady,
                                             on_event=self._take)
        self.profiling = self.client.call(request)

    def _take(self, message: dict[str, Any]) -> None:  # free-form: an event, as decoded
        if message.get("event") == "snap":
            self.reports.append(SnapReportEvent.model_validate(message))

    def unprofile(self) -> None:
        self.client.call(Unprofile())  # its last report comes before the answer


def run_workload(settings: WorkloadSettings, profiles: Mapping[str, Profile],
                 closing_s: float = CLOSING_S) -> Run:
    """The whole run on a fresh namespace pair, removed afterwards whatever happens."""
    if not 0 <= closing_s < settings.seconds:
        raise ValueError(f"{closing_s=} must be in [0, seconds={settings.seconds})")
    if not profiles:
        raise ValueError("profiles is empty: nothing would be measured")
    hosts = make_pair()
    try:
        return _drive(hosts, settings, profiles, closing_s)
    finally:
        hosts.remove()  # kills whatever is still running, then the namespaces


def _drive(hosts: Hosts, settings: WorkloadSettings, profiles: Mapping[str, Profile],
           closing_s: float) -> Run:
    server = hosts.addresses["a"]
    with contextlib.ExitStack() as stack:
        injector = InjectorProcess(hosts, "a", "--queue", str(INJECTOR_QUEUE), "--realtime")
        stack.callback(injector.stop)  # last: the injections stay until the clients are done
        servers = {kind: _tool(hosts, "a", server_args(kind, settings)) for kind in KINDS}
        listening = {kind: [_listening(kind, proc)] for kind, proc in servers.items()}
        profilers = {}
        for name, request in profiles.items():
            for end, host in HOST_OF.items():
                profilers[(name, end)] = p = Profiler(hosts, host, request)
                stack.callback(p.client.close)
        start_s = time.time()
        link_ids = [injector.ok(add).link_id for add in injections(server, start_s, settings)]
        clients = {kind: _tool(hosts, "b", client_args(kind, server, settings))
                   for kind in KINDS}
        time.sleep(max(0.0, start_s + settings.seconds - closing_s - time.time()))
        for profiler in profilers.values():  # all first: every profile covers the same time
            profiler.unprofile()
        stop_s = time.time()
        servers_tcp_info = _tcp_info(hosts, "a")  # while the connections still run
        lossy = link_ids[LOSSY_INJECTION]
        stats = injector.ok(StatsRequest(link_id=lossy, drop_times=True)).links[str(lossy)]
        labels: dict[tuple[End, str], list[WorkloadLine]] = {
            ("client", kind): _lines(proc, []) for kind, proc in clients.items()}
        labels |= {("server", kind): _lines(proc, listening[kind])
                   for kind, proc in servers.items()}
    observed = {name: _observed(request, {end: profilers[(name, end)] for end in ENDS},
                                settings)
                for name, request in profiles.items()}
    return Run(settings, start_s, stop_s, observed, labels, servers_tcp_info,
               stats.drop_times_s)


def _tool(hosts: Hosts, host: str, args: list[str]) -> subprocess.Popen[str]:
    """snap_problems.py under SCHED_FIFO, below the injector's threads: a reader's pace or a
    reply's promptness is the workload's, not the shared machine's (each program sleeps or
    blocks between small steps, a few percent of a core at most)."""
    return hosts.popen(host, "chrt", "--fifo", str(WORKLOAD_PRIORITY), sys.executable,
                       str(TOOLS / "snap_problems.py"), *args, stdout=subprocess.PIPE)


def _listening(kind: str, proc: subprocess.Popen[str]) -> WorkloadLine:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        first = WorkloadLine.model_validate_json(line)
    except ValidationError:
        first = None
    if first is None or first.event != "listening":
        raise RuntimeFailure(f"the {kind} server did not start listening: {line!r}")
    return first


def _lines(proc: subprocess.Popen[str], first: list[WorkloadLine]) -> list[WorkloadLine]:
    out, _ = proc.communicate(timeout=LINES_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeFailure(f"{proc.args} exited {proc.returncode}: {first} {out}")
    return first + [WorkloadLine.model_validate_json(line) for line in out.splitlines()]


def _tcp_info(hosts: Hosts, host: str) -> dict[int, dict[str, int]]:
    out = hosts.exec(host, sys.executable, "-c", TCP_INFO, *KERNEL_COUNTERS).stdout
    return {int(p): counters for p, counters in json.loads(out).items()}


def _observed(request: Profile, profilers: Mapping[End, Profiler],
              settings: WorkloadSettings) -> Observed:
    reports = {end: p.reports for end, p in profilers.items()}
    seen, strangers = collect(reports, settings)
    return Observed(request, {end: p.profiling for end, p in profilers.items()}, reports,
                    seen, strangers)


def collect(reports: Mapping[End, list[SnapReportEvent]], settings: WorkloadSettings
            ) -> tuple[dict[tuple[str, End], Seen], list[str]]:
    """Each end's reports by connection, told by the server's port."""
    kind_of = kind_of_port(settings)
    seen = {(kind, end): Seen() for kind in KINDS for end in ENDS}
    strangers = []
    for end, events in reports.items():
        for event in events:
            for c in event.connections:
                server_port = c.local.port if end == "server" else c.remote.port
                if server_port not in kind_of:
                    strangers.append(f"{end}: {c.local} -> {c.remote}")
                    continue
                s = seen[(kind_of[server_port], end)]
                s.seconds.update(c.seconds)
                s.sums.update(c.sums)
                s.delayed_acks += c.delayed_acks
                s.polls += c.polls
                s.problem_intervals += c.problem_intervals
            for r in event.records:
                server_port = r.local.port if end == "server" else r.remote.port
                if server_port in kind_of:
                    seen[(kind_of[server_port], end)].records.append(r)
    return seen, strangers


def kind_of_port(settings: WorkloadSettings) -> dict[int, str]:
    """The workload's kinds by their server port."""
    return {port(kind, settings): kind for kind in KINDS}

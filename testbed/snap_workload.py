"""SNAP's validation workload (§4.1: inject known problems, see the classifier find each one at
the right connection and time), described: pure, no I/O.

One TCP connection per Table 2 class, each on its own port, between a server host (which also
runs the injector) and a client host. `PROBLEMS` says what makes each class and which end's
socket shows it; `server_args` and `client_args` build the arguments of
testbed/pairs/snap_problems.py, `injections` the injector's `add` requests, `blackouts` the
times the timeout's link is cut (the injected labels), `WorkloadLine` what the programs say
(the workload's own labels). A test or benchmark runs them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

from pydantic import BaseModel, ConfigDict

from linkgrad.protocol.injector import Add, ConstantSchedule, LinkSpec, SquareSchedule

End = Literal["server", "client"]


@dataclass(frozen=True)
class WorkloadSettings:
    """Every knob of the workload, units in the names.

    sndbuf_bytes: SO_SNDBUF of the send-buffer server (Linux grants twice that).
    rtt_delay_ms: the delay the injector adds to the send-buffer connection's ACKs, so the
        small buffer, not the CPU, is what limits it (a few MB/s instead of a core's worth).
    pace_bytes_per_s: SO_MAX_PACING_RATE of the lossy bulk server: a steady flow a Python
        injector keeps up with; steady, so RACK and SACK recover losses without RTOs.
    loss_fraction: of the lossy connection's data segments, dropped by the injector.
    blackout_period_s: the timeout connection's server-to-client direction is cut for the
        first half of each period (square wave, loss 1.0), from `blackout_after_s` on.
    rcvbuf_bytes, read_bytes, read_gap_s: the slow reader's SO_RCVBUF and its reads.
    request_gap_s: between the request/response clients' requests.
    """

    base_port: int = 7700
    seconds: float = 14.0
    sndbuf_bytes: int = 4096
    rtt_delay_ms: float = 10.0
    pace_bytes_per_s: int = 2_000_000
    loss_fraction: float = 0.02
    blackout_period_s: float = 4.0
    blackout_after_s: float = 1.0
    rcvbuf_bytes: int = 4096
    read_bytes: int = 1024
    read_gap_s: float = 0.002
    request_gap_s: float = 0.002

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{f.name}={value!r} must be positive and finite")
        if not 0 < self.loss_fraction < 1:
            raise ValueError(f"loss_fraction={self.loss_fraction} must be in (0, 1)")
        if self.base_port + len(PROBLEMS) > 65535:
            raise ValueError(f"base_port={self.base_port} leaves no room for {len(PROBLEMS)} ports")


@dataclass(frozen=True)
class Problem:
    """A Table 2 class and how the workload makes it.

    kind: the class's name (linkgrad.snap.classify.CLASS_NAMES; "healthy" is app_limited)
        and snap_problems.py's KIND.
    expected: the class the profiler must find, on the socket of each end in `seen_at` (the
        ends that send the data the problem holds up).
    made_by: one line, for reports and test messages.
    """

    kind: str
    expected: str
    seen_at: tuple[End, ...]
    made_by: str


PROBLEMS: tuple[Problem, ...] = (
    Problem("send_buffer", "send_buffer", ("server",),
            "a small SO_SNDBUF on the server writing bulk, its ACKs delayed by the injector: "
            "the writer waits for room"),
    Problem("receiver_window", "receiver_window", ("server",),
            "a small SO_RCVBUF on the client, read a little at a time: the window closes"),
    Problem("fast_retransmit", "fast_retransmit", ("server",),
            "paced bulk, a fraction of its data segments dropped: SACK and RACK recovery"),
    Problem("timeout", "timeout", ("server", "client"),
            "request/response, the replies cut for half of each period: RTOs at both ends "
            "(the cut replies carry the ACKs of the requests)"),
    Problem("delayed_ack", "delayed_ack", ("client",),
            "Nagle on, write-write-read: the second half waits for the delayed ACK of the first"),
    Problem("healthy", "app_limited", ("server", "client"),
            "TCP_NODELAY request/response of 64 bytes, read promptly"),
)
KINDS = tuple(p.kind for p in PROBLEMS)
BY_KIND = {p.kind: p for p in PROBLEMS}


def port(kind: str, settings: WorkloadSettings) -> int:
    """The server's port for `kind`."""
    if kind not in BY_KIND:
        raise KeyError(f"{kind!r} is no problem kind; the kinds are {list(KINDS)}")
    return settings.base_port + KINDS.index(kind)


def server_args(kind: str, settings: WorkloadSettings) -> list[str]:
    """snap_problems.py's arguments for the server of `kind`."""
    args = ["server", kind, str(port(kind, settings)), str(settings.seconds)]
    if kind == "send_buffer":
        args += ["--sndbuf", str(settings.sndbuf_bytes)]
    if kind == "fast_retransmit":
        args += ["--pace", str(settings.pace_bytes_per_s)]
    return args


def client_args(kind: str, server: str, settings: WorkloadSettings) -> list[str]:
    """snap_problems.py's arguments for the client of `kind`, connecting to `server`."""
    args = ["client", kind, server, str(port(kind, settings)), str(settings.seconds)]
    if kind == "receiver_window":
        args += ["--rcvbuf", str(settings.rcvbuf_bytes), "--read-bytes",
                 str(settings.read_bytes), "--read-gap-s", str(settings.read_gap_s)]
    if kind in ("timeout", "healthy"):
        args += ["--gap-s", str(settings.request_gap_s)]
    return args


LOSSY_INJECTION = 1  # the position in `injections` of the fast-retransmit connection's loss


def injections(server: str, start_s: float, settings: WorkloadSettings) -> list[Add]:
    """The injector's `add` requests (link and schedule), for a daemon on the server's host.

    `src` server:port matches what the server sends (its OUTPUT), `dst` server:port what it
    receives (its INPUT): each impairment touches its own connection only.
    """
    def at(kind: str) -> str:
        return f"{server}:{port(kind, settings)}"

    blackout_start_s, cycles = _blackout_wave(start_s, settings)
    return [
        Add(link=LinkSpec(proto="tcp", dst=at("send_buffer")),  # its ACKs
            schedule=ConstantSchedule(magnitude_ms=settings.rtt_delay_ms)),
        Add(link=LinkSpec(proto="tcp", src=at("fast_retransmit")),  # its data
            schedule=ConstantSchedule(magnitude_ms=0.0, loss_fraction=settings.loss_fraction)),
        Add(link=LinkSpec(proto="tcp", src=at("timeout")),  # its replies, and ACKs of requests
            schedule=SquareSchedule(start=blackout_start_s, period_s=settings.blackout_period_s,
                                    cycles=cycles, magnitude_ms=1.0, loss_fraction=1.0)),
    ]


def blackouts(start_s: float, settings: WorkloadSettings) -> list[tuple[float, float]]:
    """(from, to) unix seconds of each cut of the timeout connection."""
    first, cycles = _blackout_wave(start_s, settings)
    half = settings.blackout_period_s / 2
    return [(first + i * settings.blackout_period_s, first + i * settings.blackout_period_s + half)
            for i in range(cycles)]


def _blackout_wave(start_s: float, settings: WorkloadSettings) -> tuple[float, int]:
    """The square wave's first rising edge and its whole periods within the run."""
    first = start_s + settings.blackout_after_s
    cycles = max(1, math.floor((settings.seconds - settings.blackout_after_s)
                               / settings.blackout_period_s))
    return first, cycles


class WorkloadLine(BaseModel):
    """A JSON line of snap_problems.py: when (unix s), which program, which event, and that
    event's fields (the others unset). "listening" has `port`; "connected" both ports; "on",
    "reading" and "requesting" the socket options granted and the reads or the gap; "slow" a
    request's `start` and `end`; "off", "read", "requested" and "done" the bytes or requests,
    and a request client's "done" its latencies.

    Fields are in the order the program writes them: `model_dump(exclude_unset=True)` is the
    line as it came."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    t: float
    role: End
    kind: str
    event: str
    port: int | None = None
    local_port: int | None = None
    peer_port: int | None = None
    sndbuf: int | None = None
    rcvbuf: int | None = None
    nodelay: int | None = None
    read_bytes: int | None = None
    read_gap_s: float | None = None
    gap_s: float | None = None
    bytes_sent: int | None = None
    bytes_received: int | None = None
    requests: int | None = None
    mean_ms: float | None = None  # None (null): no request finished
    median_ms: float | None = None
    max_ms: float | None = None
    first_ms: tuple[float, ...] | None = None
    start: float | None = None
    end: float | None = None

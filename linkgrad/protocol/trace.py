"""The sniffer's message tracing for causal paths (WAP5): the `trace` request, and the `trace`
events it emits.

`trace` starts capturing this host's TCP messages (`sniffer.message_capture`) and emits a
`trace` event every `report_interval_s` until `untrace`, which first emits a last one. An event
holds the messages finished since the previous one, compactly: endpoints and process names
are listed once and referred to by index.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictFloat, model_validator

from linkgrad.protocol.base import Message, Request, Result
from linkgrad.protocol.fields import LIMIT_UNIX_S

# A daemon gives a bpftrace this long to attach (its compile takes ~1 s of CPU, far more when
# a machine's hosts all start one at once); a request that starts one is answered after it,
# so the coordinator waits longer.
TRACER_START_S = 30.0

__all__ = [
    "TRACER_START_S",
    "Index",
    "MessageRow",
    "OpeningRow",
    "Port",
    "Seq",
    "TraceReportEvent",
    "TraceRequest",
    "Tracing",
    "UnixS",
    "Untrace",
]

UnixS = Annotated[float, Field(ge=0, lt=LIMIT_UNIX_S)]
Port = Annotated[int, Field(ge=0, le=65535)]
Seq = Annotated[int, Field(ge=0, lt=1 << 32)]
Index = Annotated[int, Field(ge=0)]


class Tracing(Result):
    """`trace`'s answer: this host's IPv4 addresses, and what it cannot give."""

    addresses: tuple[str, ...]
    missing: tuple[str, ...] = ()


class TraceRequest(Request[Tracing]):
    cmd: Literal["trace"] = "trace"
    report_interval_s: StrictFloat = Field(1.0, ge=0.1, le=3600)
    idle_s: StrictFloat = Field(5.0, gt=0, le=3600)  # a message quiet this long is finished
    exclude_ports: tuple[Port, ...] = ()  # the coordinator's own SSH port, say
    max_messages: int = Field(1_000_000, ge=1, le=100_000_000)


class Untrace(Request[Tracing]):
    cmd: Literal["untrace"] = "untrace"


# One message: local endpoint, remote endpoint (indices into `endpoints`), sent by this host
# (else received), first and end sequence numbers, the first and last segment's capture time,
# loopback (both ends on this host: sent and received at once), the process at this end (index
# into `processes`, -1: unknown).
MessageRow = tuple[Index, Index, bool, Seq, Seq, UnixS, UnixS, bool, Annotated[int, Field(ge=-1)]]
# One connection opened: its client endpoint, its server endpoint (indices into `endpoints`),
# and when its SYN was seen here.
OpeningRow = tuple[Index, Index, UnixS]


class TraceReportEvent(Message):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              allow_inf_nan=False)
    event: Literal["trace"] = "trace"
    from_s: UnixS = Field(alias="from")
    to_s: UnixS = Field(alias="to")
    endpoints: tuple[tuple[str, Port], ...] = ()
    processes: tuple[str, ...] = ()
    listening: tuple[tuple[str, Port], ...] = ()  # this host's listening sockets
    messages: tuple[MessageRow, ...] = ()
    # the thread (tid) at this end of each message, as `messages` (-1: not seen); empty:
    # this host's threads are not traced
    threads: tuple[Annotated[int, Field(ge=-1)], ...] = ()
    openings: tuple[OpeningRow, ...] = ()  # the connections opened since the last event
    segments: int = Field(0, ge=0)  # captured since tracing started
    dropped_messages: int = Field(0, ge=0)  # over max_messages, since tracing started
    ring_drops: int = Field(0, ge=0)  # packets the kernel could not put in the ring
    error: str | None = None  # the capture stopped: why

    @model_validator(mode="after")
    def _a_thread_per_message(self) -> TraceReportEvent:
        if self.threads and len(self.threads) != len(self.messages):
            raise ValueError(f"{len(self.threads)} threads for {len(self.messages)} messages")
        if any(max(client, server) >= len(self.endpoints) for client, server, _ in self.openings):
            raise ValueError(f"an opening's endpoint is not among the {len(self.endpoints)}")
        return self

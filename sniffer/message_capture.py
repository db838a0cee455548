"""This host's logical messages, captured while a run's passive phase lasts (WAP5 §3-§4's
trace, gathered by capture rather than by an interposed library).

A thread reads the packet ring (`sniffer.packet_ring`), turns segments into messages
(`sniffer.message_assembly`), and names the process at this end of each connection from a
sock_diag dump and /proc (looked up once per connection, soon after it is first seen), and
notes each connection opened while it captures (its SYN: the set-up is on the path of the
connection's first message, `Opening`). The listening sockets of the namespace say which
end of a connection is its server. Memory is bounded: at most `max_messages` wait to be
drained (more are counted as dropped), and the assembler follows at most `max_connections`
at once.

Why capture and not the socket-call tracepoints: measured on this machine (benchmarks/
paths_capture_cost.py), a bpftrace printf per call costs ~28 µs of CPU per call, the ring
~3 µs per segment, and a request/response message is one call and one segment at each end.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from linkgrad.protocol.jsonlines import leave_signals_to_main_thread
from sniffer.kernel import dump_sockets, socket_owners
from sniffer.links import Process, SocketRecord, plain_address
from sniffer.message_assembly import HostMessage, MessageAssembler
from sniffer.packet_ring import PacketRing

Endpoint = tuple[str, int]
NAMING_INTERVAL_S = 0.1  # at most one sock_diag dump this often, when connections are new


@dataclass(frozen=True)
class Opening:
    """A connection opened from `client` to `server`: its SYN, seen here at `time_s`."""

    client: Endpoint
    server: Endpoint
    time_s: float


@dataclass(frozen=True)
class CaptureSettings:
    exclude_ports: tuple[int, ...] = ()  # e.g. the SSH port the coordinator talks over
    idle_s: float = 5.0  # a message with no new segment for this long is finished
    max_messages: int = 1_000_000  # waiting to be drained; more are dropped, and counted
    max_connections: int = 100_000


class MessageCapture:
    """Start with `start()`, take messages with `drain()`, end with `stop()`."""

    def __init__(self, settings: CaptureSettings, local_addresses: set[str],
                 sockets: Callable[[], list[SocketRecord]] = dump_sockets,
                 owners: Callable[[], dict[int, Process]] = socket_owners) -> None:
        self.settings = settings
        self.assembler = MessageAssembler(local_addresses, settings.idle_s,
                                          settings.max_connections)
        self.sockets, self.owners = sockets, owners
        self.messages: collections.deque[HostMessage] = collections.deque()
        self.openings: collections.deque[Opening] = collections.deque()
        self.dropped = 0
        self.ring_drops = 0
        self.segments = 0
        self.process_of: dict[tuple[Endpoint, Endpoint], str] = {}  # (local, remote) -> name
        self.listening: set[Endpoint] = set()
        self.unnameable: set[tuple[Endpoint, Endpoint]] = set()
        self.known_owners: dict[int, Process] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.ring: PacketRing | None = None
        self.error: str | None = None

    def start(self) -> MessageCapture:
        self.ring = PacketRing(self.settings.exclude_ports)
        self.thread = threading.Thread(target=self._run, name="message-capture", daemon=True)
        self.thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout_s)
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        self._keep(self.assembler.flush())

    def drain(self) -> tuple[list[HostMessage], dict[tuple[Endpoint, Endpoint], str],
                             set[Endpoint]]:
        """(messages finished since the last drain, the process at this end of each of their
        connections (where found), this host's listening endpoints)."""
        with self.lock:
            out = list(self.messages)
            self.messages.clear()
        names = {k: self.process_of[k] for m in out for k in ((m.local, m.remote),
                                                              (m.remote, m.local))
                 if k in self.process_of}
        return out, names, set(self.listening)

    def drain_openings(self) -> list[Opening]:
        """The connections opened since the last call."""
        with self.lock:
            out = list(self.openings)
            self.openings.clear()
        return out

    def _run(self) -> None:
        leave_signals_to_main_thread()
        assert self.ring is not None
        next_expiry = time.time() + 1.0
        next_naming = 0.0
        try:
            while not self.stopping.is_set():
                done: list[HostMessage] = []
                opened = []
                for seg in self.ring.read(0.2):
                    self.segments += 1
                    # a loopback SYN is seen leaving and arriving: arriving will do
                    if seg.opening and not (seg.outgoing and seg.dst in self.assembler.local):
                        opened.append(Opening((seg.src, seg.sport), (seg.dst, seg.dport),
                                              seg.time_s))
                    if seg.syn and not seg.payload:
                        continue  # a SYN or SYN-ACK: no message
                    done += self.assembler.feed(seg.time_s, (seg.src, seg.sport),
                                                (seg.dst, seg.dport), seg.seq, seg.payload,
                                                seg.fin_or_rst, seg.outgoing)
                now = time.time()
                if now >= next_expiry:
                    done += self.assembler.expire(now)
                    next_expiry = now + 1.0
                if now >= next_naming:  # while the connections still exist
                    keys = {(m.local, m.remote) for m in done} | set(self.assembler.open)
                    # a loopback connection has a socket, and maybe a process, at either end
                    keys |= {(b, a) for a, b in keys if b[0] in self.assembler.local}
                    if keys - set(self.process_of):
                        self._name_processes(keys)
                        next_naming = now + NAMING_INTERVAL_S
                self._keep(done, opened)
        except Exception as e:  # said in the next report, not lost
            self.error = f"message capture stopped: {type(e).__name__}: {e}"

    def _keep(self, done: Sequence[HostMessage], opened: Sequence[Opening] = ()) -> None:
        if not done and not opened:
            return
        with self.lock:
            room = self.settings.max_messages - len(self.openings)
            self.openings.extend(opened[:max(room, 0)])  # (a SYN flood is not a path)
            room = self.settings.max_messages - len(self.messages)
            self.messages.extend(done[:max(room, 0)])
            self.dropped += max(len(done) - max(room, 0), 0)

    def _name_processes(self, keys: set[tuple[Endpoint, Endpoint]]) -> None:
        """Name the connections of `keys` not named yet: one sock_diag dump, /proc only if a
        socket's owner is new. A connection gone before this (shorter than the naming
        interval) stays unnamed."""
        unnamed = keys - set(self.process_of) - self.unnameable
        if not unnamed:
            return
        records = self.sockets()
        self.listening |= {(plain_address(r.local_addr), r.local_port) for r in records
                           if r.listening and r.proto == "tcp"}
        inode_of = {((plain_address(r.local_addr), r.local_port),
                     (plain_address(r.remote_addr), r.remote_port)): r.inode
                    for r in records if r.proto == "tcp" and not r.listening}
        wanted = {k: inode_of[k] for k in unnamed if k in inode_of}
        if any(i not in self.known_owners for i in wanted.values()):
            self.known_owners = self.owners()
        for key, inode in wanted.items():
            owner = self.known_owners.get(inode)
            if owner is not None:
                self.process_of[key] = owner.name
        # gone already, or held by no process (an orphan in TIME_WAIT): not looked for again
        self.unnameable |= unnamed - set(self.process_of)

    def stats(self) -> dict[str, int]:
        _, drops = (0, 0) if self.ring is None else self.ring.drops()
        self.ring_drops += drops
        return {"segments": self.segments, "dropped_messages": self.dropped,
                "ring_drops": self.ring_drops,
                "connections_not_followed": self.assembler.overflow}

"""The reconciled trace (WAP5 §4): one row per logical message, stored by column.

A logical message is what one side of a TCP connection sends between two turns of the
conversation (WAP5 §2.3's "fat message": the writes of one direction merged until the other
side speaks). Each row has the sender's and the receiver's timestamp, each on its own host's
clock (NaN, WAP5's *nil*, where that end was not traced), the two nodes, the two hosts, the
connection and its two ports.

Nodes are (host, process) names in `Trace.nodes`; hosts index `Trace.hosts`. A connection is
an index into `Trace.connections`, whose `server` column says which end listens: its messages
are replies, the other end's are requests (WAP5 §2.5.1's fixed and ephemeral ports).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["MESSAGE_COLUMNS", "NO_THREAD", "UNKNOWN_END", "Connections", "Messages", "Trace"]

# Columns of Messages and their dtypes: times float64 seconds, names int indices.
MESSAGE_COLUMNS: dict[str, type] = {
    "send_s": np.float64, "recv_s": np.float64, "src": np.int32, "dst": np.int32,
    "conn": np.int32, "size_bytes": np.int64, "send_thread": np.int64,
    "recv_thread": np.int64, "send_end_s": np.float64, "by_server": np.int8,
}
NO_THREAD = -1  # a message's thread where the tracer did not see it
UNKNOWN_END = -1  # by_server where not given: the sending node says


@dataclass(frozen=True, eq=False)
class Messages:
    """Logical messages, one per row (any order; `Trace` keeps them sorted).

    send_s, recv_s: on the sender's and the receiver's clock; NaN where not traced.
    src, dst: sending and receiving node (index into Trace.nodes).
    conn: the connection (index into Trace.connections) the message went over.
    size_bytes: payload bytes.
    send_thread, recv_thread: the thread (tid, or pid) that sent it and that received it,
    where the host's tracer saw them (NO_THREAD where not; all NO_THREAD if not given). A
    server that serves one request per process or thread (Apache prefork, PHP-FPM, a JDBC
    thread pool) sends a request's calls from the thread that received it.
    send_end_s: when its last byte left, on the sender's clock (NaN where not known). A
    response written in parts can wait, between them, for calls made after its first byte.
    by_server: 1 if its connection's server end sent it, 0 if the client end, UNKNOWN_END
    where not given (then the sending node says). A connection between two processes of
    one node (a capture has hosts, not processes: nginx to PHP-FPM over loopback) has the
    same node at both ends: only the ports say which way a message went.
    """

    send_s: np.ndarray
    recv_s: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    conn: np.ndarray
    size_bytes: np.ndarray
    send_thread: np.ndarray | None = None
    recv_thread: np.ndarray | None = None
    send_end_s: np.ndarray | None = None
    by_server: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = None
        for name, dtype in MESSAGE_COLUMNS.items():
            given = getattr(self, name)
            if given is None:  # not traced: unknown throughout
                given = np.full(len(self.send_s), np.nan if dtype is np.float64 else NO_THREAD)
            column = np.array(given, dtype=dtype)
            if column.ndim != 1:
                raise ValueError(f"column {name!r} must be 1-D, got shape {column.shape}")
            if n is not None and len(column) != n:
                raise ValueError(f"column {name!r} has {len(column)} rows, expected {n}")
            n = len(column)
            column.setflags(write=False)
            object.__setattr__(self, name, column)

    def __len__(self) -> int:
        return len(self.send_s)

    def take(self, index: ArrayLike) -> Messages:
        """The rows at integer positions or a boolean mask, in that order."""
        at = np.asarray(index)
        return Messages(**{f.name: getattr(self, f.name)[at] for f in fields(self)})


@dataclass(frozen=True, eq=False)
class Connections:
    """One row per TCP connection: its two endpoints and which of them is the server.

    client_node, server_node: index into Trace.nodes; client_port, server_port: the ports.
    A connection whose server end is not known (neither port listens) has the lower port as
    server: the side that accepted is usually the one with the well-known port.
    opened: its set-up (SYN) was seen in the trace (all False if not given).
    """

    client_node: np.ndarray
    server_node: np.ndarray
    client_port: np.ndarray
    server_port: np.ndarray
    opened: np.ndarray | None = None

    def __post_init__(self) -> None:
        lengths = set()
        for f in fields(self):
            given = getattr(self, f.name)
            if given is None:
                given = np.zeros(len(self.client_node), dtype=bool)
            column = np.array(given, dtype=bool if f.name == "opened" else np.int32)
            column.setflags(write=False)
            object.__setattr__(self, f.name, column)
            lengths.add(len(column))
        if len(lengths) > 1:
            raise ValueError(f"connection columns of unequal lengths {sorted(lengths)}")

    def __len__(self) -> int:
        return len(self.client_node)


@dataclass(frozen=True, eq=False)
class Trace:
    """A reconciled trace: messages sorted by their sender's time (the receiver's where the
    sender was not traced), the names they index, and the host of each node.

    nodes: node names, "host/process" (or just the host where the process is unknown).
    node_host: the host index of each node. hosts: host names.
    clients: per node, True if it never listens on any connection in the trace (WAP5 §2.5.1:
    a node that uses no fixed port is a client, all named CLIENT in path patterns).
    """

    messages: Messages
    connections: Connections
    nodes: tuple[str, ...]
    node_host: np.ndarray
    hosts: tuple[str, ...]

    def __post_init__(self) -> None:
        node_host = np.array(self.node_host, dtype=np.int32)
        node_host.setflags(write=False)
        object.__setattr__(self, "node_host", node_host)
        m, c = self.messages, self.connections
        if len(node_host) != len(self.nodes):
            raise ValueError(f"{len(self.nodes)} nodes but {len(node_host)} node hosts")
        _check_index("messages.src", m.src, len(self.nodes))
        _check_index("messages.dst", m.dst, len(self.nodes))
        _check_index("messages.conn", m.conn, len(c))
        _check_index("node_host", node_host, len(self.hosts))
        order = np.argsort(self.order_s, kind="stable")
        if np.any(order != np.arange(len(order))):
            raise ValueError("messages must be sorted by time (Trace.sorted makes them so)")

    @property
    def order_s(self) -> np.ndarray:
        """The time each message is ordered by: sent, or received where the send is nil."""
        m = self.messages
        return np.where(np.isnan(m.send_s), m.recv_s, m.send_s)

    @classmethod
    def sorted(cls, messages: Messages, connections: Connections, nodes: tuple[str, ...],
               node_host: ArrayLike, hosts: tuple[str, ...]) -> Trace:
        """A trace of `messages` in time order (stable: equal times keep their order)."""
        key = np.where(np.isnan(messages.send_s), messages.recv_s, messages.send_s)
        if np.isnan(key).any():
            raise ValueError(f"{int(np.isnan(key).sum())} messages have neither timestamp")
        return cls(messages.take(np.argsort(key, kind="stable")), connections, tuple(nodes),
                   np.asarray(node_host), tuple(hosts))

    @property
    def clients(self) -> np.ndarray:
        listening = np.zeros(len(self.nodes), dtype=bool)
        listening[self.connections.server_node] = True
        return ~listening

    def is_reply(self) -> np.ndarray:
        """Per message: sent by its connection's server end (a reply), else a request."""
        m = self.messages
        by_node = m.src == self.connections.server_node[m.conn]
        return np.where(m.by_server == UNKNOWN_END, by_node, m.by_server == 1)

    def src_host(self) -> np.ndarray:
        return self.node_host[self.messages.src]

    def first_of_connections(self) -> np.ndarray:
        """Each connection's first message (by index: the messages are in time order)."""
        _, first = np.unique(self.messages.conn, return_index=True)
        return first

    def set_up_crossings(self) -> tuple[np.ndarray, np.ndarray]:
        """Per message, the crossings of its connection's set-up on its path, in its own
        direction and in the other: on the first message of a connection opened in the
        trace, the SYN and the SYN-ACK come before it, (1, 1) when the client speaks first;
        when the server does (MySQL's greeting), it waits for the client's ACK too, (1, 2)."""
        m = self.messages
        same, other = np.zeros(len(m), dtype=np.int64), np.zeros(len(m), dtype=np.int64)
        first = self.first_of_connections()
        first = first[self.connections.opened[m.conn[first]]]
        same[first] = 1
        other[first] = np.where(self.is_reply()[first], 2, 1)
        return same, other

    def dst_host(self) -> np.ndarray:
        return self.node_host[self.messages.dst]


def _check_index(name: str, column: np.ndarray, size: int) -> None:
    bad = np.flatnonzero((column < 0) | (column >= size))
    if len(bad):
        raise ValueError(f"{name} out of range 0..{size - 1} at rows {bad[:5].tolist()}")

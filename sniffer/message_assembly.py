"""Logical messages from one host's captured TCP segments (WAP5 §2.3's fat messages).

Per connection, a direction's payload between two turns of the conversation is one message:
a segment in the other direction closes the message under way. A message is kept as its
sequence range [first, end) and the capture times of its first and last segment; the host
was its sender (segments leaving) or its receiver (segments arriving) — on loopback both,
from the packet's arriving copy (its leaving copy is skipped). A segment wholly before the
message's end is a retransmission: it extends nothing. Sequence numbers are compared modulo
2**32. A message with no new segment for `idle_s` is closed too, so one that is never
answered (the last of a connection, a push) still comes out; so is every message of a
connection that ends (FIN or RST).

Pure logic over segments; `sniffer.message_capture` feeds it from the packet ring.
"""

from __future__ import annotations

from dataclasses import dataclass

SEQ_MOD = 1 << 32
HALF = 1 << 31


@dataclass(frozen=True)
class HostMessage:
    """A message as one host saw it. `local`/`remote` are (address, port); `sent` is True
    when the host sent it (from local to remote)."""

    local: tuple[str, int]
    remote: tuple[str, int]
    sent: bool
    seq_first: int
    seq_end: int  # one past its last byte (mod 2**32)
    first_s: float
    last_s: float
    segments: int
    loopback: bool = False

    @property
    def size_bytes(self) -> int:
        return (self.seq_end - self.seq_first) % SEQ_MOD


@dataclass
class _Open:
    sent: bool
    seq_first: int
    seq_end: int
    first_s: float
    last_s: float
    segments: int


def _after(a: int, b: int) -> bool:
    """a is later than b in sequence space."""
    return 0 < (a - b) % SEQ_MOD < HALF


class MessageAssembler:
    """Segments in capture order in; finished messages out of `feed` and `expire`."""

    def __init__(self, local_addresses: set[str], idle_s: float = 5.0,
                 max_connections: int = 100_000) -> None:
        self.local = local_addresses
        self.idle_s = idle_s
        self.max_connections = max_connections
        # (local, remote) -> the message under way (one direction at a time)
        self.open: dict[tuple[tuple[str, int], tuple[str, int]], _Open] = {}
        self.overflow = 0  # connections not followed: the table was full

    def feed(self, time_s: float, src: tuple[str, int], dst: tuple[str, int], seq: int,
             payload: int, closing: bool, outgoing: bool) -> list[HostMessage]:
        """One captured segment; returns the messages it finished."""
        loopback = src[0] in self.local and dst[0] in self.local
        if loopback and outgoing:
            return []  # a loopback packet is seen leaving and arriving: one of them will do
        sent = outgoing or loopback
        local, remote = (src, dst) if sent and not loopback else (dst, src)
        if loopback:  # both ends here: key by the lower end, the direction by who sends
            local, remote = min(src, dst), max(src, dst)
            sent = src == local
        key = (local, remote)
        done: list[HostMessage] = []
        cur = self.open.get(key)
        end = (seq + payload) % SEQ_MOD
        if cur is not None and cur.sent == sent:
            if _after(end, cur.seq_end):
                cur.seq_end = end
                cur.last_s = time_s
                cur.segments += 1
        else:
            if cur is not None:
                done.append(_message(key, cur, loopback))
            if cur is None and len(self.open) >= self.max_connections:
                self.overflow += 1
            else:
                self.open[key] = _Open(sent, seq, end, time_s, time_s, 1)
        if closing and key in self.open:
            done.append(_message(key, self.open.pop(key), loopback))
        return done

    def expire(self, now_s: float) -> list[HostMessage]:
        """Messages quiet for `idle_s`: finished (their connection's next turn never came)."""
        stale = [k for k, m in self.open.items() if m.last_s < now_s - self.idle_s]
        return [_message(k, self.open.pop(k), _is_loop(k, self.local)) for k in stale]

    def flush(self) -> list[HostMessage]:
        """Every message under way (the capture stops)."""
        out = [_message(k, m, _is_loop(k, self.local)) for k, m in self.open.items()]
        self.open.clear()
        return out


def _is_loop(key: tuple[tuple[str, int], tuple[str, int]], local: set[str]) -> bool:
    return key[0][0] in local and key[1][0] in local


def _message(key: tuple[tuple[str, int], tuple[str, int]], m: _Open, loopback: bool
             ) -> HostMessage:
    local, remote = key
    return HostMessage(local, remote, m.sent, m.seq_first, m.seq_end, m.first_s, m.last_s,
                       m.segments, loopback)

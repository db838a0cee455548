"""Telling a stalled injector from a busy one: pure logic for the watchdog (`injector.watchdog`).

The engine's two threads each count their loops in shared memory (a heartbeat slot each; they
loop at least every `BEAT_S`, and the receiver once per packet too). The kernel's NFQUEUE table
(`/proc/net/netfilter/nfnetlink_queue`, per network namespace) says how many packets each queue
holds for a verdict and the id of its newest. A daemon is stalled when a slot has not moved for
`STALL_S` while one of its queues holds packets: stopped (SIGSTOP stops every thread), or a
thread stuck. A long delay is no stall: the threads beat while they hold packets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

BEAT_S = 0.1  # the engine's threads beat at least this often
STALL_S = 0.5  # five beats missed: stalled (a busy host delays a thread, not by 0.5 s)
TICK_S = 0.05  # the watchdog looks this often: held packets pass within STALL_S + TICK_S + rules
QUEUE_TABLE = "/proc/net/netfilter/nfnetlink_queue"


@dataclass(frozen=True)
class QueueState:
    """One line of the kernel's queue table (nfnetlink_queue.c, seq_show)."""

    queue_num: int
    portid: int  # the netlink socket bound to it
    waiting: int  # packets waiting for a verdict, read by the daemon or not
    last_id: int  # id_sequence: the id the newest packet got (u32, wraps)


def parse_queue_table(text: str) -> dict[int, QueueState]:
    """queue number -> state; lines that are not the table's layout are passed over (a
    kernel that adds a column still gives the first eight)."""
    states = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8 or not all(f.isascii() and f.isdigit() for f in fields[:8]):
            continue
        queue_num, portid, waiting = int(fields[0]), int(fields[1]), int(fields[2])
        states[queue_num] = QueueState(queue_num, portid, waiting, int(fields[7]))
    return states


@dataclass
class StallDetector:
    """How long the slowest heartbeat slot has not moved, by the watchdog's own clock."""

    last: tuple[int, ...] = ()
    changed_at: list[float] = field(default_factory=list)

    def quiet_s(self, counters: Sequence[int], now: float) -> float:
        """Seconds since the slot that moved least recently last moved (0 at the first look)."""
        if len(counters) != len(self.last):
            self.last, self.changed_at = tuple(counters), [now] * len(counters)
            return 0.0
        for i, (value, before) in enumerate(zip(counters, self.last, strict=True)):
            if value != before:
                self.changed_at[i] = now
        self.last = tuple(counters)
        return now - min(self.changed_at, default=math.inf) if self.changed_at else 0.0


def stalled(quiet_s: float, states: dict[int, QueueState], queues: Sequence[int],
            stall_s: float = STALL_S) -> int:
    """Packets waiting in `queues` if the daemon is stalled (quiet for `stall_s`), else 0."""
    if quiet_s < stall_s:
        return 0
    return sum(states[q].waiting for q in queues if q in states)

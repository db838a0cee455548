"""Holding packets of one link until their time: the order-preserving delay line.

A packet's due time is arrival + the schedule's delay, but never earlier than the packet before
it on the same link, so order within a link (hence within every flow of it) is kept and no
packet leaves before its time. Per schedule and phase, calipers record the delay actually
applied and its error against the requested one. Pure logic with injected clocks: the threads
that feed and drain it live in `engine`.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from injector.calipers import Calipers, delay_summary
from injector.link import Link
from injector.schedule import OFF, Schedule
from linkgrad.protocol import injector as protocol


class Verdict(Protocol):
    """What the holding line needs of a queued packet (netfilterqueue's Packet has these)."""

    def accept(self) -> None: ...

    def drop(self) -> None: ...


MAX_DROP_TIMES = 100_000  # kept per link: 800 KB at most

@dataclass
class PhaseStats:
    actual: Calipers = field(default_factory=Calipers)  # release - arrival
    error: Calipers = field(default_factory=Calipers)  # actual - requested


@dataclass
class HoldingLine:
    """One link's delay line and its statistics."""

    link: Link
    schedule: Schedule
    mono: Callable[[], float]  # monotonic clock for holding
    wall: Callable[[], float]  # unix clock for the schedule's phase
    schedule_id: int = 0
    dropped: int = 0
    # the latest drops' unix times, for labelling what a loss did (a benchmark's ground truth)
    drop_times: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_DROP_TIMES))
    fifo: deque[tuple[float, float, float, PhaseStats, Verdict]] = field(default_factory=deque)
    stats: dict[tuple[int, str], PhaseStats] = field(default_factory=dict)
    _last_due: float = 0.0
    _rng: random.Random = field(default_factory=random.Random)
    _stats_lock: threading.Lock = field(default_factory=threading.Lock)  # two threads record

    def set_schedule(self, schedule: Schedule) -> int:
        self.schedule = schedule
        self.schedule_id += 1
        return self.schedule_id

    def _stats(self, phase: str) -> PhaseStats:
        key = (self.schedule_id, phase)
        if key not in self.stats:
            self.stats[key] = PhaseStats()
        return self.stats[key]

    def arrive(self, packet: Verdict) -> float | None:
        """Take a packet; returns its due time if held, None if it was passed or dropped."""
        now = self.mono()
        wall = self.wall()
        schedule = self.schedule
        phase = schedule.phase(wall)
        stats = self._stats(phase)
        if phase != OFF and schedule.loss_fraction and self._rng.random() < schedule.loss_fraction:
            packet.drop()
            self.dropped += 1
            self.drop_times.append(wall)
            return None
        requested = schedule.delay_s(wall)
        due = now + requested
        if self.fifo:
            due = max(due, self._last_due)
        elif requested == 0.0:
            packet.accept()  # fast path: nothing to wait for
            with self._stats_lock:
                stats.actual.add(0.0)
                stats.error.add(0.0)
            return None
        self._last_due = due
        self.fifo.append((due, now, requested, stats, packet))
        return due

    def release(self, now: float) -> float | None:
        """Accept every packet due by `now`; returns the next due time, if any."""
        fifo = self.fifo
        while fifo and fifo[0][0] <= now:
            _, arrival, requested, stats, packet = fifo.popleft()
            # the packet is let go when the verdict is issued; the kernel then re-injects it
            # inside the same syscall (tens of µs of ordinary transmission, not our delay)
            actual = self.mono() - arrival
            packet.accept()
            with self._stats_lock:
                stats.actual.add(actual)
                stats.error.add(actual - requested)
        return fifo[0][0] if fifo else None

    def release_all(self) -> int:
        """Let every held packet go now (stop, or the link removed): never strand traffic."""
        n = 0
        while self.fifo:
            self.fifo.popleft()[4].accept()
            n += 1
        return n

    def link_stats(self, drop_times: bool = False) -> protocol.LinkStats:
        phases: dict[str, dict[str, protocol.PhaseStats]] = {}
        with self._stats_lock:  # reading calipers summarises their pending block: no add then
            for (schedule_id, phase), s in sorted(self.stats.items()):
                phases.setdefault(str(schedule_id), {})[phase] = protocol.PhaseStats(
                    actual=delay_summary(s.actual), error=delay_summary(s.error))
        return protocol.LinkStats(link=str(self.link), schedule_id=self.schedule_id,
                                  dropped=self.dropped, held=len(self.fifo), schedules=phases,
                                  drop_times_s=tuple(self.drop_times) if drop_times else None)

"""The NFQUEUE delay engine: several links, each with its own queue, rule and schedule.

Threads: one receiver drains every link's queue (netfilterqueue releases the GIL in recv) and
hands packets to their `HoldingLine`; one releaser lets them go at their due time, waiting on
an event until `spin_s` before it and spinning (yielding the GIL) the rest, so releases land
within tens of microseconds. Stopping removes the rules first, drains what is still in the
kernel's queues, and lets every held packet go: stopping never drops traffic.

IPv4 links' rules go through iptables, IPv6 links' through ip6tables (`firewall6`; a chain of
the same name), both made at start, so a stale chain of either is removed; a host without
ip6tables delays IPv4 links and refuses IPv6 ones, saying why.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import selectors
import shutil
import sys
import threading
import time
from collections.abc import MutableSequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from injector.holding import HoldingLine
from injector.link import Link
from injector.nfq import bind_queue
from injector.rules import Firewall, chain_name, queue_rule
from injector.schedule import Schedule
from injector.stall import BEAT_S
from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.protocol.injector import LinkStats
from linkgrad.protocol.jsonlines import leave_signals_to_main_thread

if TYPE_CHECKING:
    from injector.watchdog import Watchdog

RECEIVER, RELEASER = 0, 1  # heartbeat slots (injector.watchdog.Heartbeat)

PR_SET_TIMERSLACK = 29


@dataclass
class _Slot:
    line: HoldingLine
    queue: Any  # netfilterqueue.NetfilterQueue
    queue_num: int
    rule: list[str]
    fd: int
    firewall: Firewall  # iptables or ip6tables, by the link's IP version


class Engine:
    """Delays packets of links by schedule until `close()`; use as a context manager."""

    MAX_LINKS = 16  # queues base+1 .. base+MAX_LINKS

    def __init__(self, queue_base: int = 4200, max_links: int = MAX_LINKS, spin_s: float = 5e-5,
                 iptables: str = "iptables", max_queue_len: int = 4096,
                 realtime: bool = False, ip6tables: str = "ip6tables") -> None:
        self.queue_base = queue_base
        self.max_links = max_links
        self.spin_s = spin_s
        self.max_queue_len = max_queue_len
        self.firewall = Firewall(chain_name(queue_base), iptables)
        self.firewall6 = Firewall(chain_name(queue_base), ip6tables) \
            if shutil.which(ip6tables) else None
        self.no_ipv6 = "ip6tables is not installed on this host (Debian's iptables package " \
            "has it)"  # why IPv6 links are refused, when firewall6 is None
        self.slots: dict[int, _Slot] = {}
        self.callback_errors = 0
        self.want_realtime = realtime
        self.realtime = False  # did the releaser get SCHED_FIFO
        self.stale_removed = False
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._idle = False
        self._target = float("inf")
        self._queue_lock = threading.Lock()  # a queue is never run while being unbound
        self._selector = selectors.DefaultSelector()
        self._pipe_r, self._pipe_w = os.pipe()
        self._threads: list[threading.Thread] = []
        self._started = False
        self.watchdog: Watchdog | None = None
        self._beats: MutableSequence[int] = [0, 0]  # each thread's loops: its progress

    def attach(self, watchdog: Watchdog) -> None:
        """Beat into the watchdog's heartbeat and hand it every queue socket (before start)."""
        self.watchdog = watchdog
        self._beats = watchdog.heartbeat.slots

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> Engine:
        if os.geteuid() != 0:
            raise RuntimeFailure("the injector needs root (CAP_NET_ADMIN): it changes iptables "
                                 "rules and reads NFQUEUE")
        # Owning the base queue (no rule points at it) makes the chain ours: a second daemon
        # on the same base fails here, before it could take our live rules for stale ones.
        self._lock_queue = bind_queue(self.queue_base, lambda packet: packet.accept(),
                                      max_len=1)
        self.stale_removed = self.firewall.remove_stale()
        # The releaser must get the GIL back within ~0.1 ms of a due time, not after the
        # default 5 ms switch interval while the receiver drains a burst.
        sys.setswitchinterval(1e-4)
        self.firewall.create()
        self._start_ipv6()
        self._selector.register(self._pipe_r, selectors.EVENT_READ, None)
        for target, name in ((self._receive_loop, "receiver"), (self._release_loop, "releaser")):
            thread = threading.Thread(target=target, name=f"injector-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._started = True
        return self

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove rules, stop threads, hand back every packet, unbind. Safe to call twice."""
        if not self._started:
            return
        self._started = False
        first: Exception | None = None
        released = self.watchdog is not None and self.watchdog.released()
        for firewall in self.firewalls:
            try:
                if released:
                    firewall.forget()  # the watchdog removed the chain after a stall
                    firewall.remove_stale()  # (and nothing may be left if it could not)
                else:
                    firewall.teardown()  # no new packets reach the queues
            except RuntimeFailure as e:
                first = first or e
        self._stop.set()
        self._wake.set()
        os.write(self._pipe_w, b"x")
        for thread in self._threads:
            thread.join(timeout=5.0)
        for slot in list(self.slots.values()):
            self._drain_and_unbind(slot)
        self.slots.clear()
        self._selector.close()
        os.close(self._pipe_r)
        os.close(self._pipe_w)
        self._lock_queue.unbind()
        if first is not None:
            raise first

    def _start_ipv6(self) -> None:
        """The IPv6 chain; where ip6tables fails (a kernel booted without IPv6), IPv4 links are
        still delayed and IPv6 ones refused with the reason."""
        if self.firewall6 is None:
            return
        try:
            self.stale_removed = self.firewall6.remove_stale() or self.stale_removed
            self.firewall6.create()
        except RuntimeFailure as e:
            with contextlib.suppress(RuntimeFailure):
                self.firewall6.teardown()
            self.firewall6 = None
            self.no_ipv6 = f"ip6tables fails on this host ({e})"

    @property
    def firewalls(self) -> list[Firewall]:
        return [f for f in (self.firewall, self.firewall6) if f is not None]

    # links -----------------------------------------------------------------------------
    def add_link(self, link: Link, schedule: Schedule) -> int:
        if len(self.slots) >= self.max_links:
            raise InputError(Problem(f"at most {self.max_links} links at once", field="link"))
        if any(slot.line.link == link for slot in self.slots.values()):
            raise InputError(Problem(f"link {link} is already being delayed", field="link"))
        firewall = self.firewall if link.version == 4 else self.firewall6
        if firewall is None:
            raise RuntimeFailure(f"cannot delay {link}: {self.no_ipv6}")
        link_id = next(self._ids)
        line = HoldingLine(link, schedule, time.monotonic, time.time)
        queue_num = self.queue_base + link_id
        queue = bind_queue(queue_num, lambda packet: self._arrive(line, packet),
                           self.max_queue_len)
        rule = queue_rule(firewall.chain, link, queue_num)
        slot = _Slot(line, queue, queue_num, rule, queue.get_fd(), firewall)
        self.slots[link_id] = slot
        if self.watchdog is not None:
            self.watchdog.bound(queue_num, slot.fd)
        self._selector.register(slot.fd, selectors.EVENT_READ, slot)
        try:
            firewall.add(rule)
        except RuntimeFailure:
            self._forget(link_id)
            raise
        return link_id

    def set_schedule(self, link_id: int, schedule: Schedule) -> int:
        return self._slot(link_id).line.set_schedule(schedule)

    def remove_link(self, link_id: int) -> LinkStats:
        slot = self._slot(link_id)
        slot.firewall.remove(slot.rule)
        stats = slot.line.link_stats()
        self._forget(link_id)
        return stats

    def stats(self, drop_times: bool = False) -> dict[int, LinkStats]:
        return {link_id: slot.line.link_stats(drop_times)
                for link_id, slot in self.slots.items()}

    def _slot(self, link_id: int) -> _Slot:
        if link_id not in self.slots:
            raise InputError(Problem(f"no link with id {link_id}", field="link_id"))
        return self.slots[link_id]

    def _forget(self, link_id: int) -> None:
        slot = self.slots.pop(link_id)
        with self._queue_lock:
            self._selector.unregister(slot.fd)
        self._drain_and_unbind(slot)

    def _drain_and_unbind(self, slot: _Slot) -> None:
        if self.watchdog is not None:
            self.watchdog.unbound(slot.queue_num)
        with self._queue_lock:
            slot.queue.run(block=False)  # packets already in the kernel queue
            slot.line.release_all()
            slot.queue.unbind()

    # threads ---------------------------------------------------------------------------
    def _arrive(self, line: HoldingLine, packet: Any) -> None:
        self._beats[RECEIVER] += 1  # a burst keeps the receiver in one run(): still progress
        try:
            due = line.arrive(packet)
        except Exception:
            self.callback_errors += 1
            packet.accept()  # fail open: a bug here must not eat traffic
            return
        if due is not None and (self._idle or due < self._target):
            self._wake.set()

    def _receive_loop(self) -> None:
        leave_signals_to_main_thread()
        if self.want_realtime:
            _realtime()
        while not self._stop.is_set():
            self._beats[RECEIVER] += 1
            for key, _ in self._selector.select(timeout=BEAT_S):
                if key.data is None:
                    os.read(self._pipe_r, 64)
                    continue
                with self._queue_lock:
                    if key.data in self.slots.values():
                        key.data.queue.run(block=False)

    def _release_once(self) -> float | None:
        now = time.monotonic()
        dues = [slot.line.release(now) for slot in list(self.slots.values())]
        pending = [d for d in dues if d is not None]
        return min(pending) if pending else None

    def _release_loop(self) -> None:
        leave_signals_to_main_thread()
        _precise_timers()
        self.realtime = self.want_realtime and _realtime()
        while not self._stop.is_set():
            self._beats[RELEASER] += 1
            next_due = self._release_once()
            if next_due is None:
                self._idle = True
                if self._release_once() is None:  # a packet may have come in meanwhile
                    self._wake.wait(BEAT_S)
                self._wake.clear()
                self._idle = False
                continue
            self._target = next_due
            wait = next_due - time.monotonic()
            if wait > self.spin_s:
                self._wake.wait(min(wait - self.spin_s, BEAT_S))  # beat while holding
                self._wake.clear()
            else:
                while time.monotonic() < next_due:
                    time.sleep(0)  # spin, letting the receiver thread run
            self._target = float("inf")


def _realtime(priority: int = 10) -> bool:
    """SCHED_FIFO for the calling thread (root only), so a loaded host does not make releases
    wait for a CPU (benchmarked: 6-15 µs mean error with both cores busy instead of ~0.5 ms).
    Opt-in: it costs about three times the CPU per packet, so at high packet rates it takes
    CPU from the host it should leave alone."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (PermissionError, OSError, AttributeError):
        return False
    return True


def _precise_timers() -> None:
    """Timer slack 1 ns for the calling thread: Linux otherwise lets a timed wait (and
    sleep(0)) overrun by up to 50 µs, which would be most of the injector's error."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: coarser releases, still measured and reported

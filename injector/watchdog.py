"""The injector's watchdog: a process of its own that lets a link's packets go when the daemon
cannot, whether it died or stalled (SIGSTOP stops every thread of the daemon, not this).

The daemon starts it with one end of a Unix socket pair and a shared-memory heartbeat, and
passes it each NFQUEUE socket it binds (SCM_RIGHTS: the same socket, so the kernel takes its
verdicts as the daemon's). It then:

- on a stall (`injector.stall`: a heartbeat quiet for STALL_S while packets wait) accepts every
  waiting packet, removes the daemon's chain, accepts what came meanwhile, tells the daemon why
  and sends it SIGTERM, which a stopped daemon takes when it is continued: its timing is gone,
  so it stops and says so instead of injecting on;
- on the daemon's end without its "clean" word (killed), does the same without the signal,
  so packets held at the moment of death pass rather than being dropped with the queue;
- ends when the daemon's end of the pair closes, closing its copies of the queue sockets.

    python -m injector.watchdog CHAIN DAEMON_PID PAIR_FD HEARTBEAT_FD
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from injector.nfq import accept_batch_message
from injector.rules import Firewall
from injector.stall import (
    QUEUE_TABLE,
    STALL_S,
    TICK_S,
    StallDetector,
    parse_queue_table,
    stalled,
)
from linkgrad.errors import RuntimeFailure

SLOTS = 2  # heartbeat slots: 0 the receiver thread, 1 the releaser thread
RECEIVER, RELEASER = 0, 1
CLEAN = b"clean"


class Heartbeat:
    """Loop counters in shared memory (a memfd both processes map)."""

    def __init__(self, fd: int | None = None) -> None:
        self.fd = os.memfd_create("linkgrad-heartbeat") if fd is None else fd
        os.ftruncate(self.fd, 8 * SLOTS)
        self._map = mmap.mmap(self.fd, 8 * SLOTS)
        self.slots = (ctypes.c_uint64 * SLOTS).from_buffer(self._map)

    def beat(self, slot: int) -> None:
        self.slots[slot] += 1

    def read(self) -> tuple[int, ...]:
        return tuple(self.slots)


# ------------------------------------------------------------------------- the daemon's side


class Watchdog:
    """The daemon's handle on its watchdog process (and the guard against its being killed:
    without `release(clean=True)` the watchdog removes the chain)."""

    def __init__(self, chain: str) -> None:
        self.heartbeat = Heartbeat()
        self.pair, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.reason: str | None = None
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "injector.watchdog", chain, str(os.getpid()),
                 str(theirs.fileno()), str(self.heartbeat.fd)],
                pass_fds=(theirs.fileno(), self.heartbeat.fd), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, start_new_session=True)  # a Ctrl-C is not for it
        finally:
            theirs.close()

    def bound(self, queue_num: int, fd: int) -> None:
        socket.send_fds(self.pair, [b"bind %d" % queue_num], [fd])

    def unbound(self, queue_num: int) -> None:
        self.pair.send(b"unbind %d" % queue_num)

    def released(self) -> str | None:
        """Why the watchdog let the links go, if it did (it says so before the signal)."""
        while self.reason is None:
            try:
                said = self.pair.recv(4096, socket.MSG_DONTWAIT)
            except (BlockingIOError, OSError):
                break
            if not said:
                break
            self.reason = said.decode(errors="replace")
        return self.reason

    def release(self, clean: bool) -> None:
        """The daemon's last word: `clean` if every rule is gone; the watchdog then ends."""
        with contextlib.suppress(OSError):
            if clean:
                self.pair.send(CLEAN)
        self.pair.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


# ------------------------------------------------------------------------ the watchdog's side


class Guard:
    """The watchdog's state: the daemon's queue sockets and whether it let them go."""

    def __init__(self, chain: str, pair: socket.socket, heartbeat: Heartbeat,
                 pidfd: int | None) -> None:
        self.chain, self.pair, self.heartbeat, self.pidfd = chain, pair, heartbeat, pidfd
        self.queues: dict[int, socket.socket] = {}
        self.clean = False
        self.released = False
        self.detector = StallDetector()

    def take(self, message: bytes, fds: list[int]) -> None:
        word, _, number = message.partition(b" ")
        if word == b"bind" and fds:
            self.queues[int(number)] = socket.socket(fileno=fds[0])
        elif word == b"unbind":
            queue = self.queues.pop(int(number), None)
            if queue is not None:
                queue.close()
        elif word == CLEAN:
            self.clean = True
        for fd in fds[1:] if word == b"bind" else fds:
            os.close(fd)

    def let_pass(self) -> int:
        """Accept every packet waiting in the daemon's queues; how many waited."""
        states = parse_queue_table(_read(QUEUE_TABLE))
        waiting = 0
        for queue_num, sock in self.queues.items():
            state = states.get(queue_num)
            if state is not None and state.waiting:
                with contextlib.suppress(OSError):
                    sock.send(accept_batch_message(queue_num, state.last_id))
                waiting += state.waiting
        return waiting

    def take_over(self) -> int:
        """Packets pass, the chain goes, packets that came meanwhile pass: how many waited."""
        waiting = self.let_pass()
        for tool in ("iptables", "ip6tables"):  # the chain has a twin for IPv6 links
            with contextlib.suppress(RuntimeFailure):
                Firewall(self.chain, tool).remove_stale()
        return waiting + self.let_pass()

    def check(self, now: float) -> None:
        """On a stall: take over, tell the daemon why, and signal it to stop."""
        quiet_s = self.detector.quiet_s(self.heartbeat.read(), now)
        if self.released or quiet_s < STALL_S or not self.queues:
            return
        waiting = stalled(quiet_s, parse_queue_table(_read(QUEUE_TABLE)), list(self.queues))
        if not waiting:
            return
        self.released = True
        passed = self.take_over()
        reason = (f"stalled: no progress for {quiet_s:.2f} s while {waiting} packets waited; "
                  f"the watchdog let {passed} pass and removed {self.chain} (the injection "
                  "stopped: its timing cannot be trusted)")
        with contextlib.suppress(OSError):
            self.pair.send(reason.encode())
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGTERM)

    def end(self) -> None:
        """The daemon is gone: if it did not leave clean, packets pass and the chain goes."""
        if not (self.clean or self.released):
            self.take_over()
        for sock in self.queues.values():
            sock.close()
        self.queues.clear()


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _parent_pidfd(daemon_pid: int) -> int | None:
    """A pidfd of the daemon, our parent (checked after opening: a pid may be reused once
    its process is gone; a pidfd may not)."""
    if os.getppid() != daemon_pid:
        return None
    try:
        pidfd = os.pidfd_open(daemon_pid)
    except OSError:
        return None
    if os.getppid() != daemon_pid:
        os.close(pidfd)
        return None
    return pidfd


def watch(guard: Guard) -> None:
    """Until the daemon's end of the pair closes."""
    while True:
        readable, _, _ = select.select([guard.pair], [], [], TICK_S)
        if readable:
            try:
                message, fds, _, _ = socket.recv_fds(guard.pair, 256, 4)
            except OSError:
                message, fds = b"", []
            if not message and not fds:
                break  # end of file: the daemon closed it, or died
            guard.take(message, fds)
        guard.check(time.monotonic())
    guard.end()


def main(argv: list[str] | None = None) -> int:
    chain, daemon_pid, pair_fd, heartbeat_fd = (argv or sys.argv[1:])[:4]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C for the daemon is not for us
    guard = Guard(chain, socket.socket(fileno=int(pair_fd)), Heartbeat(int(heartbeat_fd)),
                  _parent_pidfd(int(daemon_pid)))
    watch(guard)
    return 0


if __name__ == "__main__":
    sys.exit(main())

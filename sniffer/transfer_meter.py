"""The transfer's meter (`sniffer.transfer`): calipers per resource, each charged only its own
time, and one line per interval.

A call's wall time holds the resource's own time and the time the thread, ready to go on,
waited for a CPU (the scheduler's run delay, /proc/thread-self/schedstat). For a disk that wait
is the CPU's time, not the disk's (a 1 ms write whose wake-up waited 20 ms for the core was no
21 ms write): the disk is charged the call less it. The network is charged the whole fill of a
block, since bytes go on arriving while the thread waits. The CPU resource is charged, per
block, both threads' time on a CPU plus their waits for one: the rate the transfer would have
if only the CPU held it back.

Every event is charged at least MIN_SPAN_S, so that each byte counted has its time: a disk call
whose span is nothing once its CPU waits are taken off (or a block of no CPU time the kernel
has yet counted) would otherwise add bytes to a resource's sum and none to its busy time, and
read it too fast (`linkgrad.protocol.transfer.tput_i` divides the one by the other). Spans are
timed by the monotonic clock (time.perf_counter); an interval's from_s and to_s are unix time.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import IO

from linkgrad.calipers import Calipers
from linkgrad.protocol.transfer import TransferInterval

__all__ = ["MIN_SPAN_S", "SCHEDSTAT", "CpuClock", "Meter", "ThreadClock", "write_line"]

SCHEDSTAT = "/proc/thread-self/schedstat"
MIN_SPAN_S = 1e-6  # the least an event is charged: a microsecond, above the clocks' resolution
Clock = Callable[[], float]


class CpuClock:
    """The opening thread's seconds on a CPU and seconds runnable but waiting for one, from
    /proc/thread-self/schedstat (sum_exec_runtime and run_delay, ns). `open()` gives None
    where the kernel keeps neither (no file, or sched_info off: zeros). The wait is up to date
    whenever the thread runs (it is added as the thread gets the CPU); the time on the CPU
    when the thread next leaves it (each block's I/O), so a block's lags by at most that."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls) -> CpuClock | None:
        try:
            clock = cls(os.open(SCHEDSTAT, os.O_RDONLY))
        except OSError:
            return None
        if not any(int(n) for n in os.pread(clock.fd, 256, 0).split()[:3]):
            clock.close()  # not even the times it ran (pcount): sched_info is off
            return None
        return clock

    def read(self) -> tuple[float, float]:
        """(seconds on a CPU, seconds waiting for one) since the thread started."""
        on_cpu, waiting = os.pread(self.fd, 256, 0).split()[:2]
        return int(on_cpu) / 1e9, int(waiting) / 1e9

    def close(self) -> None:
        os.close(self.fd)


class ThreadClock:
    """One thread's timing (made in the thread it times): `mark` where a resource's time
    starts, `lap` its span when it is done, `cpu_lap` the thread's CPU time since the last."""

    def __init__(self, clock: Clock = time.perf_counter) -> None:
        self.clock = clock
        self.cpu = CpuClock.open()
        self.mark()
        self.cpu_mark_s = sum(self._cpu())

    def _cpu(self) -> tuple[float, float]:
        return self.cpu.read() if self.cpu is not None else (0.0, 0.0)

    def mark(self) -> None:
        self.wall_s, self.waited_s = self.clock(), self._cpu()[1]

    def lap(self, less_cpu_waits: bool = True) -> tuple[float, float]:
        """(start, end) of what ran since the last mark or lap, its end brought forward by the
        thread's waits for a CPU in it unless `less_cpu_waits` is false; at least MIN_SPAN_S
        long."""
        wall_s, (_, waited_s) = self.clock(), self._cpu()
        end_s = wall_s - (waited_s - self.waited_s) if less_cpu_waits else wall_s
        span = (self.wall_s, max(end_s, self.wall_s + MIN_SPAN_S))
        self.wall_s, self.waited_s = wall_s, waited_s
        return span

    def cpu_lap(self) -> float:
        now = sum(self._cpu())
        spent, self.cpu_mark_s = now - self.cpu_mark_s, now
        return spent

    def close(self) -> None:
        if self.cpu is not None:
            self.cpu.close()


class Meter:
    """One side's calipers, fed from both its threads: `time` a resource's span, `block` a
    block's CPU time (and the interval's line if the interval is over), `emit` a line.
    `clock` times (monotonic), `wall` labels each interval (unix s)."""

    def __init__(self, side: str, resources: tuple[str, ...], cpu_resource: str,
                 out: IO[str], interval_s: float, clock: Clock = time.perf_counter,
                 wall: Clock = time.time) -> None:
        self.side, self.out, self.interval_s, self.clock = side, out, interval_s, clock
        self.wall = wall
        self.resources = (*resources, cpu_resource)
        self.cpu_resource = cpu_resource
        self.calipers = {r: Calipers() for r in self.resources}
        self.notes: list[str] = []
        self.lock = threading.Lock()
        probe = CpuClock.open()
        self.cpu_measured = probe is not None
        if probe is None:
            self.notes.append(f"no {SCHEDSTAT} (the kernel keeps no scheduler statistics): "
                              "the CPU is not measured, and a disk's time includes the "
                              "thread's waits for a CPU")
        else:
            probe.close()
        self.start()

    def start(self) -> None:
        """The first interval starts now (making the source, waiting for the sender: no
        resource's time)."""
        self.since = self.started = self.clock()
        self.since_wall_s = self.wall()
        self.cpu_cursor_s = 0.0  # the CPU's events, laid end to end

    def time(self, resource: str, nbytes: int, span: tuple[float, float]) -> None:
        with self.lock:
            self.calipers[resource].time(float(nbytes), *span)

    def block(self, nbytes: int, cpu_s: float) -> None:
        with self.lock:
            if self.cpu_measured:
                start = self.cpu_cursor_s
                self.cpu_cursor_s += max(cpu_s, MIN_SPAN_S)
                self.calipers[self.cpu_resource].time(float(nbytes), start, self.cpu_cursor_s)
            if self.clock() - self.since >= self.interval_s:
                self._emit("calipers", None, None)

    def emit(self, event: str = "calipers", nbytes: int | None = None,
             seconds: float | None = None) -> None:
        with self.lock:
            self._emit(event, nbytes, seconds)

    def _emit(self, event: str, nbytes: int | None, seconds: float | None) -> None:
        now, now_wall_s = self.clock(), self.wall()
        line = TransferInterval(
            event=event, side=self.side, from_s=self.since_wall_s,  # type: ignore[arg-type]
            to_s=max(now_wall_s, self.since_wall_s),
            resources={r: c.summary() for r, c in self.calipers.items()},
            notes=tuple(self.notes) or None, bytes=nbytes, seconds=seconds)
        write_line(self.out, line.model_dump_json())
        self.calipers = {r: Calipers() for r in self.resources}
        self.since, self.since_wall_s = now, now_wall_s


def write_line(out: IO[str], line: str) -> None:
    out.write(line + "\n")
    out.flush()

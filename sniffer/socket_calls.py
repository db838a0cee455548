"""Socket-call logs from the kernel: one bpftrace process on the `sock:sock_send_length` and
`sock:sock_recv_length` tracepoints (Linux 6.3+), its output read into per-socket summaries
(`sniffer.socket_call_summary`). `probe()` says whether this host can run it, and why not;
`SocketCallTracer` runs it and leaves nothing behind.

Cost, measured on a 2-CPU VM (Linux 6.18, bpftrace 0.17) at 10,000 calls/s on one loopback
connection (100-byte send + recv pairs) for 10 s: BPF run time from the programs' fdinfo with
kernel.bpf_stats_enabled=1, user CPU from /proc/PID/stat and the reader thread's thread_time.
  Summaries (this module): BPF 0.45-0.55 µs a call = 0.6 % of a core, bpftrace 0-0.1 %, the
  Python reader 0.05 %: 0.7 % of a core in all (BPF 2.0 % at 40,000 calls/s).
  A printf per call (nsecs, pid, 4-tuple, ret): BPF 6.2-6.6 µs a call (a perf buffer output and
  a wakeup per event; as much with 3 fields) = 8 %, bpftrace 5-6 %, parsing in Python 14 %:
  28 % of a core, and 1,054 events lost at 40,000 calls/s. Not built: far over a 5 % budget.
  Calls kept in a map keyed by nsecs and printed every interval instead: 5 % (bpftrace walks
  and clears the map with a syscall per entry).
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from linkgrad.errors import RuntimeFailure
from linkgrad.protocol.jsonlines import leave_signals_to_main_thread
from linkgrad.protocol.trace import TRACER_START_S
from sniffer.socket_call_summary import (
    SummaryParser,
    TraceSettings,
    build_program,
)

TRACEFS = Path("/sys/kernel/tracing")
BTF = Path("/sys/kernel/btf/vmlinux")
TRACEPOINTS = ("sock_send_length", "sock_recv_length")
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39
OFF = "socket-call logs are off"
# bpftrace 0.17 says this whenever it lacks CAP_SYS_RESOURCE; since Linux 5.11 BPF memory is
# charged to the memory cgroup and the limit no longer matters
HARMLESS = "couldn't set RLIMIT_MEMLOCK"


@dataclass(frozen=True)
class TracerConfig:
    bpftrace: str  # the executable
    settings: TraceSettings


def own_netns() -> int:
    """This process's network namespace, as the kernel numbers it (`ns.inum`)."""
    return os.stat("/proc/self/ns/net").st_ino


def _capabilities() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def probe(settings: TraceSettings | None = None) -> TracerConfig | str:
    """A config to start a tracer with, or the one-line reason this host cannot. `settings`
    default: 1 s intervals, sockets of this process's network namespace only (the tracepoints
    fire for every namespace of the kernel, and a testbed's hosts share one kernel)."""
    path = shutil.which("bpftrace")
    if path is None:
        return f"bpftrace is not installed: {OFF}"
    if os.geteuid() != 0:
        return f"not root (bpftrace 0.17 runs as root only): {OFF}"
    caps = _capabilities()
    both = (1 << CAP_PERFMON) | (1 << CAP_BPF)
    if not caps & (1 << CAP_SYS_ADMIN) and (caps & both) != both:
        return f"root without CAP_BPF and CAP_PERFMON (a restricted container?): {OFF}"
    if not BTF.exists():
        return f"the kernel has no BTF ({BTF}), needed to read sockets' addresses: {OFF}"
    try:
        missing = _missing_tracepoints()
    except RuntimeFailure as e:
        return f"{e}: {OFF}"
    if missing:
        return f"no tracepoint sock:{missing[0]} (needs Linux 6.3 or later): {OFF}"
    return TracerConfig(path, TraceSettings(netns_inode=own_netns()) if settings is None
                        else settings)


def tracefs_mounted(path: Path = TRACEFS) -> bool:
    """Whether tracefs is mounted at `path` in this mount namespace."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, fs = line.partition(" - ")
        if fields.split()[4] == str(path) and fs.split()[0] == "tracefs":
            return True
    return False


def with_tracefs(argv: list[str]) -> list[str]:
    """`argv` as a command that finds tracefs mounted (bpftrace reads the tracepoints' formats
    there). Where it is not, the command runs in a mount namespace of its own with tracefs
    mounted in it: the mount is nobody else's to see or to unmount, and it goes with the
    namespace when the command ends, however it ends. A lease shared by the processes of a
    host cannot be had: several sniffers on one kernel (a testbed's hosts) or another tool
    would unmount it under each other's bpftrace. `unshare` and `sh` exec, so the command
    keeps the process id `Popen` gives."""
    if tracefs_mounted():
        return argv
    mount = f'mount -t tracefs tracefs {TRACEFS} && exec "$0" "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount, *argv]


def _missing_tracepoints() -> list[str]:
    """The tracepoints this kernel lacks; RuntimeFailure where tracefs cannot be looked at."""
    look = " ".join(f"[ -d {TRACEFS}/events/sock/{t} ] || echo {t};" for t in TRACEPOINTS)
    try:
        done = subprocess.run(with_tracefs(["sh", "-c", look]), capture_output=True,
                              text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        said = str(getattr(e, "stderr", None) or e).strip().splitlines() or ["?"]
        raise RuntimeFailure(f"tracefs cannot be mounted: {said[-1].rstrip('.')}") from e
    return done.stdout.split()


class SocketCallTracer:
    """bpftrace running `build_program(config.settings)`; `drain()` returns the summaries
    flushed since the previous drain. Stopping (TERM: bpftrace's END flushes the last partial
    interval) makes the last summaries drainable too. Should this process die without
    stopping it, bpftrace dies at its next flush, writing to a closed pipe. Another
    `program` with its `parser` (the same `feed`, `ready`, `wall_offset_s` and losses) runs
    the same way (`sniffer.thread_changes`)."""

    def __init__(self, config: TracerConfig, stop_timeout_s: float = 5.0,
                 program: str | None = None, parser: Any = None,
                 map_keys_max: int | None = None) -> None:
        self.config, self.stop_timeout_s = config, stop_timeout_s
        self.program = program if program is not None else build_program(config.settings)
        self.map_keys_max = map_keys_max or config.settings.map_keys_max
        self.proc: subprocess.Popen[str] | None = None
        # wall_offset_s measured at start
        self.parser = parser if parser is not None else SummaryParser(wall_offset_s=0.0)
        self.summaries: list[Any] = []
        self.errors: collections.deque[str] = collections.deque(maxlen=20)
        self.lock = threading.Lock()
        self.ready = threading.Event()  # set when tracing, or when bpftrace ended
        self.threads: list[threading.Thread] = []
        self.late = False  # started with keep_late, and not tracing yet when start returned

    def start(self, timeout_s: float = TRACER_START_S, keep_late: bool = False
              ) -> SocketCallTracer:
        """Returns once the tracepoints are attached; raises RuntimeFailure with bpftrace's
        reason if they are not within `timeout_s`. `keep_late`: a bpftrace still compiling
        then is kept (`late`), and what it traces once attached is drained as any: fifty
        hosts of one machine compiling at once take longer than the timeout, and their calls
        would go untraced for the whole capture."""
        try:
            self.parser.wall_offset_s = time.time() - time.monotonic()  # nsecs is MONOTONIC
            try:
                self.proc = subprocess.Popen(
                    with_tracefs([self.config.bpftrace, "-f", "json", "-e", self.program]),
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True, bufsize=1, env={**os.environ, "BPFTRACE_MAP_KEYS_MAX": str(
                        self.map_keys_max)})
            except OSError as e:
                raise RuntimeFailure(f"bpftrace could not be run: {e}") from e
            self.threads = [threading.Thread(target=f, args=(pipe,), daemon=True)
                            for f, pipe in ((self._read_stdout, self.proc.stdout),
                                            (self._read_stderr, self.proc.stderr))]
            for t in self.threads:
                t.start()
            if not self.ready.wait(timeout_s) or not self.parser.ready:
                late = self.running()
                if late and keep_late:
                    self.late = True
                    return self
                self.stop()  # first: its readers then have all it said
                why = f"nothing after {timeout_s} s" if late else self.reason()
                raise RuntimeFailure(f"bpftrace did not start tracing: {why}")
        except BaseException:
            self.stop()
            raise
        return self

    def reason(self) -> str:
        """Why bpftrace stopped, or failed to start: its last error lines."""
        if self.proc is None or self.proc.poll() is None:
            return "not ended"
        return "; ".join(self.errors) or f"exit status {self.proc.returncode}"

    def _read_stdout(self, stdout: IO[str]) -> None:
        leave_signals_to_main_thread()
        for line in stdout:
            if found := self.parser.feed(line):
                with self.lock:
                    self.summaries += found
            if self.parser.ready:
                self.ready.set()
        self.ready.set()  # ended: start() stops waiting

    def _read_stderr(self, stderr: IO[str]) -> None:
        leave_signals_to_main_thread()
        for line in stderr:
            if line.strip() and HARMLESS not in line:
                self.errors.append(line.strip().removeprefix("ERROR: "))

    def drain(self) -> list[Any]:
        with self.lock:
            summaries, self.summaries = self.summaries, []
        return summaries

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def losses(self) -> str | None:
        """What the summaries so far miss, if anything: calls the full maps dropped (raise
        `map_keys_max`), output bpftrace could not read in time."""
        found = []
        if self.parser.dropped_calls:
            found.append(f"{self.parser.dropped_calls} calls not counted: the maps were full")
        if self.parser.lost_events:
            found.append(f"{self.parser.lost_events} bpftrace events lost")
        if self.parser.unparsed:
            found.append(f"bpftrace output not understood: {self.parser.unparsed[-1]!r}")
        return "; ".join(found) or None

    def stop(self) -> None:
        """TERM, then KILL after `stop_timeout_s`; the readers joined (a tracefs mounted for
        it goes with its mount namespace). Idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(self.stop_timeout_s)
        for t in self.threads:
            t.join(timeout=self.stop_timeout_s)
        for pipe in (self.proc.stdout, self.proc.stderr) if self.proc else ():
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> SocketCallTracer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

"""The sniffer's `profile` command: a thread running the SNAP poller, a `snap` event every
report interval, a last one on `unprofile` (or when the daemon stops)."""

from __future__ import annotations

import threading
import time

from linkgrad.errors import RuntimeFailure
from linkgrad.protocol.jsonlines import LineWriter, leave_signals_to_main_thread
from linkgrad.protocol.snap import Profile, Profiling
from linkgrad.protocol.trace import TRACER_START_S
from linkgrad.snap.classify import SnapThresholds
from sniffer.kernel import ClosedSockets
from sniffer.poll_budget import BudgetSettings
from sniffer.snap_poller import SnapPoller
from sniffer.socket_calls import SocketCallTracer, probe


def settings_of(request: Profile) -> tuple[BudgetSettings, SnapThresholds]:
    """The request's parameters as the poller's settings (ValueError names a bad one)."""
    budget = BudgetSettings(
        cpu_lower_pct=request.cpu_lower_pct, cpu_upper_pct=request.cpu_upper_pct,
        table_interval_s=request.table_interval_s,
        table_interval_max_s=request.table_interval_max_s,
        fast_interval_min_s=request.fast_interval_min_s, history_s=request.history_s)
    thresholds = SnapThresholds(max_queuing_delay_s=request.max_queuing_delay_s,
                                delayed_ack_timeout_s=request.delayed_ack_timeout_s)
    return budget, thresholds


class Profiler:
    """One profiling at a time; `start` replaces a running one (after its last report)."""

    def __init__(self, out: LineWriter, ephemeral: tuple[int, int] | None = None,
                 closing: ClosedSockets | None = None, tracing: bool = True) -> None:
        self.out, self.ephemeral, self.closing = out, ephemeral, closing
        self.tracing = tracing  # False: this sniffer never traces (an in-process fake host)
        self.poller: SnapPoller | None = None
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.report_interval_s = 5.0
        self.sums_every = 1  # reports between two with the connections' sums
        self.reports = 0
        self.missing: tuple[str, ...] = ()
        self.tracer: SocketCallTracer | None = None
        self.losses_told = 0  # the closing notices' losses already reported

    def start(self, request: Profile) -> Profiling:
        budget, thresholds = settings_of(request)  # a bad request leaves a running one be
        self.stop()
        if self.closing is not None:
            self.closing.keep_tables(True)
        self.poller = SnapPoller(
            budget, thresholds, seed=request.seed,
            closed=self.closing.drain_tables if self.closing is not None else list,
            **({"ephemeral": self.ephemeral} if self.ephemeral else {}))
        self.report_interval_s = request.report_interval_s
        self.sums_every = max(1, round(request.sums_interval_s / request.report_interval_s))
        self.reports = 0
        self.losses_told = self.closing.losses() if self.closing is not None else 0
        self.poller.step()  # the first table read: the baseline, and what the kernel gives
        self.missing = tuple(self.poller.missing())
        if request.socket_calls and self.tracing:
            self._trace()
        self.poller.restart_budget()
        self.stopping.clear()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self.profiling()

    def _trace(self) -> None:
        """Socket-call logs where the host can (SNAP §2.1); else why not, and on without."""
        config = probe()
        if isinstance(config, str):
            self.missing += (config,)
            return
        tracer = SocketCallTracer(config)
        try:
            tracer.start(keep_late=True)  # late on a busy machine: its calls count once in
        except RuntimeFailure as e:
            tracer.stop()
            self.missing += (f"{e}: socket-call logs are off",)
            return
        if tracer.late:
            self.missing += (f"socket-call logs late: bpftrace had not attached after "
                             f"{TRACER_START_S:g} s (a busy machine); calls before it did "
                             "are not counted",)
        self.tracer = tracer
        assert self.poller is not None
        self.poller.calls = tracer.drain

    def profiling(self) -> Profiling:
        interval = self.poller.budget.table_interval_s if self.poller else 0.0
        return Profiling(table_interval_s=interval, socket_calls=self.tracer is not None,
                         missing=self.missing, ephemeral_range=self.ephemeral)

    def stop(self) -> Profiling:
        """Stop polling; a last report covers the time since the previous one."""
        result = self.profiling()
        if self.thread is not None:
            self.stopping.set()
            self.thread.join(timeout=10)
            self.thread = None
        if self.tracer is not None:
            self.tracer.stop()  # its last partial interval flushed first
            if self.poller is not None:
                self.poller.step_calls()
            self.tracer = None
        if self.poller is not None:
            try:
                self.poller.read_table()  # every socket's last interval, up to now
            except OSError as e:
                self.out.write({"event": "snap_error", "message": f"last SNAP poll: {e}"})
            self._report(last=True)
            self.poller.close()
            self.poller = None
        if self.closing is not None:
            self.closing.keep_tables(False)
        return result

    def _run(self) -> None:
        leave_signals_to_main_thread()
        assert self.poller is not None
        report_at = time.monotonic() + self.report_interval_s
        try:
            while not self.stopping.is_set():
                next_s = self.poller.step()
                if time.monotonic() >= report_at:
                    self._report()
                    report_at += self.report_interval_s
                wait = min(next_s - self.poller.clock(), report_at - time.monotonic())
                self.stopping.wait(max(0.0, wait))
        except Exception as e:  # never silently: say so, and stop profiling
            self.out.write({"event": "snap_error",
                            "message": f"SNAP polling stopped: {type(e).__name__}: {e}"})

    def _report(self, last: bool = False) -> None:
        assert self.poller is not None
        self.reports += 1
        with_sums = last or self.reports % self.sums_every == 0
        event = self.poller.report(with_sums)
        if self.tracer is not None and (lost := self.tracer.losses()):
            event = event.model_copy(update={"socket_calls_lost": lost})
        if self.closing is not None and (losses := self.closing.losses()) > self.losses_told:
            event = event.model_copy(update={"notice_losses": losses - self.losses_told})
            self.losses_told = losses
        self.out.write(event)

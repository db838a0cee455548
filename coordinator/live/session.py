"""The SSH side of a run: a connection per host, a sniffer on each, an injector where delay is
needed, the followed web log and the workload. `close()` ends every lease."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.config.experiment import Experiment
from coordinator.live.logfollow import LogFollower
from coordinator.live.ssh import Connection, RemoteDaemon, endpoint_for

QUEUE_BASE = 4700


@dataclass
class Session:
    """Every SSH connection and daemon of a run; `close()` ends every lease."""

    experiment: Experiment
    connections: dict[str, Connection] = field(default_factory=dict)
    sniffers: dict[str, RemoteDaemon] = field(default_factory=dict)
    injectors: dict[str, RemoteDaemon] = field(default_factory=dict)
    reports: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)  # address -> host
    log: LogFollower | None = None
    workload: Any = None
    warnings: list[str] = field(default_factory=list)  # what a daemon could not do

    def open(self, sniffers: bool = True) -> Session:
        """Connect to every host; start the sniffers (unless not wanted), follow the web log
        and start the workload."""
        e = self.experiment
        assert e.ssh is not None
        assert e.web_log is not None
        for host in e.hosts:
            conn = Connection(endpoint_for(host, e.ssh), e.ssh.connect_timeout_s)
            self.connections[host.name] = conn
            self.addresses[host.address or conn.endpoint.hostname] = host.name
        for name, conn in self.connections.items() if sniffers else ():
            self.sniffers[name] = RemoteDaemon(
                conn, [e.ssh.python, "-m", "sniffer"], "sniffer",
                on_event=lambda m, n=name: self.reports.append((n, m)))
        self.warnings = [f"{d.what}: {d.ready['warning']}" for d in self.sniffers.values()
                         if "warning" in d.ready]
        self.log = LogFollower(self.connections[e.web_log.host], e.web_log.path,
                               e.web_log.format, e.web_log.log_format, e.ssh.python)
        if e.workload is not None:  # leased: it ends with the channel, as the daemons do
            self.workload = self.connections[e.workload.host].open_lines(
                [e.ssh.python, "-m", "injector.leased", "--", *self._workload_argv()])
        return self

    def _workload_argv(self) -> list[str]:
        w, e = self.experiment.workload, self.experiment
        assert w is not None
        assert e.ssh is not None
        if w.argv is not None:
            return list(w.argv)
        mix = w.mix or ",".join(f"{_example_path(p)}=1" for p in e.transactions.values())
        return [e.ssh.python, "-m", "testbed.loadgen", "--url", e.frontend_url or "",
                "--mix", mix, "--rate", str(w.rate_per_s), "--duration", "86400",
                "--timeout-s", str(w.timeout_s), "--json"]

    def injector(self, host: str) -> RemoteDaemon:
        if host not in self.injectors:
            e = self.experiment
            assert e.ssh is not None
            argv = [e.ssh.python, "-m", "injector", "--queue", str(QUEUE_BASE),
                    "--max-magnitude-ms", str(e.parameters.max_delay_ms),
                    "--max-duration-s", str(e.parameters.max_duration_s)]
            self.injectors[host] = RemoteDaemon(self.connections[host], argv, "injector")
        return self.injectors[host]

    def link_injector(self, src_host: str, dst_host: str) -> RemoteDaemon:
        """The daemon that delays src->dst, as `inject_at` says: the receiver's holds a packet
        at no cost to the sending socket, as a network's delay would (the default); the sender's
        keeps it charged there."""
        at = self.experiment.parameters.inject_at
        return self.injector(dst_host if at == "receiver" else src_host)

    def close(self) -> list[str]:
        """Injectors first (the lease: they stop and remove their rules), then the rest.

        One host's failure must not keep the others injecting, so every close is tried and
        every failure returned, for run.json and the exit code.
        """
        problems = []
        closers = [*self.injectors.values(), *self.sniffers.values(), self.log, self.workload,
                   *self.connections.values()]
        for closer in closers:
            if closer is None:
                continue
            try:
                closer.close()
            except Exception as e:  # reported; the next host must still close
                problems.append(f"{getattr(closer, 'what', type(closer).__name__)}: {e}")
        return problems


def _example_path(pattern: str) -> str:
    """A URL a transaction regex matches, for the testbed's load generator (`^/a/b` -> /a/b)."""
    return pattern.lstrip("^").rstrip("$").replace("\\?", "?").replace("\\", "")


def sigterm_as_interrupt(signum: int, _frame: object) -> None:
    """A SIGTERM handler that ends a command like Ctrl-C, so every lease is closed."""
    raise KeyboardInterrupt


def sleep_checking(seconds: float, check: Callable[[], None] | None = None,
                   step: float = 1.0) -> None:
    """Sleep, calling `check` every `step` s (it raises to stop: a limit crossed)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(step, left))
        if check is not None:
            check()

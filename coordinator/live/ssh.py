"""SSH to the hosts (paramiko): verified host keys, daemons spoken to in JSON lines over the
channel's stdio, and a followed remote file. The channel is the lease: closing it (or losing it)
closes the daemon's stdin, and the daemon stops every injection.

Commands are built with shlex.join from argument lists, never by pasting strings into a shell.
"""

from __future__ import annotations

import itertools
import json
import queue
import shlex
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from common.errors import RuntimeFailure


@dataclass(frozen=True)
class Endpoint:
    name: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    known_hosts: Path


def endpoint_for(host: Any, ssh: Any) -> Endpoint:
    """An experiment host's endpoint: its ssh_config entry (if there is a config), overridden
    by the address, port, user and key the experiment gives."""
    if ssh.config is not None:
        base = resolve(host.name, ssh.config, ssh.known_hosts)
    else:
        base = Endpoint(host.name, host.address, 22, "root", (), ssh.known_hosts)
    return Endpoint(host.name, host.address or base.hostname, host.port or base.port,
                    host.user or base.user,
                    (str(host.key),) if host.key else base.identity_files, base.known_hosts)


def resolve(name: str, ssh_config: Path, known_hosts: Path | None = None) -> Endpoint:
    """Where `name` is, by the ssh_config's Host entry (HostName, Port, User, IdentityFile)."""
    config = paramiko.SSHConfig.from_path(str(ssh_config)).lookup(name)
    known = known_hosts or Path(str(config.get("userknownhostsfile", "~/.ssh/known_hosts"))
                                .split()[0]).expanduser()
    return Endpoint(name, config.get("hostname", name), int(config.get("port", 22)),
                    config.get("user", "root"), tuple(config.get("identityfile", [])),
                    Path(known))


class Connection:
    """One verified SSH connection to a host."""

    def __init__(self, endpoint: Endpoint, timeout_s: float = 10.0) -> None:
        self.endpoint = endpoint
        self.client = paramiko.SSHClient()
        try:
            self.client.load_host_keys(str(endpoint.known_hosts))
        except OSError as e:
            raise RuntimeFailure(f"cannot read known_hosts {endpoint.known_hosts}: {e}") from e
        self.client.set_missing_host_key_policy(paramiko.RejectPolicy())  # never auto-add
        try:
            self.client.connect(endpoint.hostname, endpoint.port, endpoint.user,
                                key_filename=list(endpoint.identity_files) or None,
                                timeout=timeout_s, banner_timeout=timeout_s,
                                auth_timeout=timeout_s, look_for_keys=False, allow_agent=False)
        except paramiko.SSHException as e:
            raise RuntimeFailure(f"ssh {endpoint.name} ({endpoint.hostname}): {e}") from e
        except OSError as e:
            raise RuntimeFailure(f"ssh {endpoint.name} ({endpoint.hostname}): {e}") from e

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> str:
        """Run a command to completion; its stdout, or RuntimeFailure with its stderr."""
        _, stdout, stderr = self.client.exec_command(shlex.join(argv), timeout=timeout_s)
        out = stdout.read().decode()
        status = stdout.channel.recv_exit_status()
        if status != 0:
            raise RuntimeFailure(f"{self.endpoint.name}: {shlex.join(argv)} exited {status}: "
                                 f"{stderr.read().decode().strip()}")
        return out

    def open_lines(self, argv: Sequence[str]) -> paramiko.Channel:
        transport = self.client.get_transport()
        if transport is None:
            raise RuntimeFailure(f"ssh {self.endpoint.name}: connection lost")
        channel = transport.open_session()
        channel.exec_command(shlex.join(argv))
        return channel

    def close(self) -> None:
        self.client.close()


class LineReader:
    """Reads a channel's stdout line by line in a thread, handing each line to `sink`."""

    def __init__(self, channel: paramiko.Channel, sink: Callable[[str], None]) -> None:
        self.channel = channel
        self.sink = sink
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with self.channel.makefile("r") as lines:
            for line in lines:
                self.sink(line.rstrip("\n"))


class RemoteDaemon:
    """A JSON-lines daemon (injector, sniffer) over one SSH channel."""

    def __init__(self, connection: Connection, argv: Sequence[str], what: str,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 ready_timeout_s: float = 30.0) -> None:
        self.what = f"{what} on {connection.endpoint.name}"
        self.channel = connection.open_lines(argv)
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.on_event = on_event
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.reader = LineReader(self.channel, self._take)
        self.ready = self._reply(ready_timeout_s)
        if self.ready.get("event") != "ready":
            raise RuntimeFailure(f"{self.what} did not start: {self.ready}")

    def _take(self, line: str) -> None:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            return
        if "event" in message and message["event"] not in ("ready", "error", "stopped") \
                and self.on_event is not None:
            self.on_event(message)
        else:
            self.replies.put(message)

    def _reply(self, timeout_s: float) -> dict[str, Any]:
        try:
            return self.replies.get(timeout=timeout_s)
        except queue.Empty as e:
            status = self.channel.exit_status if self.channel.exit_status_ready() else None
            raise RuntimeFailure(f"{self.what}: no answer in {timeout_s:g} s "
                                 f"(exit status {status})") from e

    def request(self, cmd: str, timeout_s: float = 30.0, **fields: Any) -> dict[str, Any]:
        with self._lock:
            request_id = next(self._ids)
            self.channel.sendall((json.dumps({"id": request_id, "cmd": cmd, **fields}) + "\n")
                                 .encode())
            reply = self._reply(timeout_s)
        if reply.get("id") != request_id:
            raise RuntimeFailure(f"{self.what}: unexpected answer {reply}")
        if not reply.get("ok"):
            raise RuntimeFailure(f"{self.what}: {cmd} failed: {reply.get('error')}")
        return reply["result"]

    def close(self, timeout_s: float = 15.0) -> None:
        """End the lease: EOF on the daemon's stdin; it stops and removes what it did.

        RuntimeFailure if it did not confirm that (no "stopped" event, or a non-zero exit):
        its rules may still be on the host until its reaper runs, and the user must know.
        """
        if self.channel.closed:
            return
        self.channel.shutdown_write()
        self.reader.thread.join(timeout=timeout_s)
        finished = not self.reader.thread.is_alive() and self.channel.status_event.wait(timeout_s)
        status = self.channel.exit_status if finished else None
        self.channel.close()
        stopped = False
        while not self.replies.empty():
            stopped = stopped or self.replies.get_nowait().get("event") == "stopped"
        if not (stopped and status == 0):
            state = "still running" if status is None else f"exit status {status}"
            raise RuntimeFailure(f"{self.what} did not confirm it stopped ({state}): check the "
                                 "host for rules left behind (iptables -S)")

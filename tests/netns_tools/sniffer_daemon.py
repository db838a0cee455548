"""`python -m sniffer` in a namespace, spoken to over its stdin and stdout as the coordinator
does; its stdout read by a thread, so a silent daemon fails the test after a timeout instead of
hanging it."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from testbed.pairs.hosts import Hosts


class SnifferDaemon:
    def __init__(self, hosts: Hosts, host: str = "a") -> None:
        self.proc = hosts.popen(host, sys.executable, "-m", "sniffer", stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()
        assert self.next()["event"] == "ready"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout_s: float = 15.0) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout_s)
        assert line is not None, f"the sniffer ended ({self.proc.wait(timeout=15)})"
        return json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} sent: {line}"))

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send `request`; events until its reply are kept in `events`."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        while "event" in (message := self.next()):
            self.events.append(message)
        assert message["id"] == request["id"], message
        return message

    def events_until(self, condition: Callable[[list[dict[str, Any]]], bool],
                     timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition(self.events):
            left = deadline - time.monotonic()
            assert left > 0, f"not seen in {timeout_s} s of events: {self.events}"
            message = self.next(left)
            assert "event" in message, message
            self.events.append(message)

    def end(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        while (message := self.next())["event"] != "stopped":
            self.events.append(message)
        assert self.proc.wait(timeout=15) == 0

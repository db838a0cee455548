"""`python -m sniffer`: reports the links that carried traffic, over JSON lines on stdio.

Requests: `{"id": 1, "cmd": "health" | "poll" | "watch" | "unwatch" | "stop", ...}`.
`poll` answers with every link that carried at least `threshold` messages since the previous
poll; `watch` with `interval_s` emits such a report as an event (`{"event": "report", ...}`)
every interval until `unwatch`. Closing stdin (the SSH channel) ends the daemon.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

from sniffer.kernel import dump_sockets, ephemeral_range, socket_owners
from sniffer.links import Process, SocketRecord, active, link_counts


class Sniffer:
    """Snapshots sockets and turns the difference into link message counts."""

    def __init__(self, dump: Callable[[], list[SocketRecord]] = dump_sockets,
                 owners: Callable[[], dict[int, Process]] = socket_owners,
                 ephemeral: tuple[int, int] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.dump, self.owners, self.clock = dump, owners, clock
        self.ephemeral = ephemeral or ephemeral_range()
        self.previous = {s.key: s for s in self.dump()}
        self.since = self.clock()
        self.lock = threading.Lock()

    def poll(self, threshold: int = 1) -> dict[str, Any]:
        with self.lock:
            current = self.dump()
            counts = link_counts(self.previous, current, self.owners(), self.ephemeral)
            now = self.clock()
            report = {"from": self.since, "to": now,
                      "links": [{**link.as_json(), "messages": n}
                                for link, n in active(counts, threshold).items()]}
            self.previous = {s.key: s for s in current}
            self.since = now
            return report


class Service:
    def __init__(self, sniffer: Sniffer, out: IO[str]) -> None:
        self.sniffer = sniffer
        self.out = out
        self.out_lock = threading.Lock()
        self.watching = threading.Event()
        self.watcher: threading.Thread | None = None

    def emit(self, message: dict[str, Any]) -> None:
        with self.out_lock:
            self.out.write(json.dumps(message) + "\n")
            self.out.flush()

    def handle(self, request: dict[str, Any]) -> dict[str, Any] | None:
        cmd = request.get("cmd")
        threshold = int(request.get("threshold", 1))
        if cmd == "health":
            return {"pid": os.getpid(), "ephemeral_range": list(self.sniffer.ephemeral),
                    "watching": self.watching.is_set()}
        if cmd == "poll":
            return self.sniffer.poll(threshold)
        if cmd == "watch":
            interval = float(request.get("interval_s", 1.0))
            if not 0.05 <= interval <= 3600:
                raise ValueError("interval_s must be within [0.05, 3600]")
            self.unwatch()
            self.watching.set()
            self.watcher = threading.Thread(target=self._watch, args=(interval, threshold),
                                            daemon=True)
            self.watcher.start()
            return {"interval_s": interval}
        if cmd == "unwatch":
            self.unwatch()
            return {}
        if cmd == "stop":
            return None
        raise ValueError(f"unknown command {cmd!r}")

    def unwatch(self) -> None:
        self.watching.clear()
        if self.watcher is not None:
            self.watcher.join(timeout=10)
            self.watcher = None

    def _watch(self, interval: float, threshold: int) -> None:
        next_at = time.monotonic() + interval
        while self.watching.is_set():
            time.sleep(max(0.0, next_at - time.monotonic()))
            if not self.watching.is_set():
                return
            self.emit({"event": "report", **self.sniffer.poll(threshold)})
            next_at += interval


def serve(service: Service, stdin: IO[str]) -> str:
    """Answer requests until stop or end of input; returns why it stopped."""
    for line in stdin:
        if not line.strip():
            continue
        request_id = None
        try:
            request = json.loads(line)
            request_id = request.get("id") if isinstance(request, dict) else None
            if not isinstance(request, dict):
                raise ValueError("a request is one JSON object")
            result = service.handle(request)
        except (ValueError, TypeError) as e:
            service.emit({"id": request_id, "ok": False,
                          "error": {"kind": "input", "message": str(e)}})
            continue
        if result is None:
            service.emit({"id": request_id, "ok": True, "result": {}})
            return "stop"
        service.emit({"id": request_id, "ok": True, "result": result})
    return "stdin closed"


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    service = Service(Sniffer(), sys.stdout)
    service.emit({"event": "ready", "pid": os.getpid()})
    try:
        reason = serve(service, sys.stdin)
    except KeyboardInterrupt:
        reason = "signal"
    service.unwatch()
    service.emit({"event": "stopped", "reason": reason})
    return 0

"""`python -m sniffer`: reports the links that carried traffic, over JSON lines on stdio.

Requests: `{"id": 1, "cmd": "health" | "poll" | "watch" | "unwatch" | "stop", ...}`.
`poll` answers with every link that carried at least `threshold` messages since the previous
poll; `watch` with `interval_s` emits such a report as an event (`{"event": "report", ...}`)
every interval until `unwatch`, which first emits a last report up to that moment. Closing
stdin (the SSH channel) ends the daemon.
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

from sniffer.kernel import ClosedSockets, dump_sockets, ephemeral_range, socket_owners
from sniffer.links import Process, SocketRecord, active, link_counts, match_closed

KEEP_VANISHED_POLLS = 2  # a socket gone from the dump waits this long for its closing notice


class Sniffer:
    """Snapshots sockets and turns the difference into link message counts.

    `closed` drains the sockets the kernel freed since the last call, with their final
    counters: a socket that closed between two polls is counted to its last segment.
    """

    def __init__(self, dump: Callable[[], list[SocketRecord]] = dump_sockets,
                 owners: Callable[[], dict[int, Process]] = socket_owners,
                 ephemeral: tuple[int, int] | None = None,
                 clock: Callable[[], float] = time.time,
                 closed: Callable[[], list[SocketRecord]] = list) -> None:
        self.dump, self.owners, self.clock, self.closed = dump, owners, clock, closed
        self.ephemeral = ephemeral or ephemeral_range()
        self.closed()  # what closed before the first snapshot is not ours to count
        self.previous = {s.key: s for s in self.dump()}
        self.vanished: dict[tuple[object, ...], int] = {}  # key -> polls since last seen
        self.known_owners = self.owners()
        self.since = self.clock()
        self.lock = threading.Lock()

    def poll(self, threshold: int = 1) -> dict[str, Any]:
        with self.lock:
            ended = match_closed(self.closed(), self.previous)  # drained before the dump: a
            current = self.dump()  # socket closing in between is in the next drain
            owners = self.owners()
            counts = link_counts(self.previous, [*current, *ended],
                                 {**self.known_owners, **owners}, self.ephemeral)
            now = self.clock()
            report = {"from": self.since, "to": now,
                      "links": [{**link.as_json(), "messages": n}
                                for link, n in active(counts, threshold).items()]}
            self._carry(current, ended)
            self.known_owners = owners
            self.since = now
            return report

    def _carry(self, current: list[SocketRecord], ended: list[SocketRecord]) -> None:
        """The next baseline: this dump, plus sockets missing from it whose closing notice may
        still come (so it then counts only what they sent since they were last seen)."""
        seen = {s.key: s for s in current}
        gone = {s.key for s in ended}
        kept = {}
        for key, s in self.previous.items():
            if key in seen or key in gone:
                continue
            age = self.vanished.get(key, 0) + 1
            if age <= KEEP_VANISHED_POLLS:
                kept[key] = s
                self.vanished[key] = age
        self.vanished = {k: a for k, a in self.vanished.items() if k in kept}
        self.previous = {**kept, **seen}


class Service:
    def __init__(self, sniffer: Sniffer, out: IO[str]) -> None:
        self.sniffer = sniffer
        self.out = out
        self.out_lock = threading.Lock()
        self.watching = threading.Event()
        self.watcher: threading.Thread | None = None
        self.threshold = 1

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
            self.threshold = threshold
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
        """Stop watching; a last report covers the time since the previous one."""
        self.watching.clear()
        if self.watcher is not None:
            self.watcher.join(timeout=10)
            self.watcher = None
            self.emit({"event": "report", **self.sniffer.poll(self.threshold)})

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
    try:
        closing: ClosedSockets | None = ClosedSockets()
        missing = None
    except OSError as e:  # no CAP_NET_ADMIN, or a kernel without sock_diag broadcasts
        closing, missing = None, f"closed sockets not reported ({e}): a connection's last " \
            "interval is not counted"
    service = Service(Sniffer(closed=closing.drain if closing else list), sys.stdout)
    service.emit({"event": "ready", "pid": os.getpid(), "closed_sockets": closing is not None,
                  **({"warning": missing} if missing else {})})
    try:
        reason = serve(service, sys.stdin)
    except KeyboardInterrupt:
        reason = "signal"
    finally:
        service.unwatch()
        if closing is not None:
            closing.close()
    service.emit({"event": "stopped", "reason": reason})
    return 0

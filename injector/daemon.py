"""`python -m injector`: the delay daemon, driven by JSON lines on stdin, answering on stdout.

Requests: `{"id": 1, "cmd": "health"|"add"|"schedule"|"remove"|"stats"|"stop", ...}`; every
answer carries the request's id and `ok`, with `result` or `error` ({"kind": "input" or
"runtime", "message"}). The channel is the lease: when stdin closes (coordinator gone, SSH
cut), every injection stops and every rule is removed. So do SIGTERM and SIGINT. A reaper
process removes the rules if the daemon is killed outright.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from common.errors import InputError, LinkgradError, Problem
from injector.engine import Engine
from injector.link import Endpoint, Link, parse_endpoint
from injector.schedule import Caps, schedule_from_json


class _Stop(Exception):
    """Leave the request loop (stop command or signal)."""


def link_from_json(data: Any) -> Link:
    if not isinstance(data, dict):
        raise InputError(Problem("expected an object with proto, src, dst", field="link"))
    unknown = set(data) - {"proto", "src", "dst"}
    if unknown:
        raise InputError(Problem(f"unknown field(s) {sorted(unknown)}", field="link"))
    return Link(data.get("proto", "tcp"), _endpoint(data, "src"), _endpoint(data, "dst"))


def _endpoint(data: dict[str, Any], key: str) -> Endpoint:
    text = data.get(key)
    return parse_endpoint(text, f"link.{key}") if text else Endpoint()


class Daemon:
    """Maps requests to the engine; no I/O of its own beyond the answers it returns."""

    def __init__(self, engine: Engine, caps: Caps, clock: Callable[[], float] = time.time):
        self.engine = engine
        self.caps = caps
        self.clock = clock

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request.get("cmd")
        handler = getattr(self, f"cmd_{cmd}", None) if isinstance(cmd, str) else None
        if handler is None:
            raise InputError(Problem(f"unknown command {cmd!r}", field="cmd"))
        return handler(request)

    def cmd_health(self, _: dict[str, Any]) -> dict[str, Any]:
        stats = self.engine.stats()
        return {"pid": os.getpid(), "backend": "nfqueue", "chain": self.engine.firewall.chain,
                "links": len(stats), "held": sum(s["held"] for s in stats.values()),
                "callback_errors": self.engine.callback_errors,
                "realtime": self.engine.realtime,
                "stale_removed": self.engine.stale_removed,
                "caps": {"max_magnitude_ms": self.caps.max_magnitude_ms,
                         "max_duration_s": self.caps.max_duration_s}}

    def cmd_add(self, request: dict[str, Any]) -> dict[str, Any]:
        link = link_from_json(request.get("link"))
        schedule = schedule_from_json(request.get("schedule"), self.clock(), self.caps)
        link_id = self.engine.add_link(link, schedule)
        return {"link_id": link_id, "link": str(link), "schedule_id": 0}

    def cmd_schedule(self, request: dict[str, Any]) -> dict[str, Any]:
        schedule = schedule_from_json(request.get("schedule"), self.clock(), self.caps)
        return {"schedule_id": self.engine.set_schedule(_link_id(request), schedule)}

    def cmd_remove(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"stats": self.engine.remove_link(_link_id(request))}

    def cmd_stats(self, request: dict[str, Any]) -> dict[str, Any]:
        stats = self.engine.stats()
        if "link_id" in request:
            link_id = _link_id(request)
            return {"links": {str(link_id): stats[link_id]}} if link_id in stats else {}
        return {"links": {str(k): v for k, v in stats.items()}}

    def cmd_stop(self, _: dict[str, Any]) -> dict[str, Any]:
        raise _Stop


def _link_id(request: dict[str, Any]) -> int:
    link_id = request.get("link_id")
    if not isinstance(link_id, int):
        raise InputError(Problem("expected an integer", field="link_id"))
    return link_id


def answer(daemon: Daemon, line: str) -> tuple[dict[str, Any], bool]:
    """(reply, stop?) for one request line; errors become replies, never crashes."""
    request_id = None
    try:
        request = json.loads(line)
        if not isinstance(request, dict):
            raise InputError(Problem("a request is one JSON object"))
        request_id = request.get("id")
        return {"id": request_id, "ok": True, "result": daemon.handle(request)}, False
    except _Stop:
        return {"id": request_id, "ok": True, "result": {"stats": daemon.engine.stats()}}, True
    except json.JSONDecodeError as e:
        error = {"kind": "input", "message": f"not JSON: {e.msg}"}
    except LinkgradError as e:
        error = {"kind": "input" if isinstance(e, InputError) else "runtime", "message": str(e)}
    return {"id": request_id, "ok": False, "error": error}, False


def _emit(out: IO[str], message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def _on_signal(signum: int, _frame: object) -> None:
    raise _Stop


def start_reaper(chain: str) -> tuple[subprocess.Popen[bytes], int]:
    read_end, write_end = os.pipe()
    reaper = subprocess.Popen([sys.executable, "-m", "injector.reaper", chain], stdin=read_end,
                              stdout=subprocess.DEVNULL, start_new_session=True)
    os.close(read_end)
    return reaper, write_end


def serve(engine: Engine, caps: Caps, stdin: IO[str], stdout: IO[str]) -> int:
    daemon = Daemon(engine, caps)
    reason = "stdin closed"
    reaper, lease = start_reaper(engine.firewall.chain)
    try:
        engine.start()
        _emit(stdout, {"event": "ready", "pid": os.getpid(), "chain": engine.firewall.chain,
                       "stale_removed": engine.stale_removed})
        for line in stdin:
            if not line.strip():
                continue
            reply, stop = answer(daemon, line)
            _emit(stdout, reply)
            if stop:
                reason = "stop"
                break
    except _Stop:
        reason = "signal"
    finally:
        _close(engine, reaper, lease)
    _emit(stdout, {"event": "stopped", "reason": reason})
    return 0


def _close(engine: Engine, reaper: subprocess.Popen[bytes], lease: int) -> None:
    """Stop the engine; tell the reaper all is clean only if it is (else it cleans up)."""
    clean = False
    try:
        engine.close()
        clean = True
    finally:
        os.write(lease, b"clean" if clean else b"")
        os.close(lease)
        reaper.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m injector", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queue", type=int, default=4200,
                        help="base NFQUEUE number; link i uses base + i (default 4200)")
    parser.add_argument("--max-magnitude-ms", type=float, default=Caps.max_magnitude_ms)
    parser.add_argument("--max-duration-s", type=float, default=Caps.max_duration_s)
    parser.add_argument("--realtime", action="store_true",
                        help="run the engine's threads under SCHED_FIFO: accurate on a loaded "
                             "host, about 3x the CPU per packet")
    parser.add_argument("--max-queue-len", type=int, default=4096,
                        help="packets the kernel queues per link before failing open")
    args = parser.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    caps = Caps(args.max_magnitude_ms, args.max_duration_s)
    try:
        engine = Engine(queue_base=args.queue, max_queue_len=args.max_queue_len,
                        realtime=args.realtime)
        return serve(engine, caps, sys.stdin, sys.stdout)
    except LinkgradError as e:
        _emit(sys.stdout, {"event": "error", "message": str(e)})
        print(f"injector: {e}", file=sys.stderr)
        return e.exit_code

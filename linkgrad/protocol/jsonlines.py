"""The one JSON-lines server and client of the daemons (protocol: `linkgrad.protocol`).

The server side reads requests from a text stream, validates each against the daemon's request
union, hands it to the daemon's handler and writes the reply; errors become replies, never a
crash. The client side sends typed requests over a `Channel` (an SSH channel, a child's pipes,
or an in-process fake), matches each reply to its request, hands events to a callback, and on
`close` ends the lease (EOF on the daemon's stdin) and checks that the daemon said it stopped.
"""

from __future__ import annotations

import itertools
import json
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from linkgrad.errors import InputError, LinkgradError, RuntimeFailure
from linkgrad.protocol.base import (
    LIFECYCLE,
    ErrorInfo,
    Reply,
    Request,
    Result,
    parse_request,
    validation_problems,
)
from linkgrad.protocol.fields import valid_id

__all__ = [
    "MAX_LINE_BYTES",
    "STOP_SIGNALS",
    "BadLine",
    "Channel",
    "DaemonClient",
    "DidNotStart",
    "Handler",
    "LineWriter",
    "StopServing",
    "answer",
    "leave_signals_to_main_thread",
    "request_lines",
    "serve",
]

# ---------------------------------------------------------------------------------- server


class StopServing(Exception):
    """Raised by a handler (the stop command) or a signal handler: leave the request loop.
    `result` is the stop command's answer."""

    def __init__(self, result: Result | None = None) -> None:
        super().__init__("stop")
        self.result = result


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def leave_signals_to_main_thread() -> None:
    """Block the stop signals in the calling (worker) thread. A signal sent to the process
    goes to any thread that does not block it, and Python runs its handler in the main thread
    only when that thread next runs Python code: taken by a worker while the main thread waits
    for a request, a SIGTERM would wait for the next line (a stopped daemon continued gets its
    pending signal in whichever thread wakes first)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


class LineWriter:
    """Writes messages to a stream, one JSON line each, from any thread. Strict JSON: a NaN or
    infinity is a ValueError here, never a line other tools cannot read."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.lock = threading.Lock()

    def write(self, message: BaseModel | dict[str, Any]) -> None:  # free-form: tests' bad lines
        data = message.model_dump(mode="json", by_alias=True) \
            if isinstance(message, BaseModel) else message
        line = json.dumps(data, allow_nan=False) + "\n"
        with self.lock:
            self.out.write(line)
            self.out.flush()


Handler = Callable[[Request[Any]], Result]

MAX_LINE_BYTES = 1 << 20  # a request is a few hundred bytes: a megabyte line is a mistake


class BadLine(NamedTuple):
    """A line that cannot be a request at all (too long, not UTF-8): why."""

    message: str


def request_lines(stream: IO[bytes] | IO[str], max_bytes: int = MAX_LINE_BYTES
                  ) -> Iterator[str | BadLine]:
    """The lines of `stream`, decoded, in memory bounded by `max_bytes` (characters for a text
    stream): an over-long line is read on in pieces and thrown away, and it and a line that
    is not UTF-8 come as a BadLine, so one bad line costs one error reply."""
    while True:
        try:
            raw: bytes | str = stream.readline(max_bytes + 1)
        except UnicodeDecodeError as e:  # a text stream cannot resynchronise: its end
            yield BadLine(f"not UTF-8 ({e.reason}): the input ends here")
            return
        if not raw:
            return
        if len(raw) > max_bytes and not _ends_line(raw):
            while (rest := stream.readline(max_bytes + 1)) and not _ends_line(rest):
                pass
            yield BadLine(f"a line longer than {max_bytes} bytes is no request")
            continue
        if isinstance(raw, str):
            yield raw
            continue
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield BadLine(f"not UTF-8: byte 0x{raw[e.start]:02x} at offset {e.start} "
                          f"({e.reason})")


def _ends_line(raw: bytes | str) -> bool:
    return raw[-1:] in (b"\n", "\n")


def answer(line: str, requests: TypeAdapter[Any], handle: Handler) -> tuple[Reply, bool]:
    """(reply, stop?) for one request line; any error becomes a reply, never a crash."""
    request_id = None
    try:
        data = json.loads(line)
        if isinstance(data, dict) and valid_id(data.get("id")):
            request_id = data.get("id")  # an id that cannot be echoed (NaN, a list) is not
        result = handle(parse_request(requests, data))
        return _ok(request_id, result), False
    except StopServing as stop:
        return _ok(request_id, stop.result), True
    except json.JSONDecodeError as e:
        error = ErrorInfo(kind="input", message=f"not JSON: {e.msg}")
    except RecursionError:
        error = ErrorInfo(kind="input", message="nested too deeply: a request is one flat "
                                                "JSON object of a few levels")
    except LinkgradError as e:
        error = ErrorInfo(kind="input" if isinstance(e, InputError) else "runtime",
                          message=str(e))
    except (ValueError, TypeError) as e:  # a value the handler (or JSON) could not take
        error = ErrorInfo(kind="input", message=str(e))
    except Exception as e:  # a bug must cost one request its answer, not the daemon its life
        error = ErrorInfo(kind="runtime", message=f"internal error: {type(e).__name__}: {e}")
    return Reply(id=request_id, ok=False, error=error), False


def _ok(request_id: Any, result: Result | None) -> Reply:
    data = result.model_dump(mode="json", by_alias=True, exclude_none=False) if result else {}
    return Reply(id=request_id, ok=True, result=data)


def serve(lines: IO[bytes] | IO[str], out: LineWriter, requests: TypeAdapter[Any],
          handle: Handler) -> str:
    """Answer every request line until the stop command or the end of input; why it ended."""
    for line in request_lines(lines):
        if isinstance(line, BadLine):
            reply, stop = Reply(id=None, ok=False,
                                error=ErrorInfo(kind="input", message=line.message)), False
        elif not line.strip():
            continue
        else:
            reply, stop = answer(line, requests, handle)
        try:
            out.write(reply)
        except ValueError:  # a result that JSON cannot carry: a bug, said as such
            out.write(Reply(id=reply.id, ok=False, error=ErrorInfo(
                kind="runtime", message="internal error: the answer held a NaN or infinity")))
        if stop:
            return "stop"
    return "stdin closed"


# ---------------------------------------------------------------------------------- client


class Channel(Protocol):
    """A daemon's stdio as the client sees it."""

    def send(self, data: bytes) -> None: ...

    def lines(self) -> Iterator[str]: ...  # its stdout, line by line, until it closes

    def close_input(self) -> None: ...  # EOF on its stdin: the lease ends

    def exit_status(self, timeout_s: float) -> int | None: ...  # None: still running

    def close(self) -> None: ...  # ends the lease too: EOF first, then the channel


R = TypeVar("R", bound=Result)
M = TypeVar("M", bound=BaseModel)


class DidNotStart(RuntimeFailure):
    """The daemon's first word was not "ready": `said` is what it said instead."""

    def __init__(self, what: str, said: dict[str, Any]) -> None:  # free-form: not "ready"
        super().__init__(f"{what} did not start: {said.get('message', said)}")
        self.said = said


_END = {"event": "end of output"}  # the reader's last word: the daemon's stdout closed


class DaemonClient:
    """A JSON-lines daemon over one channel: the ready handshake, typed requests, events to
    `on_event`, and a checked stop."""

    def __init__(self, channel: Channel, what: str, ready: type[M],
                 # free-form: an event as decoded, each receiver validates its own kinds
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 ready_timeout_s: float = 30.0,
                 left_behind: str = "check the host for rules left behind (iptables -S)"
                 ) -> None:
        self.channel = channel
        self.what = what
        self.left_behind = left_behind  # what to check there when a stop is not confirmed
        self.on_event = on_event
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()  # free-form: as decoded
        # free-form: ready / stopped / error as decoded, in order (said back on failure)
        self.lifecycle: list[dict[str, Any]] = []
        self.event_error: Exception | None = None  # on_event failed: said at the next call
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self.reader = threading.Thread(target=self._read, name=f"lines {what}", daemon=True)
        self.reader.start()
        try:
            first = self._next(ready_timeout_s)
            try:
                self.ready = ready.model_validate(first)
            except ValidationError as e:
                raise DidNotStart(what, first) from e
        except BaseException:  # no client to close it later: the channel goes now
            self._closed = True
            channel.close()
            raise

    def _read(self) -> None:
        try:
            for line in self.channel.lines():
                try:
                    message = json.loads(line)
                except json.JSONDecodeError:
                    continue  # not ours (a stray print); the protocol is JSON only
                if isinstance(message, dict):
                    self._take(message)
        finally:
            self.replies.put(_END)

    def _take(self, message: dict[str, Any]) -> None:  # free-form: a line as decoded
        event = message.get("event")
        if event is not None and event not in LIFECYCLE:
            if self.on_event is not None:
                try:
                    self.on_event(message)
                except Exception as e:  # the reader must go on: replies still come
                    self.event_error = self.event_error or e
            return
        if event is not None:
            self.lifecycle.append(message)
        self.replies.put(message)

    def _next(self, timeout_s: float) -> dict[str, Any]:  # free-form: validated by the caller
        try:
            message = self.replies.get(timeout=timeout_s)
        except queue.Empty as e:
            status = self.channel.exit_status(0)
            raise RuntimeFailure(f"{self.what}: no answer in {timeout_s:g} s "
                                 f"(exit status {status})") from e
        if message is _END:
            self.replies.put(_END)  # for whoever asks next
            status = self.channel.exit_status(1.0)
            tail = getattr(self.channel, "stderr_tail", None)  # an SSH channel's
            said = tail() if tail is not None and status != 0 else ""
            raise RuntimeFailure(f"{self.what} ended (exit status {status})"
                                 + (f": {said.splitlines()[-1]}" if said else ""))
        return message

    def call(self, request: Request[R], timeout_s: float = 30.0) -> R:
        """Send `request`; its typed result, or RuntimeFailure with the daemon's error."""
        if self.event_error is not None:
            raise RuntimeFailure(f"{self.what} sent an event that could not be taken: "
                                 f"{self.event_error}") from self.event_error
        fields = request.model_dump(mode="json", exclude={"id"}, exclude_none=True)
        reply = self.send(fields, timeout_s)
        if not reply.ok:
            message = reply.error.message if reply.error else "no error given"
            raise RuntimeFailure(f"{self.what}: {request.cmd} failed: {message}")
        try:
            return request.reply.model_validate(reply.result or {})  # type: ignore[return-value]
        except ValidationError as e:
            raise RuntimeFailure(f"{self.what}: {request.cmd}: unexpected answer "
                                 f"{reply.result}: {validation_problems(e)}") from e

    def send(self, fields: dict[str, Any], timeout_s: float = 30.0) -> Reply:  # free-form
        """Send one request (any fields: tests send bad ones on purpose) and wait for its
        reply, whatever it says. A reply to an earlier request that was given up on (Ctrl-C
        while waiting) is passed over."""
        with self._lock:
            request_id = next(self._ids)
            try:
                self.channel.send((json.dumps({"id": request_id, **fields}) + "\n").encode())
            except OSError as e:
                gone = "" if self.reader.is_alive() else \
                    " (it ended, or its connection was lost, before it was asked)"
                raise RuntimeFailure(f"{self.what}: cannot send {fields.get('cmd')!r}: {e}"
                                     f"{gone}") from e
            while True:
                raw = self._next(timeout_s)
                if "event" in raw:
                    raise RuntimeFailure(f"{self.what} stopped instead of answering: {raw}")
                if not (isinstance(raw.get("id"), int) and raw["id"] < request_id):
                    break
        try:
            reply = Reply.model_validate(raw)
        except ValidationError as e:
            raise RuntimeFailure(f"{self.what}: unexpected answer {raw}") from e
        if reply.id != request_id:
            raise RuntimeFailure(f"{self.what}: answer {raw} is not to request {request_id}")
        return reply

    def wait_for(self, event: str, timeout_s: float = 15.0) -> dict[str, Any]:  # free-form
        """The daemon's lifecycle event `event` (e.g. "stopped"), once it has said it."""
        self.reader.join(timeout_s)  # lifecycle events end the daemon's output
        for message in self.lifecycle:
            if message.get("event") == event:
                return message
        raise RuntimeFailure(f"{self.what} did not say {event!r}: {self.lifecycle}")

    def close(self, timeout_s: float = 15.0) -> None:
        """End the lease: EOF on the daemon's stdin; it stops and undoes what it did.

        RuntimeFailure if it did not confirm that (no "stopped" event, or a non-zero exit):
        its rules may still be on the host until its watchdog acts, and the user must know.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.channel.close_input()
            self.reader.join(timeout=timeout_s)
            status = self.channel.exit_status(timeout_s) if not self.reader.is_alive() else None
        finally:
            self.channel.close()
        stopped = any(m.get("event") == "stopped" for m in self.lifecycle)
        if not (stopped and status == 0):
            state = "still running" if status is None else f"exit status {status}"
            raise RuntimeFailure(f"{self.what} did not confirm it stopped ({state}): "
                                 f"{self.left_behind}")

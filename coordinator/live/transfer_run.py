"""`linkgrad bottleneck`'s transfer on two hosts: the receiver started on one, the sender on
the other, both sides' JSON lines collected (`sniffer.transfer`).

Each side runs under `injector.leased`, so its SSH channel is its lease: closing it (the
command done, failed or interrupted) stops the side, and a side that is stopped removes the
files it made. The argument lists are built by pure functions; `run_transfer` is the thin
shell that starts, reads and closes.
"""

from __future__ import annotations

import queue
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.live.session import Remote
from linkgrad.errors import InputError, LinkgradError, Problem, RuntimeFailure
from linkgrad.protocol.jsonlines import Channel
from linkgrad.protocol.transfer import TransferFailed, TransferInterval, TransferReady, parse_line

__all__ = ["READY_TIMEOUT_S", "HostPath", "TransferPlan", "parse_host_path", "receiver_argv",
           "run_transfer", "sender_argv"]

READY_TIMEOUT_S = 60.0  # a python to start and a file to make on a busy host
ACCEPT_TIMEOUT_S = 60.0  # the receiver's wait for the sender, beyond making the source
SLOW_DISK_BYTES_PER_S = 10e6  # the sender makes its source at least this fast
CLOSE_TIMEOUT_S = 15.0  # a side to end after its channel closed (leased: TERM, then KILL)
Say = Callable[[str], None]


@dataclass(frozen=True)
class HostPath:
    host: str
    path: str

    def __str__(self) -> str:
        return f"{self.host}:{self.path}"


def parse_host_path(text: str, option: str) -> HostPath:
    """`HOST:/absolute/path`; InputError naming `option` otherwise."""
    host, colon, path = text.partition(":")
    if not colon or not host or not path.startswith("/"):
        raise InputError(Problem(f"{text!r}: expected HOST:PATH, a host of the experiment and "
                                 "an absolute path on it (client:/var/tmp/lg.bin)",
                                 field=option))
    return HostPath(host, path)


@dataclass(frozen=True)
class TransferPlan:
    source: HostPath
    destination: HostPath
    size: int  # bytes of the source linkgrad makes if there is none
    new: bool  # the source must be made (the size was asked for): one that exists is refused
    interval_s: float
    keep: bool  # leave the files linkgrad made
    python: str  # on the hosts


def _leased_transfer(plan: TransferPlan, side: str) -> list[str]:
    return [plan.python, "-m", "injector.leased", "--", plan.python, "-m", "sniffer.transfer",
            side]


def _options(plan: TransferPlan) -> list[str]:
    return ["--interval-s", repr(plan.interval_s), *([] if plan.keep else ["--remove"])]


def accept_timeout_s(plan: TransferPlan) -> float:
    """How long the receiver waits for the sender: a minute, and the time a slow disk takes
    to make the source first."""
    return ACCEPT_TIMEOUT_S + (plan.size / SLOW_DISK_BYTES_PER_S if plan.new else 0.0)


def receiver_argv(plan: TransferPlan, address: str, token: str) -> list[str]:
    """The receiver, on any free port of `address` (the experiment's for the --to host),
    taking only the sender that says `token`, leased to its channel."""
    size = ["--max-bytes", str(plan.size)] if plan.new else []
    return [*_leased_transfer(plan, "receive"), "--listen", address, "--port", "0",
            "--token", token, "--accept-timeout-s", f"{accept_timeout_s(plan):g}", *size,
            "--path", plan.destination.path, *_options(plan)]


def sender_argv(plan: TransferPlan, address: str, port: int, token: str) -> list[str]:
    to = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    return [*_leased_transfer(plan, "send"), "--to", to, "--token", token, "--path",
            plan.source.path, "--size", str(plan.size), *(["--new"] if plan.new else []),
            *_options(plan)]


_END = object()  # a side's output ended


class _Side:
    """One side's channel, its lines read by a thread of its own into the shared queue;
    `option` is the command's option that named its path (a path problem is said there)."""

    def __init__(self, what: str, option: str, channel: Channel,
                 lines: queue.Queue[tuple[_Side, object]]) -> None:
        self.what, self.option, self.channel, self.lines = what, option, channel, lines
        self.ended = False
        threading.Thread(target=self._read, name=f"lines {what}", daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self.channel.lines():
                if line.strip():
                    self.lines.put((self, line))
        except Exception as e:  # the connection broke: said as the side's end
            self.lines.put((self, RuntimeFailure(f"{self.what}: {e}")))
        finally:
            self.lines.put((self, _END))

    def close(self) -> int | None:
        """End the lease; the side's exit status (None: it did not end)."""
        try:
            self.channel.close_input()
            return self.channel.exit_status(CLOSE_TIMEOUT_S)
        finally:
            self.channel.close()


def run_transfer(source: Remote, destination: Remote, address: str, plan: TransferPlan,
                 say: Say) -> list[str]:
    """The transfer from `source` to `destination` (reached at `address`): both sides' lines,
    receiver's then sender's, each as it printed them. RuntimeFailure (InputError for a path
    a side cannot use) naming the side, once both sides have stopped."""
    lines: queue.Queue[tuple[_Side, object]] = queue.Queue()
    sides: list[_Side] = []
    token = secrets.token_hex(16)  # the receiver takes no connection that does not say it
    try:
        receiver = _Side(f"the receiver on {destination.name}", "--to",
                         destination.open_lines(receiver_argv(plan, address, token)), lines)
        sides.append(receiver)
        port = _ready(receiver, lines, plan)
        say(f"receiving into {plan.destination} on port {port}")
        sender = _Side(f"the sender on {source.name}", "--from",
                       source.open_lines(sender_argv(plan, address, port, token)), lines)
        sides.append(sender)
        say(f"sending {plan.source} to {address}:{port}")
        got = _collect(sides, lines, plan)
    finally:
        statuses = {side.what: side.close() for side in sides}
    if stuck := [what for what, status in statuses.items() if status is None]:
        raise RuntimeFailure(f"{' and '.join(stuck)} did not end when its channel closed")
    return got[receiver] + got[sender]


def _ready(receiver: _Side, lines: queue.Queue[tuple[_Side, object]], plan: TransferPlan
           ) -> int:
    try:
        _, first = lines.get(timeout=READY_TIMEOUT_S)
    except queue.Empty as e:
        raise RuntimeFailure(f"{receiver.what} did not say it was ready in "
                             f"{READY_TIMEOUT_S:g} s") from e
    said = _parsed(receiver, first, plan)
    if not isinstance(said, TransferReady):
        raise RuntimeFailure(f"{receiver.what} said {first!r} before it was ready")
    return said.port


def _collect(sides: list[_Side], lines: queue.Queue[tuple[_Side, object]],
             plan: TransferPlan) -> dict[_Side, list[str]]:
    """Every line until both sides have said `done` and ended; the first failure raised."""
    got: dict[_Side, list[str]] = {side: [] for side in sides}
    done: set[_Side] = set()
    while not all(side.ended for side in sides):
        side, line = lines.get()
        if line is _END:
            side.ended = True
            if side not in done:
                status = side.channel.exit_status(CLOSE_TIMEOUT_S)
                raise RuntimeFailure(f"{side.what} ended before the transfer was done "
                                     f"(exit status {status}): is ssh.python "
                                     f"({plan.python}) a python with linkgrad there?")
            continue
        parsed = _parsed(side, line, plan)
        if isinstance(parsed, TransferInterval):
            got[side].append(str(line))
            if parsed.event == "done":
                done.add(side)
    return got


def _parsed(side: _Side, line: object, plan: TransferPlan
            ) -> TransferReady | TransferInterval | TransferFailed:
    if isinstance(line, LinkgradError):
        raise line
    if line is _END:
        status = side.channel.exit_status(CLOSE_TIMEOUT_S)
        raise RuntimeFailure(f"{side.what} ended without a word (exit status {status}): is "
                             f"ssh.python ({plan.python}) a python with linkgrad there?")
    try:
        parsed = parse_line(str(line), side.what)
    except InputError as e:  # the host's, not the user's
        raise RuntimeFailure(f"{side.what} said what is no transfer line: {e}") from e
    if isinstance(parsed, TransferFailed):
        if parsed.kind == "input":
            raise InputError(Problem(f"{side.what}: {parsed.message}", field=side.option))
        raise RuntimeFailure(f"{side.what} failed: {parsed.message}")
    return parsed

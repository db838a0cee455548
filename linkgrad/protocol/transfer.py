"""The lines of linkgrad's own disk-to-disk transfer (`python -m sniffer.transfer`), written
and read here only: the receiver's `ready` (its port), one `calipers` line per interval and
side (each resource's calipers over that interval), a last `done` line, or an `error`.

A saved transfer is both sides' lines in one file (`linkgrad bottleneck --output`); `read_lines`
reads it back strictly, each problem at its line, and `tput_i` gives each resource's mean
instantaneous throughput per interval, which `linkgrad.bottleneck` tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, ClassVar, Literal

from pydantic import Field, TypeAdapter, ValidationError

from linkgrad.calipers import CaliperSummary
from linkgrad.errors import InputError, Problem
from linkgrad.protocol.base import Message
from linkgrad.reading import loads_json, problems_of

__all__ = ["SIDES", "TransferFailed", "TransferInterval", "TransferLine", "TransferReady",
           "parse_line", "read_lines", "tput_i"]

SIDES = ("send", "receive")


class TransferReady(Message):
    """The receiver listens on `port` and has made its file."""

    event: Literal["ready"] = "ready"
    port: int = Field(ge=1, le=65535)


class TransferInterval(Message):
    """One side's calipers over [from_s, to_s) (unix s); the last (`done`) says the total."""

    absent_when_none: ClassVar[tuple[str, ...]] = ("notes", "bytes", "seconds")
    event: Literal["calipers", "done"]
    side: Literal["send", "receive"]
    from_s: float
    to_s: float
    resources: dict[str, CaliperSummary]
    notes: tuple[str, ...] | None = None  # what could not be measured as meant
    bytes: int | None = Field(None, ge=0)  # done: the bytes moved
    seconds: float | None = Field(None, ge=0)  # done: from the first byte to the last


class TransferFailed(Message):
    """The side stopped: `input` when its path cannot be used (none, or one that exists),
    `runtime` for anything else."""

    event: Literal["error"] = "error"
    kind: Literal["input", "runtime"]
    message: str


TransferLine = Annotated[TransferReady | TransferInterval | TransferFailed,
                         Field(discriminator="event")]
_LINE: TypeAdapter[TransferReady | TransferInterval | TransferFailed] = TypeAdapter(TransferLine)
_EXPECTED = ("a transfer line: a JSON object with event ready, calipers, done or error, as "
             "`python -m sniffer.transfer` prints")


def parse_line(text: str, source: str = "transfer", line: int | None = None
               ) -> TransferReady | TransferInterval | TransferFailed:
    """One line; InputError at `source`:`line` saying what was expected."""
    try:
        data = loads_json(text, source)
    except InputError as e:
        raise InputError(Problem(f"{e.problems[0].message} (expected {_EXPECTED})", source,
                                 line)) from e
    try:
        return _LINE.validate_python(data)
    except ValidationError as e:
        tag = data.get("event") if isinstance(data, dict) else None
        raise InputError([Problem(f"{p.message} (expected {_EXPECTED})", source, line,
                                  _without_tag(p.field, tag))
                          for p in problems_of(e, source)]) from e


def _without_tag(field: str | None, tag: object) -> str | None:
    """pydantic's path starts with the event it chose the model by: the line has no such
    field."""
    if field is not None and isinstance(tag, str) and field.startswith(tag + "."):
        return field[len(tag) + 1:]
    return field


def read_lines(text: str, source: str) -> list[TransferInterval]:
    """A saved transfer: both sides' intervals, in the order given. Blank and `ready` lines are
    passed over; an `error` line, a side with no lines or without its `done` is InputError
    (the transfer was not whole, and half a transfer is no evidence)."""
    intervals: list[TransferInterval] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        parsed = parse_line(raw, source, number)
        if isinstance(parsed, TransferFailed):
            raise InputError(Problem(f"the transfer failed here ({parsed.message}): its "
                                     "lines are not a whole transfer", source, number))
        if isinstance(parsed, TransferInterval):
            intervals.append(parsed)
    problems = [Problem(f"no {side} side's `done` line: save both sides' lines of a whole "
                        "transfer (linkgrad bottleneck --output)", source)
                for side in SIDES
                if not any(i.side == side and i.event == "done" for i in intervals)]
    if problems:
        raise InputError(problems)
    return intervals


def tput_i(intervals: Sequence[TransferInterval]) -> dict[str, list[float]]:
    """Resource -> its instantaneous throughput (bytes/s) in each interval it was timed in:
    the bytes it moved over the time it spent moving them (the calipers' value sum over their
    busy time: NetLogger's dur.i). The meter charges every event at least a microsecond
    (`sniffer.transfer_meter.MIN_SPAN_S`), so no bytes are in the sum without time in the
    busy time.

    Kissel et al. §IV.C take mean(nbytes/dur) instead, each call weighed alike. That reads a
    throttle that lets most calls through at once and holds the next one far too fast (a
    40 MB/s blkio throttle read as 1 GB/s: nineteen 1 ms writes and one of 480 ms); weighed by
    their time, the calls give the rate the resource moved bytes at."""
    out: dict[str, list[float]] = {}
    for interval in intervals:
        for name, calipers in interval.resources.items():
            if calipers.value is not None and calipers.busy_s:
                out.setdefault(name, []).append(calipers.value.sum / calipers.busy_s)
    return out

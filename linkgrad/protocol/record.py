"""The injection record (docs/offline.md): JSON written by the coordinator per measurement.

Fields: `start` (unix s, first rising edge), `period_s`, `cycles`, `magnitude_ms` (mean delay
actually injected while on), optional `n_bins`, optional `link`. Unknown fields are an error:
a misspelt `magnitude_ms` must never silently mean "no delay".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from pydantic import Field, StrictFloat, StrictInt, ValidationError

from linkgrad.errors import InputError, Problem
from linkgrad.protocol.base import Message
from linkgrad.protocol.fields import (
    LIMIT_CYCLES,
    LIMIT_DURATION_S,
    LIMIT_MAGNITUDE_MS,
    LIMIT_UNIX_S,
    MIN_PERIOD_S,
)
from linkgrad.reading import loads_json, read_text
from linkgrad.square_wave import SquareWave

__all__ = [
    "LATE_TOLERANCE",
    "MIN_MAGNITUDE_MS",
    "InjectionRecord",
    "load_injection_record",
    "parse_injection_record",
    "recorded_delay_ms",
]

MIN_MAGNITUDE_MS = 1e-3  # a microsecond: below it no injector applies anything measurable
# The injector never releases a packet early, so at the 10 s cap the mean it held packets is
# just above LIMIT_MAGNITUDE_MS (its release's lateness: us, ms on a busy host). A mean up to
# this fraction above the cap is recorded as the cap without a note: the gradient is then at
# most 1% too large, a tenth of the default wanted interval (±10%).
LATE_TOLERANCE = 0.01


class InjectionRecord(Message):
    """One square-wave injection as the coordinator recorded it."""

    # Strict: `true` is no count and "30" no delay (a record is written by a program); bounded
    # as the injector's requests are, so no record reaches the arithmetic as 1e308 or 1e-320.
    start: StrictFloat = Field(gt=0, lt=LIMIT_UNIX_S,
                               description="unix seconds of the first rising edge")
    period_s: StrictFloat = Field(ge=MIN_PERIOD_S, le=LIMIT_DURATION_S)
    cycles: StrictInt = Field(ge=1, le=LIMIT_CYCLES)
    magnitude_ms: StrictFloat = Field(ge=MIN_MAGNITUDE_MS, le=LIMIT_MAGNITUDE_MS,
                                      description="mean delay actually injected while on")
    n_bins: StrictInt | None = Field(default=None, ge=2, le=1 << 20)
    # free-form: what the writer says of the link, for a person (the run writes its label)
    link: str | dict[str, Any] | None = None

    def square_wave(self) -> SquareWave:
        return SquareWave(self.start, self.period_s, self.cycles, self.magnitude_ms / 1000.0)

    @classmethod
    def of(cls, wave: SquareWave, applied_ms: float, link: str | None = None) -> Self:
        """The record of `wave`, whose delay while on was `applied_ms` (as the injector
        measured it: written as it came, not through seconds and back)."""
        return cls(start=float(wave.start_s), period_s=float(wave.period_s),
                   cycles=int(wave.cycles), magnitude_ms=float(applied_ms), link=link)


def recorded_delay_ms(applied_ms: float | None, packets: int, requested_ms: float
                      ) -> tuple[float, str | None]:
    """The delay a run records for a wave asked at `requested_ms` (within the record's limits)
    whose `packets` the injector held `applied_ms` on average while on, and a note when that
    mean is not what the record holds: the run must never fail on its own measurement.

    No packet while on: as asked (no request crossed the link then). Above the cap: the cap
    (`LATE_TOLERANCE`). Below a microsecond, where the injector holds each packet at least the
    delay asked: not the delay it held them, so as asked."""
    if applied_ms is None or packets == 0:
        return requested_ms, None
    if applied_ms > LIMIT_MAGNITUDE_MS:
        late = applied_ms / LIMIT_MAGNITUDE_MS - 1
        return LIMIT_MAGNITUDE_MS, None if late <= LATE_TOLERANCE else (
            f"the injector held packets {applied_ms:g} ms on average, above the injection "
            f"record's {LIMIT_MAGNITUDE_MS:g} ms (released {late:.0%} late): recorded as "
            f"{LIMIT_MAGNITUDE_MS:g} ms, so the gradient is {late:.0%} too large")
    if applied_ms < MIN_MAGNITUDE_MS:
        return requested_ms, (
            f"the injector reports a mean delay of {applied_ms:g} ms, below the "
            f"{MIN_MAGNITUDE_MS:g} ms an injection record holds and the {requested_ms:g} ms "
            "asked (it releases no packet early): recorded as asked")
    return applied_ms, None


def _line_of(text: str, key: str) -> int | None:
    """Line number of the first `"key"` in a JSON text (pydantic knows no lines)."""
    needle = f'"{key}"'
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return None


def parse_injection_record(text: str, source: str = "<injection>") -> InjectionRecord:
    """Validate a JSON injection record; every problem is reported with file, line and field.
    Read as strict JSON: a key given twice, NaN, Infinity or 1e999 is an error, not the last
    value or a float that breaks the arithmetic."""
    data = loads_json(text, source)
    if not isinstance(data, dict):
        raise InputError(Problem("expected one JSON object (an injection record)", source, 1))
    try:
        return InjectionRecord.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            field = ".".join(str(p) for p in err["loc"]) or None
            key = str(err["loc"][0]) if err["loc"] else ""
            line = _line_of(text, key) if key else None
            message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(Problem(message, source, line, field))
        raise InputError(problems) from e


def load_injection_record(path: str | Path) -> InjectionRecord:
    # read_text: bytes that are not UTF-8 and files too large are InputErrors naming the file
    return parse_injection_record(read_text(path, "injection record"), str(path))

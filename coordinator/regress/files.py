"""The files the nights keep: the baseline (one accepted night's measures, meant to be
committed beside the suite) and the history (JSON lines, a night per line, appended whole:
what the trend page draws). Both read back strictly: a file edited wrong, cut short or from
another tool is InputError naming it, its line and field."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coordinator.config import bounds
from coordinator.config.fields import Float, Int, Str, is_none
from coordinator.config.strict_json import dumps
from coordinator.regress.check import Check, Kind, Verdict, rounded
from coordinator.regress.measures import GradientMeasure, NightMeasures
from coordinator.regress.values import CheckValues, NoValues
from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.reading import loads_json, problems_of, read_json, read_text

BASELINE_FORMAT = "linkgrad regress baseline"
NightStatus = Literal["pass", "regression", "failed", "bad suite", "accepted"]


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)



class Baseline(_File):
    format: Literal["linkgrad regress baseline"] = BASELINE_FORMAT
    version: Int = Field(1, ge=1, le=1)
    suite: Str
    accepted_unix: Float = Field(ge=0, lt=bounds.MAX_UNIX_S)
    night: Str  # the accepted night's directory
    measures: NightMeasures


def write_baseline(path: Path, suite: str, night: Path, measures: NightMeasures,
                   now_s: float | None = None) -> Baseline:
    baseline = Baseline(suite=suite, accepted_unix=time.time() if now_s is None else now_s,
                        night=str(night), measures=measures)
    write_whole(path, dumps(baseline.model_dump(mode="json"), indent=1, note=False) + "\n")
    return baseline


def read_baseline(path: Path, suite: str) -> Baseline:
    """The baseline at `path`, which must be the suite's own."""
    data = read_json(path, "the baseline (linkgrad regress --accept writes it)")
    try:
        baseline = Baseline.model_validate(data)
    except ValidationError as e:
        raise InputError(problems_of(e, str(path))) from e
    if baseline.suite != suite:
        raise InputError(Problem(f"the baseline of suite {baseline.suite!r}, not of {suite!r}",
                                 str(path), field="suite"))
    return baseline


def write_whole(path: Path, text: str) -> None:
    """A temporary file renamed over the target: an interrupted write leaves the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except BaseException:  # a full disk, an interrupt: no temporary file left beside it
        tmp.unlink(missing_ok=True)
        raise


# errnos that say the path the user named cannot take a file (a missing or wrong directory,
# no permission, a read-only mount, a name too long): another path fixes them, so exit 2; any
# other (ENOSPC, EIO, EDQUOT...) is the machine's and exits 1
PATH_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM,
                         errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP})


def write_error(e: OSError, path: Path, option: str) -> InputError | RuntimeFailure:
    """A failed write of the file `option` named, as the user's (exit 2) or the machine's."""
    if e.errno in PATH_ERRNOS:
        return InputError(Problem(f"cannot write: {e.strerror or e}", str(path), field=option))
    return RuntimeFailure(f"cannot write {path}: {e.strerror or e}")


class CheckRecord(_File):
    """A check as the history keeps it (the trend page reads it back). Its fields in this
    order, as the history has always had them: a transaction or link the subject has not is
    written null, a placement or class it has not is left out."""

    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)
    kind: Kind
    name: Str
    verdict: Verdict
    experiment: Str
    transaction: Str | None = None
    link: Str | None = None
    baseline: CheckValues = Field(default_factory=NoValues)
    current: CheckValues = Field(default_factory=NoValues)
    placement: Str | None = Field(None, exclude_if=is_none)
    class_: Str | None = Field(None, alias="class", exclude_if=is_none)  # SNAP's
    reason: Str
    change: Float | None  # rounded as regress.json has it
    p_value: Float | None

    @classmethod
    def of(cls, c: Check) -> CheckRecord:
        s = c.subject
        return cls(kind=c.kind, name=c.name, verdict=c.verdict, experiment=s["experiment"],
                   transaction=s.get("transaction"), link=s.get("link"), baseline=c.baseline,
                   current=c.current, placement=s.get("placement"), class_=s.get("class"),
                   reason=c.reason, change=rounded(c.change), p_value=rounded(c.p_value, 8))


class NightRecord(_File):
    """A line of the history: how a night went, every check, and what it measured."""

    suite: Str
    night: Str  # its directory's name
    started_unix: Float = Field(ge=0, lt=bounds.MAX_UNIX_S)
    ended_unix: Float = Field(ge=0, lt=bounds.MAX_UNIX_S)
    status: NightStatus
    reason: Str | None = None  # why it failed
    baseline: Str | None = None  # the baseline file compared with
    baseline_accepted_unix: Float | None = Field(None, ge=0, lt=bounds.MAX_UNIX_S)
    checks: list[CheckRecord] = Field(default_factory=list)
    gradients: list[GradientMeasure] = Field(default_factory=list)


def night_record(suite: str, night: Path, started_s: float, status: NightStatus,
                 checks: Sequence[Check], gradients: Sequence[GradientMeasure],
                 baseline: Path | None, baseline_accepted_s: float | None,
                 reason: str | None = None) -> NightRecord:
    return NightRecord(suite=suite, night=night.name, started_unix=started_s,
                       ended_unix=time.time(), status=status, reason=reason,
                       baseline=str(baseline) if baseline else None,
                       baseline_accepted_unix=baseline_accepted_s,
                       checks=[CheckRecord.of(c) for c in checks],
                       gradients=list(gradients))


def append_history(path: Path, record: NightRecord) -> None:
    """One line, written by one write() on a file opened for appending: two nights never
    interleave and a killed one leaves whole lines behind it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (dumps(record.model_dump(mode="json"), indent=None, note=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = 0
        while written < len(line):  # a short write (a full disk) raises on the next one
            written += os.write(fd, line[written:])
    finally:
        os.close(fd)


def read_history(path: Path) -> list[NightRecord]:
    """Every night in the history file (none if there is no file yet)."""
    if not path.exists():
        return []
    out = []
    for number, line in enumerate(read_text(path, "the nights' history").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(NightRecord.model_validate(loads_json(line, str(path))))
        except InputError as e:
            raise InputError([Problem(p.message, str(path), number, p.field)
                              for p in e.problems]) from e
        except ValidationError as e:
            raise InputError([Problem(p.message, str(path), number, p.field)
                              for p in problems_of(e, str(path))]) from e
    return out

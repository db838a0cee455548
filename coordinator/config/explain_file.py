"""`explain.json` read back for what-if questions: only what a passive gradient needs (each
row's transaction, host pair, verdict and passive estimate), everything else ignored, so the
explanation can grow fields without breaking `predict`, `place` and `route`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from coordinator.config.fields import Float, Str
from coordinator.config.run_dir import read_run_file
from linkgrad.errors import InputError
from linkgrad.prediction import Z95, Estimate
from linkgrad.reading import problems_of

__all__ = ["ExplainFile", "ExplainFileRow", "passive_estimates", "read_explain_file"]

PASSIVE_ONLY = "passive-only"
# a link crossed more than this often per request is no gradient a path could give
_MAX_CROSSINGS = 1e6
Crossings = Annotated[Float, Field(ge=-_MAX_CROSSINGS, le=_MAX_CROSSINGS)]


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class ExplainFileRow(_Read):
    transaction: Str
    pair: Str  # "src->dst", the hosts as the paths count crossings
    verdict: Str
    passive_gradient: Crossings | None = None
    passive_ci95: tuple[Crossings, Crossings] | None = None

    @field_validator("pair")
    @classmethod
    def _pair(cls, pair: str) -> str:
        if _hosts(pair) is None:
            raise ValueError(f"{pair!r} is not a host pair 'src->dst'")
        return pair

    @model_validator(mode="after")
    def _interval(self) -> ExplainFileRow:
        if self.passive_ci95 is not None and self.passive_ci95[0] > self.passive_ci95[1]:
            raise ValueError(f"passive_ci95 {list(self.passive_ci95)} is not [low, high]")
        if self.passive_gradient is not None and self.passive_ci95 is None:
            raise ValueError("a passive_gradient needs its passive_ci95")
        return self

    @property
    def hosts(self) -> tuple[str, str]:
        hosts = _hosts(self.pair)
        assert hosts is not None  # validated
        return hosts


def _hosts(pair: str) -> tuple[str, str] | None:
    """(src, dst) of "src->dst", or None."""
    src, arrow, dst = pair.partition("->")
    return (src, dst) if arrow and src and dst and "->" not in dst else None


class ExplainFile(_Read):
    rows: list[ExplainFileRow]


def read_explain_file(path: Path) -> ExplainFile | None:
    """A run's explain.json, or None where there is none (a run from before it was
    written); InputError naming the file and every wrong field."""
    if not path.exists() and not path.is_symlink():
        return None
    data = read_run_file(path, "the run explained")
    try:
        return ExplainFile.model_validate(data)
    except ValidationError as e:
        raise InputError(problems_of(e, str(path))) from e


def passive_estimates(explained: ExplainFile) -> dict[str, dict[tuple[str, str], Estimate]]:
    """transaction -> (src, dst) -> the passive gradient of every passive-only row, its
    standard error the 95% interval's width / (2·1.96): the paths count crossings per host
    pair, so the rows of two links between the same hosts give one estimate, taken once."""
    out: dict[str, dict[tuple[str, str], Estimate]] = {}
    for row in explained.rows:
        if row.verdict != PASSIVE_ONLY or row.passive_gradient is None:
            continue
        assert row.passive_ci95 is not None  # checked on reading
        lo, hi = row.passive_ci95
        se = (hi - lo) / (2 * Z95)
        out.setdefault(row.transaction, {}).setdefault(
            row.hosts, Estimate(row.passive_gradient, se if math.isfinite(se) else math.inf))
    return out

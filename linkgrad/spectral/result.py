"""A transaction's gradient as linkgrad reports it: one typed, rounded model from the
estimator to `gradients.json` and `linkgrad gradient --json`, and back.

`GradientResult.of` rounds an estimate once; what reads the file gets the same model. Its
fields, in this order, are the file's format: a field added here appears in every file
written after it (tests/data/runs/ pins the format).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

from linkgrad.spectral.by_level import LevelSplit
from linkgrad.spectral.estimate import TransactionGradient
from linkgrad.spectral.lockin import LockinEstimate

__all__ = ["ByLevel", "Count", "GradientResult", "LevelSide", "Number", "ThesisBins",
           "delay_disagreement", "rounded"]

def _not_too_long(value: object) -> object:
    """An integer of hundreds of digits (JSON allows it) named by its size, not by a float's
    overflow."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1023:
        digits = len(str(abs(value)))
        raise ValueError(f"a number of {digits} digits, too large for a float")
    return value


# a finite number of JSON (an int or a float, never a bool, a string, NaN or infinity)
Number = Annotated[float, Strict(), Field(allow_inf_nan=False), BeforeValidator(_not_too_long)]
Count = Annotated[int, Strict(), Field(ge=0)]


def rounded(x: float | None, digits: int = 4) -> float | None:
    """`x` rounded for JSON; None when missing or not finite (strict JSON has no NaN)."""
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), digits)


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LevelSide(_Result):
    """The wave fitted on the quiet (or the busy) half of the cycles alone."""

    gradient: Number | None
    ci95: tuple[Number | None, Number | None]
    cycles: Count


class ByLevel(_Result):
    """Quiet against busy cycles, where their median responses differ 1.5× or more."""

    level_ratio: Number | None
    differ: bool
    quiet: LevelSide
    busy: LevelSide


class ThesisBins(_Result):
    """What the thesis's eq. 2.6 was computed over."""

    n_bins: Count
    bin_s: Number | None
    training_chunks: Count


class GradientResult(_Result):
    """One transaction's link gradient under one square wave: the estimate (null where the
    requests gave none, with a note saying why), its 95% interval, the thesis's eq. 2.6 beside
    it, and what the estimate was made of."""

    gradient: Number | None = None
    ci95: tuple[Number, Number] | None = None
    thesis_gradient: Number | None = None
    requests: Count = 0  # in the measurement window
    baseline_requests: Count = 0
    method: Literal["lockin"] = "lockin"
    effect_ms: Number | None = None
    se_ms: Annotated[Number, Field(ge=0)] | None = None
    dof: Count | None = None
    batches: Count | None = None
    drift_degree: Count | None = None
    periodic_noise_hz: list[Number] = Field(default_factory=list)
    inside_fraction: Number | None = None
    edge_guard_ms: Number | None = None
    # where the interval came from: the batch residuals, the spread between cycles, or the
    # span of the quiet and busy cycles' gradients
    interval_from: Literal["batches", "cycles", "levels"] | None = None
    by_level: ByLevel | None = None
    thesis: ThesisBins | None = None
    notes: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, r: TransactionGradient) -> GradientResult:
        """The estimate, rounded as reported."""
        e, th = r.lockin, r.thesis
        lo, hi = (rounded(e.ci[0]), rounded(e.ci[1])) if e else (None, None)
        return cls(
            gradient=rounded(e.gradient) if e else None,
            ci95=(lo, hi) if lo is not None and hi is not None else None,
            thesis_gradient=rounded(th.gradient) if th else None,
            requests=r.requests, baseline_requests=r.baseline_requests,
            effect_ms=rounded(e.effect_s * 1e3, 3) if e else None,
            se_ms=rounded(e.se_s * 1e3, 3) if e else None,
            dof=e.dof if e else None, batches=e.batches if e else None,
            drift_degree=e.drift_degree if e else None,
            periodic_noise_hz=[f for f in (rounded(f, 5) for f in (
                e.periodic_hz if e else r.periodic_hz)) if f is not None],
            inside_fraction=rounded(e.inside_fraction) if e else None,
            edge_guard_ms=rounded(e.guard_s * 1e3, 2) if e else None,
            interval_from=("levels" if e.widened_by_level else "cycles"
                           if e.widened_by_cycles else "batches") if e else None,
            by_level=_by_level(r.by_level),
            thesis=ThesisBins(n_bins=th.n_bins, bin_s=rounded(th.bin_s),
                              training_chunks=th.chunks) if th else None,
            notes=list(r.notes))

    @property
    def half_width(self) -> float | None:
        """Half the 95% interval; None without one."""
        return None if self.ci95 is None else (self.ci95[1] - self.ci95[0]) / 2

    def noted(self, *notes: str | None) -> GradientResult:
        """The same result with `notes` added after its own (None: nothing to say)."""
        said = [n for n in notes if n]
        return self.model_copy(update={"notes": [*self.notes, *said]}) if said else self


def _by_level(split: LevelSplit | None) -> ByLevel | None:
    if split is None:
        return None

    def side(e: LockinEstimate, cycles: int) -> LevelSide:
        return LevelSide(gradient=rounded(e.gradient),
                         ci95=(rounded(e.ci[0]), rounded(e.ci[1])), cycles=cycles)

    return ByLevel(level_ratio=rounded(split.level_ratio, 3), differ=split.differ,
                   quiet=side(split.quiet, split.quiet_cycles),
                   busy=side(split.busy, split.busy_cycles))


def delay_disagreement(first: GradientResult, first_ms: float, second: GradientResult,
                       second_ms: float) -> str | None:
    """A note when one transaction's gradients at two delays differ beyond both intervals:
    the response is not linear over that range (thesis ch. 6), which belongs in the result,
    not in its error."""
    h1, h2 = first.half_width, second.half_width
    if first.gradient is None or second.gradient is None or h1 is None or h2 is None:
        return None
    if max(first_ms, second_ms) < 1.5 * min(first_ms, second_ms):
        return None
    if abs(first.gradient - second.gradient) <= math.hypot(h1, h2):
        return None
    return (f"not linear: {first.gradient:.3g} ± {h1:.2g} at {first_ms:.2f} ms against "
            f"{second.gradient:.3g} ± {h2:.2g} at {second_ms:.2f} ms")

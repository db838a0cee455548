"""What a check shows of each night: one model per kind of measured value, kept in the
night's regress.json, `--json`, JUnit and the history line as it is here (fields in this
order). A check with nothing of a night (not measured, or not a measure at all) shows
`NoValues`, written `{}`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from coordinator.config.fields import Float, Int, Str, is_none

__all__ = ["CheckValues", "GradientValues", "LinkValues", "NoValues", "PathValues",
           "PredictionValues", "SnapValues"]



class _Values(BaseModel):
    # forbid: a history line's values are told apart by their fields alone
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class NoValues(_Values):
    """Nothing of this night: `{}`."""


class GradientValues(_Values):
    gradient: Float | None  # None: too few requests to estimate
    ci95: tuple[Float, Float] | None
    magnitude_ms: Float


class PredictionValues(_Values):
    predicted_ms: Float  # rounded to the microsecond, as are the others
    se_ms: Float
    current_ms: Float


class LinkValues(_Values):
    messages: Int  # in the passive phase


class PathValues(_Values):
    """The transaction's traced requests and its dominant path; a night without the
    transaction has `requests` (0) alone: the path's fields are left out, never null."""

    requests: Int
    dominant: Str | None = Field(None, exclude_if=is_none)  # the path's shape
    count: Int | None = Field(None, exclude_if=is_none)  # requests that took it
    crossings: dict[Str, Float] | None = Field(None, exclude_if=is_none)  # host link -> n


class SnapValues(_Values):
    rate: Float  # connection-seconds per second of the passive phase, 4 decimals


CheckValues = GradientValues | PredictionValues | LinkValues | PathValues | SnapValues | NoValues

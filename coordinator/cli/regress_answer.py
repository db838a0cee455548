"""What `linkgrad regress` answers: the night's regress.json and `--json` are this model, the
text printer reads it. Fields in the order the file has always had them."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from coordinator.cli.answer import Answer, absent_when_none
from coordinator.config.fields import is_none
from coordinator.regress.check import Check, Kind, Verdict, rounded
from coordinator.regress.files import NightStatus
from coordinator.regress.values import CheckValues

__all__ = ["CheckAnswer", "RegressAnswer", "SuiteAnswer"]


class CheckAnswer(Answer):
    """A check: its subject's fields (those it has) between its name and its verdict."""

    model_config = ConfigDict(serialize_by_alias=True)
    kind: Kind
    name: str
    experiment: str
    placement: str | None = absent_when_none()
    transaction: str | None = absent_when_none()
    link: str | None = absent_when_none()
    class_: str | None = Field(None, serialization_alias="class",  # SNAP's
                               exclude_if=is_none)
    verdict: Verdict
    reason: str
    baseline: CheckValues
    current: CheckValues
    change: float | None  # current - baseline, 6 decimals
    p_value: float | None  # before Holm's correction, 8 decimals

    @classmethod
    def of(cls, c: Check) -> CheckAnswer:
        s = c.subject
        return cls(kind=c.kind, name=c.name, experiment=s["experiment"],
                   placement=s.get("placement"), transaction=s.get("transaction"),
                   link=s.get("link"), class_=s.get("class"), verdict=c.verdict,
                   reason=c.reason, baseline=c.baseline, current=c.current,
                   change=rounded(c.change), p_value=rounded(c.p_value, 8))


class SuiteAnswer(Answer):
    name: str
    file: str


class RegressAnswer(Answer):
    suite: SuiteAnswer
    night: str  # its directory
    status: NightStatus
    exit_code: int
    reason: str | None  # why it failed, or its suite was bad
    baseline: str | None  # the baseline file compared with (or accepted)
    baseline_accepted_unix: float | None
    accepted: bool
    runs: dict[str, str]  # experiment -> its run directory
    counts: dict[Verdict, int]  # in the order the verdicts first came
    regressions: list[str]  # the regressions' names
    checks: list[CheckAnswer]
    # the files kept of the night (a night compared again keeps no history)
    history: str | None = absent_when_none()
    trend: str | None = absent_when_none()
    junit: str | None = absent_when_none()

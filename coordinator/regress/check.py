"""A check of a night against the baseline, and what every kind of check shares: pairing
both nights' measures by key, and Holm's verdicts over a kind's tests.

Verdicts: `regression` (fails the night), `pass`, `new` (measured tonight only: not a failure
in itself; a new link is, and the link check says so), `skipped` (not judged, with why).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Literal, TypeVar

from coordinator.regress.measures import (
    GradientMeasure,
    LinkMeasure,
    PathMeasure,
    PredictionMeasure,
    SnapMeasure,
)
from coordinator.regress.stats import holm
from coordinator.regress.values import CheckValues, NoValues

Verdict = Literal["pass", "regression", "new", "skipped"]
Kind = Literal["experiment", "gradient", "prediction", "link", "path", "snap"]
ABSENT_FRACTION = 0.1  # under this fraction of a threshold, a thing counts as not there
M = TypeVar("M", GradientMeasure, PredictionMeasure, LinkMeasure, PathMeasure, SnapMeasure)


@dataclass(frozen=True)
class Check:
    kind: Kind
    subject: dict[str, str]  # experiment, transaction, link, placement, class: what it is of
    verdict: Verdict
    reason: str  # one sentence: why this verdict
    # what each night measured of the subject (NoValues: nothing, or not a measure)
    baseline: CheckValues = field(default_factory=NoValues)
    current: CheckValues = field(default_factory=NoValues)
    change: float | None = None  # current - baseline, in the check's unit
    p_value: float | None = None  # before Holm's correction

    @property
    def name(self) -> str:
        """`PutBid on tcp app1:0 -> db:5432 (experiment db)`."""
        s = self.subject
        if self.kind == "experiment" or len(s) == 1:
            return f"{self.kind} (experiment {s['experiment']})"
        what = " ".join(s[k] for k in ("transaction", "class") if k in s) or self.kind
        where = s.get("link") or (f"placement {s['placement']}" if "placement" in s else "")
        return f"{what}{' on ' + where if where else ''} (experiment {s['experiment']})"


def paired(before: Iterable[M], now: Iterable[M]) -> list[tuple[M | None, M | None]]:
    """Both nights' measures by key, in key order (one side None where the other has it)."""
    a = {m.key: m for m in before}
    b = {m.key: m for m in now}
    return [(a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys())]


def holm_verdicts(found: list[Check], alpha: float, big_enough: Callable[[Check], bool]
                   ) -> list[Check]:
    """Checks carrying a p-value (verdict still open: "pass") become regressions where Holm
    rejects at `alpha` and the change is large enough to matter."""
    out = [replace(c, verdict="skipped", reason=f"{c.reason}: the test gave no p-value")
           if c.p_value is not None and not math.isfinite(c.p_value) else c for c in found]
    tested = [i for i, c in enumerate(out) if c.p_value is not None and c.verdict == "pass"]
    rejected = holm([out[i].p_value or 0.0 for i in tested], alpha)
    for i, reject in zip(tested, rejected, strict=True):
        c = out[i]
        if reject and big_enough(c):
            out[i] = replace(c, verdict="regression", reason=f"{c.reason}: a significant change "
                             f"(p = {c.p_value:.2g}, Holm over {len(tested)} at {alpha:g})")
        elif reject:
            out[i] = replace(c, reason=f"{c.reason}: significant (p = {c.p_value:.2g}) but "
                             "under the suite's tolerance")
        else:
            out[i] = replace(c, reason=f"{c.reason}: within the noise (p = {c.p_value:.2g})")
    return out


def rounded(x: float | None, digits: int = 6) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)

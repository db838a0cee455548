"""A night against the baseline: one check per gradient, prediction, graph link, transaction's
dominant causal path and link's SNAP class, each with both values, the test and its verdict.

Verdicts: `regression` (fails the night), `pass`, `new` (measured tonight only: not a failure
in itself; a new link is, and the link check says so), `skipped` (not judged, with why).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from coordinator.config.suite import (
    Checks,
    GradientCheck,
    LinkCheck,
    PathCheck,
    PredictionCheck,
    SnapCheck,
)
from coordinator.regress.measures import (
    GradientMeasure,
    LinkMeasure,
    NightMeasures,
    PathMeasure,
    PatternCount,
    PredictionMeasure,
    SnapMeasure,
)
from coordinator.regress.stats import drop_p, holm, se_from_ci95, welch_p

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
    baseline: dict[str, Any] = field(default_factory=dict)
    current: dict[str, Any] = field(default_factory=dict)
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

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, **self.subject, "verdict": self.verdict,
                "reason": self.reason, "baseline": self.baseline, "current": self.current,
                "change": _rounded(self.change), "p_value": _rounded(self.p_value, 8)}


def compare(baseline: NightMeasures, current: NightMeasures, checks: Checks) -> list[Check]:
    """Every check of the night, in a stable order (kind, then subject). Only experiments
    both nights ran are compared: one the suite gained or lost is said, not judged (its
    links would all be "new")."""
    before, now = experiments_of(baseline), experiments_of(current)
    out: list[Check] = [
        Check("experiment", {"experiment": e}, "new" if e in now else "skipped",
              "not in the baseline: accept a night with it (--accept)" if e in now
              else "in the baseline, not run tonight (no longer in the suite)")
        for e in sorted(before ^ now)]
    baseline, current = only(baseline, before & now), only(current, before & now)
    if checks.gradients.enabled:
        out += _gradients(baseline.gradients, current.gradients, checks.gradients)
    if checks.predictions.enabled:
        out += _predictions(baseline.predictions, current.predictions, checks.predictions,
                            current.problems)
    if checks.links.enabled:
        out += _links(baseline.links, current.links, checks.links)
    if checks.paths.enabled:
        out += _paths(baseline, current, checks.paths)
    if checks.snap.enabled:
        out += _snap(baseline, current, checks.snap)
    return out


def experiments_of(m: NightMeasures) -> set[str]:
    """The experiments a night measured (whatever evidence each kept)."""
    kinds = (m.gradients, m.predictions, m.links, m.paths, m.snap)
    return ({x.experiment for kind in kinds for x in kind}
            | set(m.without_paths) | set(m.without_snap))


def only(m: NightMeasures, experiments: set[str]) -> NightMeasures:
    """`m` restricted to `experiments` (its problems kept whole)."""
    def mine(x: Any) -> bool:
        return (x if isinstance(x, str) else x.experiment) in experiments

    return NightMeasures(**{name: tuple(filter(mine, getattr(m, name)))
                            for name in type(m).model_fields if name != "problems"},
                         problems=m.problems)


def _paired(before: Iterable[M], now: Iterable[M]) -> list[tuple[M | None, M | None]]:
    """Both nights' measures by key, in key order (one side None where the other has it)."""
    a = {m.key: m for m in before}
    b = {m.key: m for m in now}
    return [(a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys())]


def _holm_verdicts(found: list[Check], alpha: float, big_enough: Callable[[Check], bool]
                   ) -> list[Check]:
    """Checks carrying a p-value (verdict still open: "pass") become regressions where Holm
    rejects at `alpha` and the change is large enough to matter."""
    tested = [i for i, c in enumerate(found) if c.p_value is not None and c.verdict == "pass"
              and math.isfinite(c.p_value)]  # a NaN would count as rejected
    rejected = holm([found[i].p_value or 0.0 for i in tested], alpha)
    out = list(found)
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


def _gradients(before: Sequence[GradientMeasure], now: Sequence[GradientMeasure],
               tolerance: GradientCheck) -> list[Check]:
    found = []
    for a, b in _paired(before, now):
        m = a or b
        assert m is not None
        subject = {"experiment": m.experiment, "transaction": m.transaction, "link": m.link}
        base, cur = _gradient_values(a), _gradient_values(b)
        if a is None or a.gradient is None or a.ci95 is None:
            verdict: Verdict = "new" if b is not None and b.gradient is not None else "skipped"
            found.append(Check("gradient", subject, verdict, "no gradient in the baseline",
                               base, cur))
        elif b is None or b.gradient is None or b.ci95 is None:
            why = ("the link was not measured tonight" if b is None else
                   "no gradient tonight (too few of its requests)")
            found.append(Check("gradient", subject, "regression", why, base, cur))
        else:
            p = welch_p(a.gradient, se_from_ci95(a.ci95, a.dof), a.dof,
                        b.gradient, se_from_ci95(b.ci95, b.dof), b.dof)
            found.append(Check("gradient", subject, "pass",
                               f"{a.gradient:.3g} then, {b.gradient:.3g} now", base, cur,
                               b.gradient - a.gradient, p))
    return _holm_verdicts(found, tolerance.alpha,
                          lambda c: abs(c.change or 0.0) >= tolerance.min_change)


def _gradient_values(m: GradientMeasure | None) -> dict[str, Any]:
    if m is None:
        return {}
    return {"gradient": m.gradient, "ci95": list(m.ci95) if m.ci95 else None,
            "magnitude_ms": m.magnitude_ms}


def _predictions(before: Sequence[PredictionMeasure], now: Sequence[PredictionMeasure],
                 tolerance: PredictionCheck, problems: Sequence[str] = ()) -> list[Check]:
    found = []
    for a, b in _paired(before, now):
        m = a or b
        assert m is not None
        subject = {"experiment": m.experiment, "placement": m.placement,
                   "transaction": m.transaction}
        base, cur = _prediction_values(a), _prediction_values(b)
        if a is None:
            found.append(Check("prediction", subject, "new", "no prediction in the baseline",
                               base, cur))
        elif b is None:
            why = next((p for p in problems if f"placement {m.placement} " in p),
                       "no prediction tonight (its gradients were not measured)")
            found.append(Check("prediction", subject, "regression", why, base, cur))
        else:
            p = welch_p(a.predicted_ms, a.se_ms, None, b.predicted_ms, b.se_ms, None)
            found.append(Check("prediction", subject, "pass",
                               f"{a.predicted_ms:.1f} ms then, {b.predicted_ms:.1f} ms now",
                               base, cur, b.predicted_ms - a.predicted_ms, p))

    def big_enough(c: Check) -> bool:
        least = max(tolerance.min_change_ms,
                    tolerance.min_change_fraction * abs(c.baseline["predicted_ms"]))
        return abs(c.change or 0.0) >= least
    return _holm_verdicts(found, tolerance.alpha, big_enough)


def _prediction_values(m: PredictionMeasure | None) -> dict[str, Any]:
    if m is None:
        return {}
    return {"predicted_ms": round(m.predicted_ms, 3), "se_ms": round(m.se_ms, 3),
            "current_ms": round(m.current_ms, 3)}


def _links(before: Sequence[LinkMeasure], now: Sequence[LinkMeasure], tolerance: LinkCheck
           ) -> list[Check]:
    found = []
    there, gone = tolerance.min_messages, tolerance.min_messages * ABSENT_FRACTION
    for a, b in _paired(before, now):
        m = a or b
        assert m is not None
        was, is_ = (a.messages if a else 0), (b.messages if b else 0)
        values = ({"messages": was}, {"messages": is_})
        if was < gone and is_ >= there:
            verdict: Verdict = "regression"
            why = f"a new link: {is_} messages in the passive phase, {was} in the baseline's"
        elif was >= there and is_ < gone:
            verdict = "regression"
            why = f"the link vanished: {is_} messages in the passive phase, {was} in the baseline's"
        else:
            verdict, why = "pass", f"{was} messages then, {is_} now"
        found.append(Check("link", {"experiment": m.experiment, "link": m.link}, verdict, why,
                           *values, change=float(is_ - was)))
    return found


def _paths(baseline: NightMeasures, current: NightMeasures, tolerance: PathCheck
           ) -> list[Check]:
    found = _unjudged(baseline.without_paths, current.without_paths, "path",
                      "no causal paths")
    for a, b in _paired(baseline.paths, current.paths):
        m = a or b
        assert m is not None
        if m.experiment in current.without_paths or m.experiment in baseline.without_paths:
            continue
        found.append(_path_check(a, b, tolerance))
    return _holm_verdicts(found, tolerance.alpha,
                          lambda c: -(c.change or 0.0) >= tolerance.min_share_change)


def _path_check(a: PathMeasure | None, b: PathMeasure | None, tolerance: PathCheck) -> Check:
    m = a or b
    assert m is not None
    subject = {"experiment": m.experiment, "transaction": m.transaction}
    base, cur = _path_values(a), _path_values(b)
    least = tolerance.min_requests
    if a is None or b is None or a.requests < least or b.requests < least:
        counts = f"{a.requests if a else 0} then, {b.requests if b else 0} now"
        return Check("path", subject, "skipped",
                     f"too few traced requests to judge ({counts}; {least} needed)", base, cur)
    then, now = _dominant(a), _dominant(b)
    kept = next((p.count for p in b.patterns if p.key == then.key), 0)
    share_then, share_now = then.count / a.requests, kept / b.requests
    if now.key == then.key:
        return Check("path", subject, "pass",
                     f"the same dominant path ({share_then:.0%} then, {share_now:.0%} now)",
                     base, cur, share_now - share_then)
    return Check("path", subject, "pass",
                 f"another path is now the commonest ({now.count / b.requests:.0%}); the "
                 f"baseline's fell from {share_then:.0%} to {share_now:.0%}"
                 f"{_crossings_change(then, now)}",
                 base, cur, share_now - share_then,
                 drop_p(then.count, a.requests, kept, b.requests))


def _dominant(m: PathMeasure) -> PatternCount:
    return max(m.patterns, key=lambda p: p.count)


def _crossings_change(then: PatternCount, now: PatternCount) -> str:
    """`; crossings app1->db 3 -> 4` for each host link whose crossings differ."""
    moved = [f"{link} {_g(then.crossings.get(link, 0.0))} -> {_g(now.crossings.get(link, 0.0))}"
             for link in sorted(then.crossings.keys() | now.crossings.keys())
             if abs(then.crossings.get(link, 0.0) - now.crossings.get(link, 0.0)) > 1e-6]
    return f"; crossings {', '.join(moved)}" if moved else ""


def _g(x: float) -> str:
    return f"{x:.3g}"


def _path_values(m: PathMeasure | None) -> dict[str, Any]:
    if m is None or not m.patterns:
        return {"requests": m.requests if m else 0}
    top = _dominant(m)
    return {"requests": m.requests, "dominant": top.key, "count": top.count,
            "crossings": top.crossings}


def _snap(baseline: NightMeasures, current: NightMeasures, tolerance: SnapCheck
          ) -> list[Check]:
    found = _unjudged(baseline.without_snap, current.without_snap, "snap", "no SNAP profile")
    there, gone = tolerance.min_rate, tolerance.min_rate * ABSENT_FRACTION
    for a, b in _paired(baseline.snap, current.snap):
        m = a or b
        assert m is not None
        if m.experiment in current.without_snap or m.experiment in baseline.without_snap:
            continue
        rate_a, rate_b = _rates(a), _rates(b)
        for name in sorted(rate_a.keys() | rate_b.keys()):
            was, is_ = rate_a.get(name, 0.0), rate_b.get(name, 0.0)
            if max(was, is_) < gone:
                continue
            if was < gone and is_ >= there:
                verdict: Verdict = "regression"
                why = (f"a new SNAP class on the link: {is_:.3g} connection-seconds per second "
                       f"of the passive phase, {was:.3g} in the baseline's")
            elif was >= there and is_ < gone:
                verdict, why = "pass", f"gone from the link ({was:.3g} then, {is_:.3g} now)"
            else:
                verdict, why = "pass", f"{was:.3g} then, {is_:.3g} now (per second)"
            found.append(Check("snap", {"experiment": m.experiment, "link": m.link,
                                        "class": name}, verdict, why,
                               {"rate": round(was, 4)}, {"rate": round(is_, 4)}, is_ - was))
    return found


def _rates(m: SnapMeasure | None) -> dict[str, float]:
    return {} if m is None else {k: s / m.window_s for k, s in m.seconds.items()}


def _unjudged(before: Sequence[str], now: Sequence[str], kind: Kind, what: str
              ) -> list[Check]:
    """For each experiment one of whose nights kept no such evidence: evidence the baseline
    has and tonight lacks is a regression (a capture that broke must not pass unseen), the
    other way round a skip."""
    out = []
    for e in sorted(set(before) | set(now)):
        if e in now and e not in before:
            out.append(Check(kind, {"experiment": e}, "regression",
                             f"{what} tonight, where the baseline has them (the capture failed "
                             "or was turned off: accept a new baseline if that was meant)"))
        else:
            out.append(Check(kind, {"experiment": e}, "skipped",
                             f"{what} {'tonight' if e in now else 'in the baseline'} (not "
                             "enabled in the experiment, or nothing was captured)"))
    return out


def _rounded(x: float | None, digits: int = 6) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)

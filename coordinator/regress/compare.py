"""A night against the baseline: one check per gradient, prediction, graph link, transaction's
dominant causal path and link's SNAP class, each with both values, the test and its verdict
(`check` says the verdicts; the passive evidence's checks are `evidence_checks`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinator.config.suite import Checks, GradientCheck, PredictionCheck
from coordinator.regress.check import Check, Verdict, holm_verdicts, paired
from coordinator.regress.evidence_checks import link_checks, path_checks, snap_checks
from coordinator.regress.measures import GradientMeasure, NightMeasures, PredictionMeasure
from coordinator.regress.stats import se_from_ci95, welch_p
from coordinator.regress.values import CheckValues, GradientValues, NoValues, PredictionValues


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
        out += link_checks(baseline.links, current.links, checks.links)
    if checks.paths.enabled:
        out += path_checks(baseline, current, checks.paths)
    if checks.snap.enabled:
        out += snap_checks(baseline, current, checks.snap)
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


def _gradients(before: Sequence[GradientMeasure], now: Sequence[GradientMeasure],
               tolerance: GradientCheck) -> list[Check]:
    found = []
    for a, b in paired(before, now):
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
    return holm_verdicts(found, tolerance.alpha,
                          lambda c: abs(c.change or 0.0) >= tolerance.min_change)


def _gradient_values(m: GradientMeasure | None) -> CheckValues:
    if m is None:
        return NoValues()
    return GradientValues(gradient=m.gradient, ci95=m.ci95, magnitude_ms=m.magnitude_ms)


def _predictions(before: Sequence[PredictionMeasure], now: Sequence[PredictionMeasure],
                 tolerance: PredictionCheck, problems: Sequence[str] = ()) -> list[Check]:
    found = []
    for a, b in paired(before, now):
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
        assert isinstance(c.baseline, PredictionValues)  # judged: both nights predicted
        least = max(tolerance.min_change_ms,
                    tolerance.min_change_fraction * abs(c.baseline.predicted_ms))
        return abs(c.change or 0.0) >= least
    return holm_verdicts(found, tolerance.alpha, big_enough)


def _prediction_values(m: PredictionMeasure | None) -> CheckValues:
    if m is None:
        return NoValues()
    return PredictionValues(predicted_ms=round(m.predicted_ms, 3), se_ms=round(m.se_ms, 3),
                            current_ms=round(m.current_ms, 3))



"""What `linkgrad predict` answers (`--json` prints it as is): per placement, each pair's
latency change and every transaction's prediction with its terms and notes, and with
`--validate` what the live system measured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.cli.answer import Answer, absent_when_none
from coordinator.config.run_inputs import RunInputs, pair_names
from coordinator.config.run_records import Pair
from linkgrad.prediction import Estimate, Prediction

if TYPE_CHECKING:  # paramiko is slow to load: the live part is imported when validating
    from coordinator.live.validate import ValidatedTransaction, Validation

__all__ = ["LatencyChange", "PlacementAnswer", "PredictAnswer", "Term",
           "TransactionPrediction", "ValidatedAnswer", "ValidationAnswer", "passive_note",
           "passive_used"]


class LatencyChange(Answer):
    mean: float
    se: float

    @classmethod
    def of(cls, e: Estimate, digits: int) -> LatencyChange:
        return cls(mean=round(e.mean, digits), se=round(e.se, digits))


def _pairs(changes: dict[Pair, Estimate], digits: int) -> dict[str, LatencyChange]:
    return {f"{a}->{b}": LatencyChange.of(d, digits) for (a, b), d in sorted(changes.items())}


class Term(Answer):
    """One host pair's share of a transaction's change: gradient × latency change, plus
    curvature × its square where the run measured the pair at several delays."""

    link: str
    gradient: float
    gradient_se: float
    delta_ms: float
    delta_se_ms: float
    change_ms: float
    curvature_per_ms: float | None = absent_when_none()
    curvature_se: float | None = absent_when_none()
    passive: bool | None = absent_when_none()  # true: explain.json's passive gradient


class TransactionPrediction(Answer):
    current_ms: float
    current_se_ms: float
    predicted_ms: float
    se_ms: float
    ci95: tuple[float, float]
    change_ms: float
    terms: list[Term]
    notes: list[str]

    @classmethod
    def of(cls, p: Prediction, run: RunInputs, changes: dict[Pair, Estimate]
           ) -> TransactionPrediction:
        lo, hi = p.ci95
        passive = run.passive_pairs(p.transaction)
        return cls(
            current_ms=round(p.current_ms.mean, 3), current_se_ms=round(p.current_ms.se, 3),
            predicted_ms=round(p.predicted_ms, 3), se_ms=round(p.se_ms, 3),
            ci95=(round(lo, 3), round(hi, 3)),
            change_ms=round(p.predicted_ms - p.current_ms.mean, 3),
            terms=[Term(link=f"{t.pair[0]}->{t.pair[1]}", gradient=round(t.gradient.mean, 4),
                        gradient_se=round(t.gradient.se, 4),
                        delta_ms=round(t.delta_ms.mean, 3),
                        delta_se_ms=round(t.delta_ms.se, 3), change_ms=round(t.change_ms, 3),
                        **({"curvature_per_ms": round(t.curve.curvature.mean, 6),
                            "curvature_se": round(t.curve.curvature.se, 6)}
                           if t.curve.curvature.se else {}),
                        **({"passive": True} if t.pair in passive else {}))
                   for t in p.terms],
            notes=_notes(p, run, changes))


def passive_used(p: Prediction, run: RunInputs) -> set[Pair]:
    """The pairs of `p`'s terms whose gradient is passive (explain.json's)."""
    return {t.pair for t in p.terms} & run.passive_pairs(p.transaction)


def passive_note(pairs: set[Pair]) -> str:
    return (f"uses passive gradients for {', '.join(pair_names(pairs))} (explain.json's "
            "causal paths, not measured)")


def _notes(p: Prediction, run: RunInputs, changes: dict[Pair, Estimate]) -> list[str]:
    """What the prediction lacks, which gradients are passive, where it is curved, and where
    it extrapolates."""
    mine = run.gradients.get(p.transaction, {})
    passive = passive_used(p, run)
    lacking = sorted(pair for pair, d in changes.items()
                     if d.mean and pair not in mine and _measured(run, pair))
    return (
        [f"no gradient of {p.transaction} on {a}->{b} (too few of its requests during "
         "that measurement): its change there is missing" for a, b in lacking]
        + ([passive_note(passive)] if passive else [])
        + [f"{a}->{b} is not linear: {t.curve.curvature.mean:+.4f} ms per ms² (measured at "
           "several delays), used in the prediction" for t in p.terms for a, b in [t.pair]
           if abs(t.curve.curvature.mean) > 2 * t.curve.curvature.se > 0]
        + [f"{a}->{b} changes by {t.delta_ms.mean:+.1f} ms, beyond the "
           f"{run.measured_ms[t.pair]:g} ms its gradient was measured with: the linear "
           "relation is extrapolated (measure with a larger delay to check it holds; "
           "thesis ch. 6)"
           for t in p.terms for a, b in [t.pair]
           if t.pair in run.measured_ms and abs(t.delta_ms.mean) > run.measured_ms[t.pair]])


def _measured(run: RunInputs, pair: Pair) -> bool:
    return any(pair in per_pair for per_pair in run.gradients.values())


class ValidatedAnswer(Answer):
    """A transaction measured under the placement, against its remade prediction."""

    current_ms: float
    predicted_ms: float
    ci95: tuple[float, float]
    measured_ms: float
    measured_se_ms: float
    error: float | None  # relative to the measured mean; none of a mean of 0
    inside: bool
    inside_mean_ci: bool

    @classmethod
    def of(cls, t: ValidatedTransaction) -> ValidatedAnswer:
        m = t.measured
        return cls(current_ms=round(t.current_ms, 3), predicted_ms=round(t.predicted_ms, 3),
                   ci95=(round(t.ci95[0], 3), round(t.ci95[1], 3)),
                   measured_ms=round(m.mean, 3), measured_se_ms=round(m.se, 3),
                   error=round((m.mean - t.predicted_ms) / m.mean, 4) if m.mean else None,
                   inside=t.inside, inside_mean_ci=t.inside_mean_ci)


class ValidationAnswer(Answer):
    window_s: float
    cycles: int
    transactions: dict[str, ValidatedAnswer]
    applied_ms: dict[str, LatencyChange]  # the latency changes the injector actually made

    @classmethod
    def of(cls, v: Validation, cycles: int) -> ValidationAnswer:
        return cls(window_s=v.window_s, cycles=cycles,
                   transactions={n: ValidatedAnswer.of(t) for n, t in v.transactions.items()},
                   applied_ms=_pairs(v.applied_ms, 4))


class PlacementAnswer(Answer):
    placement: str  # the placement file
    move: dict[str, str]  # host -> its new site
    latency_changes_ms: dict[str, LatencyChange]
    transactions: dict[str, TransactionPrediction]
    passive_pairs: list[str]  # pairs whose passive gradient (explain.json) a prediction uses
    validation: ValidationAnswer | None = absent_when_none()

    @classmethod
    def of(cls, source: str, move: dict[str, str], changes: dict[Pair, Estimate],
           predictions: dict[str, Prediction], run: RunInputs) -> PlacementAnswer:
        passive = {pair for p in predictions.values() for pair in passive_used(p, run)}
        return cls(placement=source, move=move, latency_changes_ms=_pairs(changes, 3),
                   passive_pairs=pair_names(passive),
                   transactions={n: TransactionPrediction.of(p, run, changes)
                                 for n, p in sorted(predictions.items())})


class PredictAnswer(Answer):
    run: str  # the run directory
    placements: list[PlacementAnswer]
    latencies_note: str | None = absent_when_none()  # where latencies came from the paths

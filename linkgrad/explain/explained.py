"""One (transaction, link) explained: both gradients, the verdict and its causes."""

from __future__ import annotations

from dataclasses import dataclass

from linkgrad.explain.calibration import Calibrated, Calibration, calibrate, combine
from linkgrad.explain.evidence import LinkEvidence
from linkgrad.explain.passive import PassiveGradient
from linkgrad.explain.verdict import (
    Cause,
    Verdict,
    causes_above,
    causes_below,
    judge,
    noise,
)

__all__ = ["Explained", "explain"]


@dataclass(frozen=True)
class Explained:
    transaction: str
    link: str  # the run's label
    pair: str  # its host pair, "src->dst", as the paths count crossings
    gradient: float | None  # None: not injected
    ci95: tuple[float, float] | None
    passive: PassiveGradient | None  # None: no paths for the transaction or the pair
    calibrated: Calibrated | None  # the passive gradient as an estimate (None: no calibration)
    combined: Calibrated | None  # both halves in one, where they agree
    verdict: Verdict
    causes: tuple[Cause, ...]  # for above and below: what the evidence names, else unexplained
    notes: tuple[str, ...] = ()  # the estimate's own (a wide interval, a drift, ...)

    @property
    def cause(self) -> str | None:
        return "; ".join(c.text for c in self.causes) or None


def explain(transaction: str, link: str, pair: str, gradient: float | None,
            ci95: tuple[float, float] | None, passive: PassiveGradient | None,
            evidence: LinkEvidence | None, notes: tuple[str, ...] = (),
            calibration: Calibration | None = None, dof: int | None = None,
            clear: bool = True) -> Explained:
    """The verdict compares the gradient with the crossings the paths counted (what TCP and
    the hosts add beyond the messages is the cause to find); the calibration makes the
    passive gradient an estimate, and, where the two agree and the paths are `clear` (not
    mixed, not unstable: passive-first's own test), a prior for the measurement. A wide
    measurement agrees with anything: where the paths are ambiguous their count may be
    wrong in a way the calibration's points never showed (a parallel branch's critical path
    misread), and the measurement alone answers."""
    verdict = judge(gradient, ci95, passive)
    calibrated = calibrate(passive, calibration) if passive and calibration else None
    combined = None
    if verdict == "agree" and clear and calibrated is not None and gradient is not None:
        combined = combine(gradient, ci95 or (gradient, gradient), calibrated, dof)
    causes: list[Cause] = []
    if verdict in ("above", "below"):
        if evidence is not None:
            causes = (causes_above if verdict == "above" else causes_below)(evidence)
        causes = causes or [Cause("unexplained", "unexplained: no passive evidence accounts "
                                  f"for a gradient {verdict} the paths' crossings")]
        if (chance := noise(notes)) is not None:
            causes.append(chance)
    return Explained(transaction=transaction, link=link, pair=pair, gradient=gradient,
                     ci95=ci95, passive=passive, calibrated=calibrated, combined=combined,
                     verdict=verdict, causes=tuple(causes), notes=notes)

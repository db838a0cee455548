"""A run explained, typed: `explain.json`, `linkgrad explain --json` and `report --json` print
this model; the terminal's table and the report read its attributes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from linkgrad.explain.calibration import measured_se
from linkgrad.explain.explained import Explained
from linkgrad.hostprobe.load import HostLoad

__all__ = ["CauseRow", "ExplainRow", "Explanation", "RunSummary"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CauseRow(_Model):
    kind: str
    text: str


class ExplainRow(_Model):
    transaction: str
    link: str  # the run's label
    pair: str  # its host pair, as the paths count crossings
    gradient: float | None  # None: not injected, or its requests gave none
    ci95: tuple[float, float] | None
    gradient_se: float | None  # read off ci95 with its degrees of freedom
    # the passive gradient as an estimate of the gradient: the crossings calibrated (the
    # crossings alone where no calibration is at hand); None: no causal paths for it
    passive_gradient: float | None
    passive_ci95: tuple[float, float] | None
    crossings: float | None  # the paths' count on the critical path, the verdict's reference
    crossings_ci95: tuple[float, float] | None
    passive_requests: int | None  # the transaction's traced requests
    combined: float | None  # both halves in one, where they agree and a calibration exists
    combined_ci95: tuple[float, float] | None
    snap: dict[str, float] | None  # Table 2 class -> seconds while the link was measured
    hosts: dict[str, HostLoad] | None  # the link's hosts while it was measured
    verdict: str
    cause: str | None  # the causes in one sentence (above and below only)
    causes: list[CauseRow]
    notes: list[str]  # the estimate's own

    @classmethod
    def of(cls, e: Explained, snap: dict[str, float] | None,
           hosts: dict[str, HostLoad] | None, dof: int | None = None) -> ExplainRow:
        p, c = e.passive, e.calibrated
        as_estimate = (c.estimate, c.ci95) if c else (p.estimate, p.ci95) if p else None
        return cls(transaction=e.transaction, link=e.link, pair=e.pair,
                   gradient=e.gradient, ci95=e.ci95,
                   gradient_se=_round(measured_se(e.ci95, dof)) if e.ci95 else None,
                   passive_gradient=_round(as_estimate[0]) if as_estimate else None,
                   passive_ci95=_interval(as_estimate[1]) if as_estimate else None,
                   crossings=_round(p.estimate) if p else None,
                   crossings_ci95=_interval(p.ci95) if p else None,
                   passive_requests=p.requests if p else None,
                   combined=_round(e.combined.estimate) if e.combined else None,
                   combined_ci95=_interval(e.combined.ci95) if e.combined else None,
                   snap=snap, hosts=hosts,
                   verdict=e.verdict, cause=e.cause,
                   causes=[CauseRow(kind=c.kind, text=c.text) for c in e.causes],
                   notes=list(e.notes))


def _round(x: float) -> float:
    return round(x, 4)


def _interval(ci: tuple[float, float]) -> tuple[float, float]:
    return round(ci[0], 4), round(ci[1], 4)


class RunSummary(_Model):
    experiment: str
    application: str  # as the calibration groups runs (the experiment's, else its name)
    run_dir: str
    status: str  # run.json's, or "interrupted"
    reason: str | None
    started: float  # Unix s
    ended: float | None
    duration_s: float | None
    hosts: list[str]
    graph_links: int
    injected_links: int  # of the graph's (and any the experiment named beside it)
    traced_requests: dict[str, int]  # per transaction, in the causal paths
    verdicts: dict[str, int]
    calibration: str | None  # the passive side's, as used (None: too few points anywhere)
    strategy: str  # active, or what passive-first left passive
    findings: list[str]  # what matters most, a sentence each
    next_step: str


class Explanation(_Model):
    summary: RunSummary
    rows: list[ExplainRow]

    def shared_notes(self) -> list[str]:
        """The notes every measured row has: said once, not on every row."""
        measured = [r for r in self.rows if r.gradient is not None]
        if len(measured) < 2:
            return []
        return [n for n in measured[0].notes if all(n in r.notes for r in measured[1:])]

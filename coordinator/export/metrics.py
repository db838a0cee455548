"""A run's results as metric families, before any exposition format: each link's gradient
per transaction with its 95% interval, SNAP's time per TCP class and phase, and which run the
file came from. Pure; `prometheus` writes them, `host_metrics` adds the hosts.

Every series carries an `experiment` label: node_exporter's textfile collector merges every
file of its directory, and two experiments' files must never give the same series twice (it
would refuse the metric). The values are the run's last state (each link's last measurement)
or totals per phase under a `phase` label; none has a timestamp (the collector refuses them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from coordinator.export.source import RunExport

__all__ = ["Family", "run_families"]

Kind = Literal["counter", "gauge", "untyped"]


@dataclass(frozen=True)
class Family:
    """One metric: its name, type, help and label names, and a value per label-value tuple."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    samples: dict[tuple[str, ...], float] = field(default_factory=dict)

    def add(self, values: tuple[str, ...], value: float) -> None:
        """Adds `value` to the sample (a counter integrated report by report)."""
        self.samples[values] = self.samples.get(values, 0.0) + value


def _gradients(run: RunExport) -> list[Family]:
    labels = ("experiment", "transaction", "link")
    what = ("each link's last measurement: d(mean response time of the transaction) / "
            "d(one-way latency of the link), dimensionless")
    gradient = Family("linkgrad_gradient", "gauge", f"Link gradient, {what}", labels)
    low = Family("linkgrad_gradient_ci_low", "gauge",
                 "Lower end of the link gradient's 95% confidence interval", labels)
    high = Family("linkgrad_gradient_ci_high", "gauge",
                  "Upper end of the link gradient's 95% confidence interval", labels)
    for m in run.last_per_link():
        for name, t in sorted(m.transactions.items()):
            key = (run.experiment, name, m.link.label)
            if t.gradient is not None:  # no estimate (too few requests): no sample, not 0
                gradient.samples[key] = t.gradient
            if t.ci95 is not None:
                low.samples[key], high.samples[key] = t.ci95
    return [gradient, low, high]


def _snap(run: RunExport) -> Family:
    snap = Family("linkgrad_snap_seconds", "gauge",
                  "Seconds the link's connections spent in each SNAP class (Table 2) during "
                  "the phase (passive, measurement), from the link's last measurement",
                  ("experiment", "link", "class", "phase"))
    for m in run.last_per_link():
        for phase, classes in sorted((m.snap or {}).items()):
            for name, seconds in sorted(classes.items()):
                snap.samples[(run.experiment, m.link.label, name, phase)] = seconds
    return snap


def _run_info(run: RunExport) -> Family:
    status = run.journal.status if run.journal else "unknown"
    return Family("linkgrad_run_info", "gauge",
                  "The run these series come from (its directory's name) and how it ended",
                  ("experiment", "run", "status"), {(run.experiment, run.run, status): 1.0})


def run_families(run: RunExport) -> list[Family]:
    """The run's own families (gradients, SNAP, the run); those without a sample left out."""
    families = [_run_info(run), *_gradients(run), _snap(run)]
    return [f for f in families if f.samples]

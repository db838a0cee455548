"""A run's metric families as Prometheus's text exposition, through prometheus_client: a
collector of our own on a registry of our own (never the process's global one), for
`write_to_textfile` into node_exporter's textfile directory. No sample has a timestamp: the
textfile collector refuses them, and the file's mtime is what says how old it is
(`node_textfile_mtime_seconds`)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector

from coordinator.export.host_metrics import host_families
from coordinator.export.metrics import Family, run_families
from coordinator.export.source import RunExport

__all__ = ["RunCollector", "exposition", "families", "registry_of"]

_TYPES = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily,
          "untyped": UnknownMetricFamily}


def families(run: RunExport) -> list[Family]:
    """Every family the run gives: its own, then its hosts' (if it probed them)."""
    hosts = host_families(run.hosts, run.experiment) if run.hosts else []
    return [*run_families(run), *hosts]


def _metric(family: Family) -> Metric:
    metric = _TYPES[family.kind](family.name, family.help, labels=list(family.labels))
    for values, value in sorted(family.samples.items()):
        metric.add_metric(list(values), value)
    return metric


class RunCollector(Collector):
    """A run's families (built once: a registry calls `collect` at every exposition)."""

    def __init__(self, built: list[Family]) -> None:
        self._families = built

    def collect(self) -> Iterator[Metric]:
        return (_metric(f) for f in self._families)


def registry_of(built: list[Family]) -> CollectorRegistry:
    """A registry of its own (never prometheus_client's global one) holding `built`."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(RunCollector(built))
    return registry


def exposition(registry: CollectorRegistry) -> str:
    """The text format `write_to_textfile` writes."""
    return generate_latest(registry).decode()

"""A placement file applied to a run: each host pair's change of one-way latency, checked
against the sites the latencies file knows and the links the run measured (`linkgrad predict`
and the nightly regression's predictions)."""

from __future__ import annotations

from pathlib import Path

from coordinator.config.latencies import (
    Latencies,
    Placement,
    latency_changes,
    load_placement,
    placement_site_problems,
)
from coordinator.config.run_inputs import RunInputs, require_measured
from coordinator.config.run_records import Pair
from linkgrad.errors import InputError
from linkgrad.prediction import Estimate


def placement_changes(run: RunInputs, latencies: Latencies, latencies_path: Path,
                      placement_path: Path, known_sites: set[str]
                      ) -> tuple[Placement, dict[Pair, Estimate]]:
    """The placement in `placement_path` and every pair's latency change under it; InputError
    for a site no latency reaches, or a changed pair that carried traffic unmeasured."""
    placement = load_placement(placement_path)
    if problems := placement_site_problems(placement, placement_path, known_sites,
                                           str(latencies_path)):
        raise InputError(problems)
    changes = latency_changes(run.hosts, latencies, placement, str(latencies_path),
                              placement_path)
    require_measured(run, changes, "in this placement", str(placement_path), "move")
    return placement, changes

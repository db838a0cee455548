"""Current one-way latencies from a run's causal paths, for `predict`, `place` and `route`
without a latencies file: every hop of a pattern in `paths.json` carries its measured network
delay; every host is then its own site.

`path_latencies` is pure; `run_latencies` reads the files and says where each came from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coordinator.config.latencies import MAX_LATENCY_MS, Latencies, Latency, load_latencies
from coordinator.config.paths_file import read_paths_file
from linkgrad.errors import InputError, Problem
from linkgrad.paths.result import PathsResult
from linkgrad.prediction import Estimate

__all__ = ["LatencySource", "PathLatencies", "link_delays", "path_latencies", "run_latencies"]


def link_delays(paths: Iterable[PathsResult]) -> dict[tuple[str, str], Estimate]:
    """(src, dst) -> the count-weighted mean network delay (ms) of the link's hops over the
    patterns, its standard error from the spread between hops (weights normalised:
    se² = k/(k−1)·Σ w²(x − mean)²). One hop alone gives no spread: its se is its mean, a
    100% uncertainty rather than a claimed 0."""
    seen: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for result in paths:
        for pattern in result.patterns:
            for hop in pattern.hops:
                src, arrow, dst = hop.link.partition("->")
                delay = hop.network_delay_s
                if arrow and src != dst and delay is not None and math.isfinite(delay) \
                        and pattern.count > 0:
                    seen.setdefault((src, dst), []).append((1000.0 * delay, pattern.count))
    out = {}
    for link, points in seen.items():
        x, w = np.array(points).T
        w = w / w.sum()
        mean = float(np.sum(w * x))
        k = len(x)
        se = math.sqrt(k / (k - 1) * float(np.sum(w**2 * (x - mean) ** 2))) if k > 1 \
            else abs(mean)
        out[link] = Estimate(mean, se)
    return out


@dataclass(frozen=True)
class PathLatencies:
    latencies: Latencies  # every host its own site
    both_ways: list[str]  # "a<->b" averaged over both directions
    one_way: list[str]  # "a<->b" from one direction alone (the other had no delay)
    same_host: list[str]  # hosts whose latency to themselves is taken as 0 (± the least)


def path_latencies(delays: dict[tuple[str, str], Estimate], hosts: Iterable[str]
                   ) -> PathLatencies:
    """The latencies file the delays make, every host its own site. A one-way delay across
    two hosts' clocks is off by their offset one way and by minus it the other, so each pair
    is the mean of both directions ("a<->b", as `linkgrad latency` gives round trip / 2); a
    pair seen one way only takes that way for both. A host with itself (components moved
    together) is 0 ms: loopback, not measured, so with an se that covers the least
    latency between two hosts."""
    table: dict[str, float | Latency] = {}
    both, one = [], []
    for a, b in sorted({tuple(sorted(link)) for link in delays}):
        there, back = delays.get((a, b)), delays.get((b, a))
        if there is not None and back is not None:
            mean = (there.mean + back.mean) / 2
            se = math.hypot(there.se, back.se) / 2
            both.append(f"{a}<->{b}")
        else:
            e = there or back
            assert e is not None
            mean, se = e.mean, e.se
            one.append(f"{a}<->{b}")
        # clock offsets can leave a mean below 0: no latency is, so it is 0 with its se
        table[f"{a}<->{b}"] = Latency(mean=min(max(mean, 0.0), MAX_LATENCY_MS),
                                      se=min(se, MAX_LATENCY_MS))
    # a host with itself is not in the paths: 0 ms, its se half the least latency between
    # two hosts, so anything from nothing to that is inside its interval
    least = min((e.mean for e in delays.values() if e.mean > 0), default=0.0)
    same = sorted(set(hosts))
    for h in same:
        table.setdefault(f"{h}<->{h}", Latency(mean=0.0, se=min(least / 2, MAX_LATENCY_MS)))
    return PathLatencies(Latencies(latency_ms=table), both, one, same)


@dataclass(frozen=True)
class LatencySource:
    latencies: Latencies
    name: str  # for messages: the latencies file, or the paths.json they came from
    note: str | None  # what to say of latencies taken from the paths


def run_latencies(latencies_file: Path | None, run_dirs: list[Path], hosts: Iterable[str],
                  needed: Iterable[tuple[str, str]]) -> LatencySource:
    """`latencies_file`, or without one the runs' paths.json, asked only for the host pairs
    `needed` (those that carried traffic or have a gradient: hosts that never talked have no
    delay in the paths, and a prediction no use for one); InputError saying what to give
    where a run has no paths.json (or its paths no network delay)."""
    if latencies_file is not None:
        return LatencySource(load_latencies(latencies_file), str(latencies_file), None)
    if not run_dirs:
        raise InputError(Problem(
            "what `linkgrad gradient --json` prints has no causal paths to take the current "
            "latencies from: give --latencies FILE (measure it with `linkgrad latency "
            "EXPERIMENT.yaml --output now.yaml`)", field="--latencies"))
    files = [d / "paths.json" for d in run_dirs]
    missing = [f for f in files if not f.exists()]
    if missing:
        raise InputError([Problem(
            "no paths.json to take the current latencies from: give --latencies FILE "
            "(measure it with `linkgrad latency EXPERIMENT.yaml --output now.yaml`)", str(f),
            field="--latencies") for f in missing])
    delays = link_delays(read_paths_file(f) for f in files)
    if not delays:
        raise InputError(Problem(
            "its causal paths have no network delay (a host not traced, or the clocks not "
            "related): give --latencies FILE (measure it with `linkgrad latency "
            "EXPERIMENT.yaml --output now.yaml`)", ", ".join(map(str, files)), field="--latencies"))
    found = path_latencies(delays, hosts)
    source = " and ".join(map(str, files))
    note = (f"latencies from the causal paths' network delays in {source} (every host its "
            f"own site): {', '.join(found.both_ways)} the mean of both directions"
            if found.both_ways else f"latencies from the causal paths in {source}")
    if found.one_way:
        note += f"; {', '.join(found.one_way)} from one direction only"
    note += ("; a host with itself 0 ms (not measured: ± half the least between two hosts). "
             "Give --latencies to use others.")
    return LatencySource(found.latencies.only_for(needed), source, note)

"""What a prediction needs from a finished run: each transaction's gradient per host pair, the
pairs that carried traffic, and the current mean response times (the passive phase)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import InputError, Problem
from coordinator.core.prediction import Curve, Estimate

Pair = tuple[str, str]


@dataclass(frozen=True)
class RunInputs:
    run_dir: Path
    hosts: list[str]
    gradients: dict[str, dict[Pair, Curve]]  # transaction -> (src, dst) host pair -> curve
    traffic: dict[Pair, set[str]]  # pairs the communication graph saw, with their protocols
    current_ms: dict[str, Estimate]  # transaction -> mean response time now
    requests: dict[str, int]  # transaction -> requests in the passive phase (its mix)
    measured_ms: dict[Pair, float] = field(default_factory=dict)  # largest delay injected
    patterns: dict[str, str] = field(default_factory=dict)  # transaction -> URL regex, if named


def fit_curve(points: list[tuple[float, float, float]]) -> Curve:
    """(delay ms, gradient, its se) of one link at one or more delays -> its curve.

    One delay: the gradient. Several: the effect g·m at each delay m, fitted as
    slope·m + curvature·m² through the origin (no delay, no change) by weighted least squares
    (thesis ch. 6's regression on several magnitudes).
    """
    if len({m for m, _, _ in points}) < 2:
        m, g, se = max(points)  # one delay (repeated: the largest measurement)
        return Curve(Estimate(g, se))
    m = np.array([p[0] for p in points])
    effect = m * np.array([p[1] for p in points])
    weight = 1 / np.maximum(m * np.array([p[2] for p in points]), 1e-9) ** 2
    x = np.column_stack([m, m * m])
    cov = np.linalg.inv(x.T @ (weight[:, None] * x))
    beta = cov @ x.T @ (weight * effect)
    return Curve(Estimate(float(beta[0]), math.sqrt(cov[0, 0])),
                 Estimate(float(beta[1]), math.sqrt(cov[1, 1])), float(cov[0, 1]))


def pair_gradients(links: list[dict[str, Any]]) -> dict[str, dict[Pair, Curve]]:
    """Each link's curve over the delays it was measured at; links between the same two hosts
    (other ports) add up, since a latency is per host pair. A gradient's standard error is its
    effect's over the delay actually injected."""
    points: dict[tuple[str, Pair, str], list[tuple[float, float, float]]] = {}
    for link in links:
        pair = (link["link"]["src_host"], link["link"]["dst_host"])
        magnitude = link["record"]["magnitude_ms"]
        for name, t in link["transactions"].items():
            if t.get("gradient") is None:
                continue
            se = t["se_ms"] / magnitude if t.get("se_ms") is not None else math.inf
            key = (name, pair, link["link"]["label"])
            points.setdefault(key, []).append((magnitude, t["gradient"], se))
    out: dict[str, dict[Pair, Curve]] = {}
    for (name, pair, _), measured in points.items():
        curve, old = fit_curve(measured), out.setdefault(name, {}).get(pair)
        out[name][pair] = curve if old is None else _add(old, curve)
    return out


def _add(a: Curve, b: Curve) -> Curve:
    return Curve(Estimate(a.gradient.mean + b.gradient.mean,
                          math.hypot(a.gradient.se, b.gradient.se)),
                 Estimate(a.curvature.mean + b.curvature.mean,
                          math.hypot(a.curvature.se, b.curvature.se)),
                 a.covariance + b.covariance)


def measured_range(links: list[dict[str, Any]]) -> dict[Pair, float]:
    """Per host pair, the largest delay its gradients were measured with: beyond it, a
    prediction extrapolates the linear relation (thesis ch. 6)."""
    out: dict[Pair, float] = {}
    for link in links:
        pair = (link["link"]["src_host"], link["link"]["dst_host"])
        out[pair] = max(out.get(pair, 0.0), link["record"]["magnitude_ms"])
    return out


def _read(run_dir: Path, name: str, what: str) -> Any:
    path = run_dir / name
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(Problem(f"no {name} ({what}): not a linkgrad run directory, or a run "
                                 "from before it was written", str(path))) from None
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(Problem(f"cannot read {name}: {e}", str(path))) from e


def load_run(gradients_file: Path) -> RunInputs:
    run_dir = gradients_file.parent
    gradients = _read(run_dir, gradients_file.name, "the link gradients")
    graph = _read(run_dir, "graph.json", "the communication graph")
    baseline = _read(run_dir, "baseline.json", "the current response times")
    experiment = _read(run_dir, "experiment.json", "the experiment as run")
    return RunInputs(
        run_dir=run_dir,
        hosts=[h["name"] for h in experiment["hosts"]],
        gradients=pair_gradients(gradients["links"]),
        traffic=_traffic(graph),
        current_ms={name: Estimate(b["mean_ms"], b["se_ms"])
                    for name, b in baseline["transactions"].items()},
        requests={name: b["requests"] for name, b in baseline["transactions"].items()},
        measured_ms=measured_range(gradients["links"]),
        patterns=dict(experiment.get("transactions") or {}),
    )


def _traffic(graph: list[dict[str, Any]]) -> dict[Pair, set[str]]:
    out: dict[Pair, set[str]] = {}
    for g in graph:
        out.setdefault((g["src_host"], g["dst_host"]), set()).add(g["proto"])
    return out


def require_measured(run: RunInputs, changes: dict[Pair, Estimate], why: str,
                     source: str | None = None, field: str | None = None) -> None:
    """InputError naming every link that carried traffic and changes latency (`why`) without
    a measured gradient: a prediction would silently take 0 for it."""
    if missing := unmeasured(run, {p for p, d in changes.items() if d.mean or d.se}):
        raise InputError(Problem(
            f"{', '.join(f'{a}->{b}' for a, b in missing)} carry traffic and change latency "
            f"{why}, but the run measured no gradient on them (measure them: "
            "parameters.include)", source, field=field))


def unmeasured(run: RunInputs, changed: set[Pair]) -> list[Pair]:
    """Pairs whose latency changes and that carried traffic, but whose gradient no link of
    the run measured: a prediction without them would silently assume 0."""
    measured = {pair for per_pair in run.gradients.values() for pair in per_pair}
    return sorted(p for p in changed if p in run.traffic and p not in measured)

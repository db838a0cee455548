"""A run directory: the typed records a run writes (the run journal `run.json`, each link's
measurement in `gradients.json`) and what a prediction reads back from a finished run (each
transaction's gradient per host pair, the pairs that carried traffic, the current means)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.errors import InputError, Problem
from common.protocol.record import InjectionRecord
from coordinator.core.linearity import Linearity, linearity
from coordinator.core.prediction import Curve, Estimate

Pair = tuple[str, str]
Status = Literal["running", "completed", "aborted", "interrupted", "failed"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunJournal(_Record):
    """`run.json`: how the run went (after chaostoolkit's journal)."""

    status: Status
    started: float  # unix s
    links_done: int  # measurements in gradients.json (this run's and resumed ones)
    links_resumed: int = 0  # of them, already there when the run was resumed
    links_planned: int | None = None  # measurements the run set out to make (once planned)
    warnings: list[str] | None = None  # what a daemon could not do
    reason: str | None = None  # why it was aborted or failed
    cleanup_problems: list[str] | None = None  # daemons that did not confirm they stopped
    ended: float | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == "completed" and not self.cleanup_problems


class Perturbation(_Record):
    """What the wave did to the application: its on half-periods against its off ones, at the
    same offered load and interleaved with them (thesis Tables 5.1 and 5.2: throughput and
    response time with and without injection). Throughput counts requests by their start;
    under an open-loop load it falls only when requests are lost, under a closed one (a fixed
    number of users) by about the added response time."""

    throughput_per_s: float  # while on
    throughput_change: float  # on / off - 1
    mean_response_ms: float  # while on
    mean_response_change_ms: float  # on - off
    throughput_off_per_s: float | None = None
    mean_response_off_ms: float | None = None
    throughput_change_se: float | None = None  # Poisson counts: sqrt(1/n_on + 1/n_off)


class WaveEstimate(_Record):
    """One square wave on one link and every transaction's gradient from it."""

    record: InjectionRecord  # DESIGN.md's injection record, at the delay actually applied
    requested_ms: float
    packets_delayed: int
    perturbation: Perturbation
    transactions: dict[str, dict[str, Any]]  # name -> `core.estimate.gradient_json`


class LinkMeasurement(WaveEstimate):
    """An entry of `gradients.json`: a link's measurement, the files that reproduce it."""

    link: dict[str, Any]  # `core.graph.GraphLink.as_json()`
    adaptive: WaveEstimate | None = None  # the adaptive cycle before it, if one ran
    concurrent_with: int = 0  # other links measured at the same time
    planned_ms: float | None = None  # the delay of magnitudes_ms this measurement was at
    injection: str | None = None  # injections/NNN.json
    concurrent_injections: list[str] = Field(default_factory=list)
    recompute_argv: list[str] = Field(default_factory=list)

    @property
    def pair(self) -> Pair:
        """The hosts the link goes between (a latency is per host pair)."""
        return str(self.link["src_host"]), str(self.link["dst_host"])

    @property
    def key(self) -> str:
        """What a finished measurement is known by (for --resume): a link, at a delay if
        fixed."""
        return measurement_key(str(self.link["label"]), self.planned_ms)

    def as_json(self) -> dict[str, Any]:
        """As `gradients.json` has always had it: a record without null fields, no
        planned_ms for a measurement at the planned delay."""
        data = self.model_dump(mode="json")
        for entry in (data, data["adaptive"] or {}):
            if "record" in entry:
                entry["record"] = {k: v for k, v in entry["record"].items() if v is not None}
        if self.planned_ms is None:
            del data["planned_ms"]
        return data


def measurement_key(label: str, planned_ms: float | None) -> str:
    return label if planned_ms is None else f"{label} @ {planned_ms:g} ms"


@dataclass
class RunDir:
    """The run's directory; every file written whole (a temporary file, then renamed), so an
    interrupted run never leaves half a file."""

    path: Path

    def write(self, name: str, data: Any) -> None:
        if isinstance(data, BaseModel):
            data = data.model_dump(mode="json", exclude_none=True)
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str))
        tmp.replace(target)

    def read(self, name: str) -> Any:
        target = self.path / name
        return json.loads(target.read_text()) if target.exists() else None

    def measurements(self) -> list[LinkMeasurement]:
        """What `gradients.json` holds so far (none before the first link is done)."""
        path = self.path / "gradients.json"
        return read_measurements(path) if path.exists() else []

    def write_measurements(self, experiment: str, links: list[LinkMeasurement]) -> None:
        """The links, and where a link was measured at delays far enough apart (several
        `magnitudes_ms`, or an adaptive cycle), how each gradient changes with the delay."""
        self.write("gradients.json", {"experiment": experiment,
                                      "links": [m.as_json() for m in links],
                                      "linearity": [x.as_json() for x in linearity_of(links)]})


def linearity_of(links: list[LinkMeasurement]) -> list[Linearity]:
    """`core.linearity` over every measurement of each link and the adaptive cycle before it."""
    points = []
    for m in links:
        label = str(m.link["label"])
        points.append((label, m.record.magnitude_ms, "measurement", m.transactions))
        if m.adaptive is not None:
            points.append((label, m.adaptive.record.magnitude_ms, "adaptive",
                           m.adaptive.transactions))
    return linearity(points)


def read_measurements(path: Path) -> list[LinkMeasurement]:
    """The one reader of a `gradients.json` (at `path`, whatever its name): its links, typed.
    A file that is missing, not JSON or not a linkgrad gradients.json is InputError naming it
    (and each wrong field)."""
    data = _read(path, "the link gradients")
    links = data.get("links") if isinstance(data, dict) else None
    if not isinstance(links, list):
        raise InputError(Problem("not a linkgrad gradients.json (no list of links)", str(path),
                                 field="links"))
    out: list[LinkMeasurement] = []
    problems: list[Problem] = []
    for i, entry in enumerate(links):
        try:
            out.append(LinkMeasurement.model_validate(entry))
        except ValidationError as e:
            problems += [Problem("unknown field" if err["type"] == "extra_forbidden"
                                 else err["msg"], str(path),
                                 field=".".join(str(p) for p in ("links", i, *err["loc"])))
                         for err in e.errors()]
    if problems:
        raise InputError(problems)
    return out


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


def pair_gradients(links: list[LinkMeasurement]) -> dict[str, dict[Pair, Curve]]:
    """Each link's curve over the delays it was measured at; links between the same two hosts
    (other ports) add up, since a latency is per host pair. A gradient's standard error is its
    effect's over the delay actually injected."""
    points: dict[tuple[str, Pair, str], list[tuple[float, float, float]]] = {}
    for link in links:
        magnitude = link.record.magnitude_ms
        for name, t in link.transactions.items():
            if t.get("gradient") is None:
                continue
            se = t["se_ms"] / magnitude if t.get("se_ms") is not None else math.inf
            key = (name, link.pair, link.link["label"])
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


def measured_range(links: list[LinkMeasurement]) -> dict[Pair, float]:
    """Per host pair, the largest delay its gradients were measured with: beyond it, a
    prediction extrapolates the linear relation (thesis ch. 6)."""
    out: dict[Pair, float] = {}
    for link in links:
        out[link.pair] = max(out.get(link.pair, 0.0), link.record.magnitude_ms)
    return out


def _read(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(Problem(f"no {path.name} ({what}): not a linkgrad run directory, or a "
                                 "run from before it was written", str(path))) from None
    except json.JSONDecodeError as e:
        raise InputError(Problem(f"not valid JSON: {e.msg}", str(path), e.lineno)) from e
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(Problem(f"cannot read {path.name}: {e}", str(path))) from e


def load_run(gradients_file: Path) -> RunInputs:
    run_dir = gradients_file.parent
    links = read_measurements(gradients_file)
    graph = _read(run_dir / "graph.json", "the communication graph")
    baseline = _read(run_dir / "baseline.json", "the current response times")
    experiment = _read(run_dir / "experiment.json", "the experiment as run")
    return RunInputs(
        run_dir=run_dir,
        hosts=[h["name"] for h in experiment["hosts"]],
        gradients=pair_gradients(links),
        traffic=_traffic(graph),
        current_ms={name: Estimate(b["mean_ms"], b["se_ms"])
                    for name, b in baseline["transactions"].items()},
        requests={name: b["requests"] for name, b in baseline["transactions"].items()},
        measured_ms=measured_range(links),
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

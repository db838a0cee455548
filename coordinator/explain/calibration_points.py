"""The calibration's points: the shipped ones (`calibration.json`, made by
`benchmarks/explain_calibration.py` on the testbed's applications) and the user's own, from
the other runs beside this one (their `explain.json`: every row where both halves measured)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from linkgrad.explain.calibration import (
    Calibration,
    CalibrationPoint,
    fit_calibration,
    measured_se,
)

__all__ = ["SHIPPED", "ShippedPoints", "calibration_for", "points_of_rows", "shipped_points"]

SHIPPED = Path(__file__).with_name("calibration.json")
MAX_RUNS = 200  # the newest other runs read: an output directory of years stays quick


class _Point(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    passive: float
    passive_se: float
    gradient: float
    gradient_se: float
    source: str
    group: str  # the application
    run: str  # its run directory's name


class ShippedPoints(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    made: str  # the command that made it, and when
    runs: list[str]
    points: list[_Point]


class _Row(BaseModel):  # the fields of an explain.json row a point needs
    model_config = ConfigDict(extra="ignore", frozen=True)
    transaction: str
    pair: str
    gradient: float | None = None
    ci95: tuple[float, float] | None = None
    gradient_se: float | None = None  # older files: read off ci95 as a normal interval
    crossings: float | None = None
    crossings_ci95: tuple[float, float] | None = None


def shipped_points(path: Path = SHIPPED) -> ShippedPoints:
    return ShippedPoints.model_validate_json(path.read_text())


def points_of_rows(rows: Iterable[dict], source: str, group: str) -> list[CalibrationPoint]:
    """Every row of an explain.json where the gradient and the crossings were both measured
    (`group`: the application, a user's run's experiment name)."""
    out = []
    for raw in rows:
        r = _Row.model_validate(raw)
        if r.gradient is None or r.ci95 is None or r.crossings is None \
                or r.crossings_ci95 is None:
            continue
        out.append(CalibrationPoint(
            passive=r.crossings, passive_se=measured_se(r.crossings_ci95, None),
            gradient=r.gradient,
            gradient_se=r.gradient_se if r.gradient_se is not None else measured_se(r.ci95, None),
            source=f"{source} {r.transaction} {r.pair}", group=group, run=source))
    return out


def calibration_for(run_dir: Path, application: str, before: float | None = None
                    ) -> Calibration | None:
    """The shipped points and those of the runs beside `run_dir` that started before it
    (`before`, Unix s: not itself, a row would be its own prior; nor a later run, so two runs
    are never each other's and a run's explanation stays what it was), fitted for
    `application` (its own runs' points when there are enough); a neighbour that cannot be
    read is left out and counted."""
    shipped = shipped_points()
    # a shipped run explained again is not its own prior either
    points = [CalibrationPoint(**p.model_dump()) for p in shipped.points
              if p.run != run_dir.name]
    made_from = {run.partition("=")[2] for run in shipped.runs}
    mine, runs, unread = [], 0, 0
    for other in _neighbours(run_dir):
        if other.name in made_from:  # the shipped points' own runs: counted once
            continue
        try:
            started = json.loads((other / "run.json").read_text())["started"]
            if before is not None and not started < before:
                continue
            data = json.loads((other / "explain.json").read_text())
            summary = data["summary"]
            found = points_of_rows(data["rows"], other.name,
                                   summary.get("application") or summary["experiment"])
        except (OSError, ValueError, KeyError, TypeError, ValidationError):
            unread += 1
            continue
        runs += bool(found)
        mine += found
    described = f"shipped ({len(points)} points from {len(shipped.runs)} testbed runs)"
    if mine:
        described += f" and {len(mine)} points from {runs} of your runs in {run_dir.parent}"
    if unread:
        described += f" ({unread} unreadable explain.json left out)"
    return fit_calibration([*points, *mine], described, own=application)


def _neighbours(run_dir: Path) -> list[Path]:
    try:
        found = [p for p in run_dir.resolve().parent.iterdir()
                 if p.is_dir() and p.resolve() != run_dir.resolve()
                 and (p / "explain.json").is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)[:MAX_RUNS]

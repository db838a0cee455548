"""What one night measured, as the baseline keeps it and the comparison reads it: every
gradient with its interval, every prediction of the suite's placements, the communication
graph's links, each transaction's causal paths and each link's SNAP classes in the passive
phase. Read from a finished run directory (`night_measures`); plain records, so a baseline
file is this and nothing else."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from coordinator.config.bounds import MAX_GRADIENT
from coordinator.config.fields import Float, Int, Str
from coordinator.config.latencies import latency_sites, load_latencies
from coordinator.config.run_dir import read_measurements, read_record
from coordinator.config.run_inputs import load_run
from coordinator.config.run_records import LinkMeasurement, PlanFile
from coordinator.config.snap_file import read_snap
from coordinator.config.what_if import placement_changes
from linkgrad.errors import InputError, Problem
from linkgrad.prediction import predict
from linkgrad.reading import problems_of, read_json
from linkgrad.snap.evidence import LinkKey, link_classes

MAX_PREDICTION_MS = 1e15


class _Measure(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _ReadBack(BaseModel):
    """A run's file read for some of its fields: those checked, the rest left alone."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class GradientMeasure(_Measure):
    experiment: Str
    transaction: Str
    link: Str  # the graph's label: `tcp app1:0 -> db:5432`
    gradient: Float | None  # None: too few requests to estimate
    ci95: tuple[Float, Float] | None
    dof: Float | None = Field(None, gt=0)  # the interval's degrees of freedom (None: normal)
    magnitude_ms: Float = Field(ge=0)
    planned_ms: Float | None = None  # which of `magnitudes_ms` (None: the planned delay)

    @model_validator(mode="after")
    def _interval(self) -> GradientMeasure:
        if (self.gradient is None) != (self.ci95 is None):
            raise ValueError("a gradient and its ci95 go together")
        if self.ci95 is not None and self.ci95[0] > self.ci95[1]:
            raise ValueError(f"ci95 {list(self.ci95)} is not [low, high]")
        # what a measurement can give (bounds.MAX_GRADIENT): past it the comparison's
        # squares overflow
        for value in (self.gradient, *(self.ci95 or ())):
            if value is not None and not -MAX_GRADIENT <= value <= MAX_GRADIENT:
                raise ValueError(f"{value:g} is beyond any measured gradient "
                                 f"(|g| <= {MAX_GRADIENT:g})")
        return self

    @property
    def key(self) -> tuple[str, ...]:
        delay = "" if self.planned_ms is None else f"{self.planned_ms:g}"
        return ("gradient", self.experiment, self.transaction, self.link, delay)


class PredictionMeasure(_Measure):
    experiment: Str
    placement: Str  # the placement file's name
    transaction: Str
    # within what a prediction can say (30,000 years): past it a comparison's squares overflow
    predicted_ms: Float = Field(ge=-MAX_PREDICTION_MS, le=MAX_PREDICTION_MS)
    se_ms: Float = Field(ge=0, le=MAX_PREDICTION_MS)
    current_ms: Float = Field(ge=-MAX_PREDICTION_MS, le=MAX_PREDICTION_MS)

    @property
    def key(self) -> tuple[str, ...]:
        return ("prediction", self.experiment, self.placement, self.transaction)


class LinkMeasure(_Measure):
    experiment: Str
    link: Str
    messages: Int = Field(ge=0)

    @property
    def key(self) -> tuple[str, ...]:
        return ("link", self.experiment, self.link)


class PatternCount(_Measure):
    key: Str  # patterns.py's shape of the path
    count: Int = Field(ge=0)
    crossings: dict[Str, Float] = Field(default_factory=dict)  # host link -> crossings


class PathMeasure(_Measure):
    experiment: Str
    transaction: Str
    requests: Int = Field(ge=0)  # the transaction's requests the trace has
    patterns: tuple[PatternCount, ...] = Field(min_length=1)  # paths.json keeps five

    @model_validator(mode="after")
    def _counts(self) -> PathMeasure:
        if any(p.count > self.requests for p in self.patterns):
            raise ValueError(f"a pattern counts more than the {self.requests} requests")
        return self

    @property
    def key(self) -> tuple[str, ...]:
        return ("path", self.experiment, self.transaction)


class SnapMeasure(_Measure):
    experiment: Str
    link: Str
    window_s: Float = Field(gt=0)  # the passive phase
    seconds: dict[Str, Float]  # class -> connection-seconds in the window

    @property
    def key(self) -> tuple[str, ...]:
        return ("snap", self.experiment, self.link)


class NightMeasures(_Measure):
    gradients: tuple[GradientMeasure, ...] = ()
    predictions: tuple[PredictionMeasure, ...] = ()
    links: tuple[LinkMeasure, ...] = ()
    paths: tuple[PathMeasure, ...] = ()
    snap: tuple[SnapMeasure, ...] = ()
    # experiments whose run kept no paths.json / snap.json (not enabled, or nothing traced)
    without_paths: tuple[Str, ...] = ()
    without_snap: tuple[Str, ...] = ()
    problems: tuple[Str, ...] = ()  # what could not be measured, e.g. a placement's prediction

    @model_validator(mode="after")
    def _distinct(self) -> NightMeasures:
        for name in ("gradients", "predictions", "links", "paths", "snap"):
            keys = [m.key for m in getattr(self, name)]
            if len(set(keys)) != len(keys):
                raise ValueError(f"{name}: a measure is there twice")
        return self

    def merged(self, other: NightMeasures) -> NightMeasures:
        return NightMeasures(**{name: getattr(self, name) + getattr(other, name)
                                for name in type(self).model_fields})


def night_measures(experiment: str, run_dir: Path, latencies: Path | None = None,
                   placements: tuple[Path, ...] = ()) -> NightMeasures:
    """What the finished run in `run_dir` (of the suite's experiment `experiment`) measured,
    with the predictions of `placements` at `latencies`. A file that is there but wrong is
    InputError naming it; paths and SNAP may be missing (the experiment did not want them)."""
    try:
        return _night_measures(experiment, run_dir, latencies, placements)
    except ValidationError as e:  # the run's files hold what no run writes
        raise InputError(problems_of(e, str(run_dir))) from e
    except (ValueError, TypeError) as e:
        raise InputError(Problem(f"its files hold what no run writes: {e}",
                                 str(run_dir))) from e


def _night_measures(experiment: str, run_dir: Path, latencies: Path | None,
                    placements: tuple[Path, ...]) -> NightMeasures:
    links = read_measurements(run_dir / "gradients.json")
    plan = read_record(run_dir / "plan.json", PlanFile, "the square wave's plan")
    graph = _read_graph(run_dir / "graph.json")
    paths = _paths(experiment, run_dir)
    snap = _snap(experiment, run_dir, graph, plan.training)
    problems: list[str] = []
    predictions = _predictions(experiment, run_dir, latencies, placements, problems)
    return NightMeasures(
        gradients=tuple(_gradients(experiment, links)),
        predictions=tuple(predictions), problems=tuple(problems),
        links=tuple(_graph_links(experiment, graph)),
        paths=paths or (), snap=snap or (),
        without_paths=() if paths is not None else (experiment,),
        without_snap=() if snap is not None else (experiment,))


def _gradients(experiment: str, links: list[LinkMeasurement]) -> list[GradientMeasure]:
    out = []
    for m in links:
        for name, t in sorted(m.transactions.items()):
            out.append(GradientMeasure(
                experiment=experiment, transaction=name, link=m.link.label,
                gradient=t.gradient, ci95=t.ci95,
                dof=float(t.dof) if t.dof else None,
                magnitude_ms=m.record.magnitude_ms, planned_ms=m.planned_ms))
    return out


def _predictions(experiment: str, run_dir: Path, latencies_file: Path | None,
                 placements: tuple[Path, ...], problems: list[str]) -> list[PredictionMeasure]:
    if latencies_file is None or not placements:
        return []
    run, latencies = load_run(run_dir / "gradients.json"), load_latencies(latencies_file)
    known = latency_sites(latencies, run.hosts)
    out = []
    for path in placements:
        try:
            _, changes = placement_changes(run, latencies, latencies_file, path, known)
        except InputError as e:  # tonight's traffic may need a link the suite does not measure
            problems.append(f"no prediction of placement {path.stem} (experiment "
                            f"{experiment}): {e}")
            continue
        for name, p in sorted(predict(run.current_ms, run.gradients, changes).items()):
            out.append(PredictionMeasure(
                experiment=experiment, placement=path.stem, transaction=name,
                predicted_ms=p.predicted_ms, se_ms=p.se_ms, current_ms=p.current_ms.mean))
    return out


def _graph_links(experiment: str, graph: list[GraphLinkAsRun]) -> list[LinkMeasure]:
    return [LinkMeasure(experiment=experiment, link=e.label, messages=e.messages)
            for e in graph]


class GraphLinkAsRun(_ReadBack):
    """An entry of `graph.json`, as far as the nights compare it."""

    label: Str
    messages: Int = Field(ge=0)
    src_host: Str
    src_port: Int = Field(ge=0, le=65535)
    dst_host: Str
    dst_port: Int = Field(ge=0, le=65535)


class _Pattern(_ReadBack):
    key: Str
    count: Int = Field(ge=0)
    crossings: dict[Str, Float] = Field(default_factory=dict)


class PathsAsRun(_ReadBack):
    """`paths.json`, as far as the nights compare it: each transaction's likeliest paths."""

    transactions: dict[Str, list[_Pattern]] = Field(default_factory=dict)
    transaction_requests: dict[Str, Int] = Field(default_factory=dict)


def _read_graph(path: Path) -> list[GraphLinkAsRun]:
    data = read_json(path, "the communication graph")
    try:
        return TypeAdapter(list[GraphLinkAsRun]).validate_python(data)
    except ValidationError as e:
        raise InputError(problems_of(e, str(path))) from e


def _paths(experiment: str, run_dir: Path) -> list[PathMeasure] | None:
    if not (run_dir / "paths.json").exists():
        return None
    data = read_record(run_dir / "paths.json", PathsAsRun, "the causal paths")
    if not data.transactions:  # tracing found no request of a named transaction
        return None
    return [PathMeasure(experiment=experiment, transaction=name,
                        requests=data.transaction_requests.get(
                            name, sum(p.count for p in patterns)),
                        patterns=tuple(PatternCount(key=p.key, count=p.count,
                                                    crossings=p.crossings) for p in patterns))
            for name, patterns in sorted(data.transactions.items())]


def _snap(experiment: str, run_dir: Path, graph: list[GraphLinkAsRun],
          training: tuple[float, float] | None) -> list[SnapMeasure] | None:
    snap = read_snap(run_dir)
    if snap is None or not snap.reports or training is None or training[1] <= training[0]:
        return None  # no profile (a file with no report is none either)
    reports = snap.reports
    out = []
    for e in graph:
        key = LinkKey(e.src_host, e.src_port, e.dst_host, e.dst_port)
        seconds = link_classes(reports, snap.addresses, key, training)
        out.append(SnapMeasure(experiment=experiment, link=e.label,
                               window_s=training[1] - training[0],
                               seconds={k: round(v, 3) for k, v in seconds.items() if v > 0}))
    return out

"""A run directory explained: every file it has read (each optional but the experiment and
its journal), each (transaction, link) explained, and the summary a person reads first."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import TypeAdapter, ValidationError

from coordinator.config.hosts_file import HostsFile, read_hosts
from coordinator.config.paths_file import read_paths_file
from coordinator.config.run_dir import RunDir, read_measurements, read_record, read_run_file
from coordinator.config.run_records import (
    ExperimentAsRun,
    LinkMeasurement,
    MeasuredLink,
    PlanFile,
    RunJournal,
)
from coordinator.config.snap_file import SnapFile, read_snap
from coordinator.explain.answer import ExplainRow, Explanation, RunSummary
from coordinator.explain.calibration_points import calibration_for
from coordinator.explain.choice import STRATEGY_FILE, StrategyFile
from coordinator.explain.rows import explained_rows, least_delay
from linkgrad.errors import InputError
from linkgrad.explain.explained import Explained
from linkgrad.hostprobe.load import HostLoad
from linkgrad.paths.result import PathsResult
from linkgrad.reading import problems_of

__all__ = ["EXPLAIN_FILE", "RunFiles", "explain_run", "load_run_files", "write_explanation"]

EXPLAIN_FILE = "explain.json"
_GRAPH = TypeAdapter(list[MeasuredLink])
T = TypeVar("T")


@dataclass(frozen=True)
class RunFiles:
    """What a run directory holds for the explanation (each passive file None when absent or
    unreadable; `unread` says why)."""

    experiment: ExperimentAsRun
    journal: RunJournal
    measurements: list[LinkMeasurement]
    graph: list[MeasuredLink]
    paths: PathsResult | None
    snap: SnapFile | None
    hosts: HostsFile | None
    strategy: StrategyFile | None  # passive-first's choice (None: every link was injected)
    training: tuple[float, float] | None  # the passive phase (plan.json's), Unix s
    unread: list[str]


def load_run_files(run_dir: Path) -> RunFiles:
    """The experiment and its journal must be read (InputError naming them); the rest are
    optional: one that cannot be read is left out and said in `unread`."""
    experiment = read_record(run_dir / "experiment.json", ExperimentAsRun,
                             "the experiment as run")
    journal = read_record(run_dir / "run.json", RunJournal, "how the run went")
    unread: list[str] = []
    return RunFiles(
        experiment=experiment, journal=journal,
        measurements=_optional(run_dir / "gradients.json", read_measurements, unread) or [],
        graph=_optional(run_dir / "graph.json", _read_graph, unread) or [],
        paths=_optional(run_dir / "paths.json", read_paths_file, unread),
        snap=_optional(run_dir, read_snap, unread),
        hosts=_optional(run_dir, read_hosts, unread),
        strategy=_optional(run_dir / STRATEGY_FILE, _read_strategy, unread),
        training=plan.training if (plan := _optional(run_dir / "plan.json", _read_plan,
                                                     unread)) else None, unread=unread)


def explain_run(run_dir: Path, interrupted: str | None = None) -> Explanation:
    """`run_dir` explained; `interrupted`: why a journal that says running is not. The
    passive side is calibrated by the shipped points and the runs beside this one."""
    f = load_run_files(run_dir)
    calibration = calibration_for(run_dir, f.experiment.app, f.journal.started)
    explained = explained_rows(f.measurements, f.graph, list(f.experiment.transactions),
                               f.paths, f.snap, f.hosts, calibration, f.training)
    by_label = least_delay(f.measurements)
    rows = [ExplainRow.of(e, *_measured_evidence(by_label.get(e.link), e.gradient),
                          _dof(by_label.get(e.link), e.transaction)) for e in explained]
    summary = _summary(run_dir, f, interrupted, explained)
    return Explanation(summary=summary.model_copy(update={
        "calibration": calibration.describe() if calibration else None}), rows=rows)


def write_explanation(run_dir: Path, interrupted: str | None = None) -> Explanation:
    """`explain_run`, kept as `explain.json` beside the run's other files (nulls written, as
    `--json` prints it)."""
    e = explain_run(run_dir, interrupted)
    RunDir(run_dir).write(EXPLAIN_FILE, e.model_dump(mode="json"))
    return e


def _optional(path: Path, read: Callable[[Path], T], unread: list[str]) -> T | None:
    """`read(path)`, None when the file is missing; one that cannot be read is said."""
    try:
        return read(path) if path.exists() else None
    except InputError as e:
        unread.append(str(e))
        return None


def _read_plan(path: Path) -> PlanFile:
    return read_record(path, PlanFile, "the square wave's plan")


def _read_strategy(path: Path) -> StrategyFile:
    return read_record(path, StrategyFile, "passive-first's choice of links")


def _read_graph(path: Path) -> list[MeasuredLink]:
    try:
        return _GRAPH.validate_python(read_run_file(path, "the communication graph"))
    except ValidationError as e:
        raise InputError(problems_of(e, str(path))) from e


def _dof(m: LinkMeasurement | None, transaction: str) -> int | None:
    t = m.transactions.get(transaction) if m else None
    return t.dof if t else None


def _measured_evidence(m: LinkMeasurement | None, gradient: float | None
                       ) -> tuple[dict[str, float] | None, dict[str, HostLoad] | None]:
    if m is None or gradient is None:
        return None, None
    hosts = {h: load for h, load in (m.hosts or {}).items() if h in m.pair} or None
    return (m.snap or {}).get("measurement"), hosts


def _summary(run_dir: Path, f: RunFiles, interrupted: str | None,
             rows: list[Explained]) -> RunSummary:
    experiment, journal, measurements, graph, paths = (f.experiment, f.journal,
                                                       f.measurements, f.graph, f.paths)
    ended = journal.ended  # an interrupted run's end is not known: no duration
    injected = {m.link.label for m in measurements}
    verdicts = Counter(r.verdict for r in rows)
    return RunSummary(
        experiment=experiment.name, application=experiment.app, run_dir=str(run_dir),
        status="interrupted" if interrupted else journal.status,
        reason=interrupted or journal.reason, started=journal.started, ended=ended,
        duration_s=None if ended is None else round(ended - journal.started, 1),
        hosts=[h.name for h in experiment.hosts],
        graph_links=len({g.label for g in graph} | injected), injected_links=len(injected),
        traced_requests=dict(paths.transaction_requests) if paths else {},
        verdicts=dict(sorted(verdicts.items())), calibration=None,
        strategy=_strategy(f.strategy),
        findings=_findings(rows, paths, f.unread),
        next_step=_next_step(rows, run_dir, f.strategy is not None))


def _strategy(record: StrategyFile | None) -> str:
    if record is None:
        return "active: every selected link injected"
    passive = [c.link for c in record.links if not c.inject]
    return (f"passive-first: {len(record.links) - len(passive)} of {len(record.links)} links "
            f"injected, {len(passive)} left to their calibrated passive gradients "
            "(strategy.json says why)")


def _findings(rows: list[Explained], paths: PathsResult | None,
              unread: list[str]) -> list[str]:
    out = []
    for name in dict.fromkeys(r.transaction for r in rows):
        mine = [r for r in rows if r.transaction == name and _matters(r)]
        if not mine:
            out.append(f"{name}: no link matters (every gradient's interval reaches 0)")
            continue
        top = max(mine, key=_strength)
        value = top.gradient if top.gradient is not None else top.passive.estimate
        out.append(f"{name}: most on {top.pair}, {value:.2f} ms per ms ({top.verdict})")
    off = [r for r in rows if r.verdict in ("above", "below")]
    for r in off:
        out.append(f"{r.transaction} on {r.pair}: {r.gradient:.2f}, {r.verdict} its paths' "
                   f"{r.passive.estimate:.2f}: {r.cause}")
    if paths is None:
        out.append("no causal paths: each gradient stands without a passive check")
    out += [f"left out: {u}" for u in unread]
    return out


def _matters(r: Explained) -> bool:
    """Its gradient's interval lies above 0 (or, not injected, the paths cross it)."""
    if r.gradient is not None:
        return (r.ci95 or (r.gradient, r.gradient))[0] > 0
    return r.passive is not None and r.passive.ci95[0] > 0


def _strength(r: Explained) -> float:
    if r.gradient is not None:
        return r.gradient
    return r.passive.estimate if r.passive else 0.0


def _next_step(rows: list[Explained], run_dir: Path, passive_first: bool) -> str:
    if not rows:
        return ("nothing to explain yet: resume the run (linkgrad run EXPERIMENT --resume "
                f"{run_dir}) or look at what it kept")
    unexplained = sorted({r.pair for r in rows
                          if any(c.kind == "unexplained" for c in r.causes)})
    passive_only = sorted({r.pair for r in rows if r.verdict == "passive-only"
                           and r.passive is not None and r.passive.estimate > 0})
    if unexplained:
        return (f"measure {', '.join(unexplained)} again with more cycles (parameters.cycles) "
                "or at several delays (parameters.magnitudes_ms), and read `linkgrad profile` "
                "on its hosts: nothing the run saw explains its gradient")
    if passive_only and passive_first:
        return (f"{', '.join(passive_only)} stand on their calibrated passive gradients: a "
                "question (parameters.questions) or strategy: active measures them")
    if passive_only:
        return (f"{', '.join(passive_only)} carry traffic but were not injected: add them to "
                "parameters.include to measure them, or take their passive gradients as such")
    return (f"predict a move: linkgrad predict --gradients {run_dir / 'gradients.json'} "
            "--placement NEW.yaml (the current latencies from the paths, or --latencies)")

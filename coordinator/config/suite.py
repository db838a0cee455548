"""A regression suite (`linkgrad regress SUITE.yaml`): the testbed to bring up, the experiments
to run on it, the placements to predict from each, and per check its tolerance.

Validated whole before anything is built (file:line: field errors): the suite itself, every
experiment it names (as `linkgrad run` would, but its hosts come from the testbed the suite
brings up: each must name it, `testbed: TAG`), every latencies and placement file, and the
topology. Relative paths are relative to the suite file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from coordinator.config.experiment import Experiment
from coordinator.config.fields import Bool, Float, InputModel, Int, RunName, TestbedTag
from coordinator.config.latencies import load_latencies, load_placement
from coordinator.config.topology_file import load_topology
from coordinator.config.yamlconf import line_of, load_yaml
from linkgrad.errors import InputError, Problem
from testbed.topology import BUILT_IN, Topology


class TestbedSpec(InputModel):
    """The testbed the nights run on (`linkgrad testbed up`)."""

    # the application, whose built-in topology is used without `topology`
    app: Literal["rubis", "mediawiki", "redmine"] = "rubis"
    topology: Path | None = None  # a topology YAML (its `app` then decides)
    # mininet | netns (`--netns`) | none: the experiments' own hosts (a staging system),
    # nothing brought up or down
    network: Literal["mininet", "netns", "none"] = "mininet"
    tag: TestbedTag = "nt"  # every experiment of the suite names it: `testbed: nt`


class Predict(InputModel):
    """What-if predictions from an experiment's gradients (`linkgrad predict`)."""

    latencies: Path  # NOW.yaml: sites and one-way latencies
    placements: tuple[Path, ...] = Field(min_length=1)  # each a `move: {HOST: SITE}` file


class SuiteExperiment(InputModel):
    experiment: Path  # an experiment file with `testbed: TAG`
    predict: Predict | None = None


class GradientCheck(InputModel):
    """A gradient regresses when it differs from the baseline's by at least `min_change`
    (crossings) and a Welch test on both intervals says so at `alpha` (Holm's correction over
    every gradient of the night: `alpha` is the chance of any false alarm per night)."""

    enabled: Bool = True
    alpha: Float = Field(0.01, gt=0, lt=0.5)
    min_change: Float = Field(0.25, ge=0, le=1000)


class PredictionCheck(InputModel):
    """A prediction regresses when its predicted mean response time moves by at least
    `min_change_ms` and `min_change_fraction` of the baseline's, significantly at `alpha`."""

    enabled: Bool = True
    alpha: Float = Field(0.01, gt=0, lt=0.5)
    min_change_ms: Float = Field(2.0, ge=0, le=1e6)
    min_change_fraction: Float = Field(0.1, ge=0, le=100)


class LinkCheck(InputModel):
    """A link of the communication graph is new when it carried at least `min_messages` in the
    passive phase and the baseline's had under a tenth of that; vanished the other way round."""

    enabled: Bool = True
    min_messages: Int = Field(100, ge=1, le=10**9)


class PathCheck(InputModel):
    """A transaction's dominant causal path changed when another is now the commonest and the
    baseline's dominant share fell by at least `min_share_change`, significantly at `alpha`
    (two proportions, Holm over the transactions); transactions with under `min_requests`
    traced requests in either night are not judged."""

    enabled: Bool = True
    alpha: Float = Field(0.01, gt=0, lt=0.5)
    min_share_change: Float = Field(0.2, gt=0, le=1)
    min_requests: Int = Field(20, ge=1, le=10**9)


class SnapCheck(InputModel):
    """A SNAP class is new on a link when it covered at least `min_rate` connection-seconds
    per second of the passive phase and the baseline's under a tenth of that."""

    enabled: Bool = True
    min_rate: Float = Field(0.05, gt=0, le=1e6)


class Checks(InputModel):
    gradients: GradientCheck = GradientCheck()
    predictions: PredictionCheck = PredictionCheck()
    links: LinkCheck = LinkCheck()
    paths: PathCheck = PathCheck()
    snap: SnapCheck = SnapCheck()


class Suite(InputModel):
    name: RunName  # names each night's directory: output/NAME-TIME
    testbed: TestbedSpec = TestbedSpec()
    experiments: tuple[SuiteExperiment, ...] = Field(min_length=1, max_length=20)
    checks: Checks = Checks()
    baseline: Path | None = None  # default: NAME.baseline.json beside the suite
    output: Path = Path("runs")  # nights, history.jsonl and trend.html go here

    @model_validator(mode="after")
    def _distinct(self) -> Suite:
        files = [e.experiment for e in self.experiments]
        if len(set(files)) != len(files):
            raise ValueError("an experiment is named twice")
        return self


@dataclass(frozen=True)
class SuiteExperimentFile:
    """One experiment of a loaded suite: its file, its name (a key of the baseline) and the
    predictions to make from it (paths resolved)."""

    path: Path
    name: str
    latencies: Path | None
    placements: tuple[Path, ...]


@dataclass(frozen=True)
class LoadedSuite:
    path: Path
    suite: Suite
    topology: Topology
    experiments: tuple[SuiteExperimentFile, ...]
    baseline: Path
    output: Path

    @property
    def name(self) -> str:
        return self.suite.name

    @property
    def tag(self) -> str:
        return self.suite.testbed.tag


def load_suite(path: Path, baseline: Path | None = None) -> LoadedSuite:
    """The suite at `path`, with every file it names checked; `baseline` overrides its own."""
    suite = load_yaml(path, Suite)
    base = path.resolve().parent
    problems: list[Problem] = []
    topology = _topology(suite, base, path, problems)
    experiments = []
    for i, entry in enumerate(suite.experiments):
        where = ("experiments", i, "experiment")
        file = base / entry.experiment
        try:
            experiment = load_yaml(file, Experiment)
        except InputError as e:
            problems += e.problems
            continue
        if suite.testbed.network != "none" and experiment.testbed != suite.testbed.tag:
            problems.append(Problem(
                f"{file} runs on {_testbed(experiment.testbed)}: a suite's experiments run on "
                f"the testbed it brings up (write `testbed: {suite.testbed.tag}` in it)",
                str(path), line_of(path, where), ".".join(map(str, where))))
        latencies, placements = None, ()
        if entry.predict is not None:
            latencies = base / entry.predict.latencies
            placements = tuple(base / p for p in entry.predict.placements)
            for check, target in ((load_latencies, latencies),
                                  *((load_placement, p) for p in placements)):
                try:
                    check(target)
                except InputError as e:
                    problems += e.problems
        experiments.append(SuiteExperimentFile(file, experiment.name, latencies, placements))
    for e in experiments:
        stems = [p.stem for p in e.placements]
        for stem in sorted({s for s in stems if stems.count(s) > 1}):
            problems.append(Problem(f"experiment {e.name!r} has two placements named {stem!r}: "
                                    "their file names key their predictions", str(path),
                                    line_of(path, ("experiments",)), "experiments"))
    names = [e.name for e in experiments]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(Problem(f"two experiments are named {name!r}: a suite's experiments "
                                "need distinct names (they key the baseline)", str(path),
                                line_of(path, ("experiments",)), "experiments"))
    if problems:
        raise InputError(problems)
    return LoadedSuite(path, suite, topology, tuple(experiments),
                       baseline or base / (suite.baseline or f"{suite.name}.baseline.json"),
                       (base / suite.output).resolve())


def _testbed(tag: str | None) -> str:
    return f"testbed {tag!r}" if tag else "hosts of its own (no `testbed:`)"


def _topology(suite: Suite, base: Path, path: Path, problems: list[Problem]) -> Topology:
    spec = suite.testbed
    if spec.topology is None:
        return BUILT_IN[spec.app]
    try:
        topology = load_topology(base / spec.topology)
    except InputError as e:
        problems += e.problems
        return BUILT_IN[spec.app]
    if "app" in spec.model_fields_set and topology.app != spec.app:
        problems.append(Problem(f"app {spec.app} but {spec.topology} says app: {topology.app}",
                                str(path), line_of(path, ("testbed", "app")), "testbed.app"))
    return topology

"""What a prediction, a placement or a route reads from a run: each transaction's gradient
curve per host pair, the pairs that carried traffic, the current means, and the checks that a
changed pair was measured.

Where the run did not inject a link, `explain.json` beside `gradients.json` may give its
passive gradient (the causal paths' crossings, `linkgrad explain`): it stands in as an
estimate, its standard error from its wider 95% interval, and is kept apart (`passive`) so
every answer can say which of its gradients were not measured. A measured gradient always
wins; a run without explain.json reads as before."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import (
    TypeAdapter,
    ValidationError,
)

from coordinator.config.explain_file import ExplainFile, passive_estimates, read_explain_file
from coordinator.config.gradient_answers import is_gradient_answer, read_gradient_answers
from coordinator.config.run_dir import read_measurements, read_record, read_run_file
from coordinator.config.run_hosts import Mention, check_run_hosts
from coordinator.config.run_records import (
    BaselineFile,
    ExperimentAsRun,
    GraphEntry,
    LinkMeasurement,
    Pair,
)
from linkgrad.errors import InputError, Problem
from linkgrad.prediction import Curve, Estimate, fit_curve
from linkgrad.reading import problems_of
from linkgrad.spectral.result import GradientResult


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
    # pairs that (also) talked IPv6: (proto, src address, dst address) as the graph saw them
    ipv6_traffic: dict[Pair, set[tuple[str, str, str]]] = field(default_factory=dict)
    # transaction -> the pairs whose curve in `gradients` is a passive gradient (explain.json)
    passive: dict[str, set[Pair]] = field(default_factory=dict)
    # the answers of `linkgrad gradient --json` it was read from (none: a run directory's)
    answers: tuple[Path, ...] = ()

    @property
    def source(self) -> str:
        """What it was read from, for a message: the run directory, or the answers."""
        return " and ".join(map(str, self.answers)) if self.answers else str(self.run_dir)

    @property
    def paths_dirs(self) -> list[Path]:
        """The run directories whose causal paths may give the current latencies."""
        return [] if self.answers else [self.run_dir]

    def talking_pairs(self) -> set[Pair]:
        """The pairs a prediction may need a latency for: traffic seen, or a gradient."""
        return set(self.traffic) | {p for per_pair in self.gradients.values() for p in per_pair}

    def passive_pairs(self, transaction: str | None = None) -> set[Pair]:
        """The pairs whose gradient is passive, of one transaction or of any."""
        if transaction is not None:
            return self.passive.get(transaction, set())
        return {p for pairs in self.passive.values() for p in pairs}


def pair_gradients(links: list[LinkMeasurement]) -> dict[str, dict[Pair, Curve]]:
    """Each link's curve over the delays it was measured at; links between the same two hosts
    (other ports) add up, since a latency is per host pair. A gradient's standard error is its
    effect's over the delay actually injected."""
    return _curves((link.pair, link.link.label, link.record.magnitude_ms, link.transactions)
                   for link in links)


def _curves(measured: Iterable[tuple[Pair, str, float, Mapping[str, GradientResult]]]
            ) -> dict[str, dict[Pair, Curve]]:
    """`pair_gradients` of (pair, link label, delay, gradients) per measurement."""
    points: dict[tuple[str, Pair, str], list[tuple[float, float, float]]] = {}
    for pair, label, magnitude, transactions in measured:
        for name, t in transactions.items():
            if t.gradient is None:
                continue
            se = t.se_ms / magnitude if t.se_ms is not None else math.inf
            points.setdefault((name, pair, label), []).append((magnitude, t.gradient, se))
    out: dict[str, dict[Pair, Curve]] = {}
    for (name, pair, _), measured_points in points.items():
        curve, old = fit_curve(measured_points), out.setdefault(name, {}).get(pair)
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
def with_passive(measured: dict[str, dict[Pair, Curve]],
                 passive: dict[str, dict[Pair, Estimate]]
                 ) -> tuple[dict[str, dict[Pair, Curve]], dict[str, set[Pair]]]:
    """`measured` with every passive gradient of a (transaction, pair) it lacks, and which
    those are: a measured gradient always wins."""
    out = {name: dict(per_pair) for name, per_pair in measured.items()}
    added: dict[str, set[Pair]] = {}
    for name, per_pair in passive.items():
        for pair, estimate in per_pair.items():
            if pair not in out.get(name, {}):
                out.setdefault(name, {})[pair] = Curve(estimate)
                added.setdefault(name, set()).add(pair)
    return out, added


_GRAPH = TypeAdapter(list[GraphEntry])


def load_gradients(paths: Sequence[Path], link: str | None = None) -> RunInputs:
    """A run's gradients.json (its directory gives the rest), or one or more answers of
    `linkgrad gradient --json` (`gradient_answers`); `link` names an answer's link."""
    if len(paths) == 1 and not is_gradient_answer(read_run_file(paths[0],
                                                                "the link gradients")):
        if link is not None:
            raise InputError(Problem("only with what `linkgrad gradient --json` prints (a "
                                     "run's gradients.json names its links)", field="--link"))
        return load_run(paths[0])
    answers = read_gradient_answers(paths, link)
    latest = max(answers, key=lambda a: a[1].injection.start)[1]
    baseline = latest.baseline.transactions if latest.baseline else {}  # read: never empty
    pairs = [pair for pair, _ in answers]
    return RunInputs(
        run_dir=paths[0].parent,
        hosts=sorted({h for pair in pairs for h in pair}),
        gradients=_curves((pair, str(a.injection.link or f"{pair[0]}->{pair[1]}"),
                           a.injection.magnitude_ms, a.transactions) for pair, a in answers),
        traffic={pair: {"tcp"} for pair in pairs},
        current_ms={name: Estimate(b.mean_ms, b.se_ms) for name, b in baseline.items()},
        requests={name: b.requests for name, b in baseline.items()},
        measured_ms={pair: max(a.injection.magnitude_ms for p, a in answers if p == pair)
                     for pair in pairs},
        answers=tuple(paths))


def load_run(gradients_file: Path) -> RunInputs:
    run_dir = gradients_file.parent
    links = read_measurements(gradients_file)
    explained = read_explain_file(run_dir / "explain.json")
    graph = read_run_file(run_dir / "graph.json", "the communication graph")
    try:
        entries = _GRAPH.validate_python(graph)
    except ValidationError as e:
        raise InputError(problems_of(e, str(run_dir / "graph.json"))) from e
    baseline = read_record(run_dir / "baseline.json", BaselineFile, "the current response times")
    experiment = read_record(run_dir / "experiment.json", ExperimentAsRun,
                             "the experiment as run")
    check_run_hosts(_host_mentions(links, entries, gradients_file, run_dir / "graph.json",
                                   explained, run_dir / "explain.json"),
                    [h.name for h in experiment.hosts], run_dir / "experiment.json")
    gradients, passive = with_passive(pair_gradients(links),
                                      passive_estimates(explained) if explained else {})
    return RunInputs(
        run_dir=run_dir,
        hosts=[h.name for h in experiment.hosts],
        gradients=gradients,
        passive=passive,
        traffic=_traffic(entries),
        ipv6_traffic=_ipv6_traffic(entries),
        current_ms={name: Estimate(b.mean_ms, b.se_ms)
                    for name, b in baseline.transactions.items()},
        requests={name: b.requests for name, b in baseline.transactions.items()},
        measured_ms=measured_range(links),
        patterns=dict(experiment.transactions),
    )


def _host_mentions(links: list[LinkMeasurement], graph: list[GraphEntry], gradients_file: Path,
                   graph_file: Path, explained: ExplainFile | None, explain_file: Path
                   ) -> Iterator[tuple[str, Mention]]:
    """Every host gradients.json, graph.json and explain.json name, with the file and field
    naming it."""
    for i, m in enumerate(links):
        for side, host in (("src_host", m.pair[0]), ("dst_host", m.pair[1])):
            yield host, (gradients_file, f"links.{i}.link.{side}")
    for i, g in enumerate(graph):
        for side, host in (("src_host", g.src_host), ("dst_host", g.dst_host)):
            yield host, (graph_file, f"{i}.{side}")
    for i, row in enumerate(explained.rows if explained else []):
        for host in row.hosts:
            yield host, (explain_file, f"rows.{i}.pair")


def _traffic(graph: list[GraphEntry]) -> dict[Pair, set[str]]:
    out: dict[Pair, set[str]] = {}
    for g in graph:
        out.setdefault((g.src_host, g.dst_host), set()).add(g.proto)
    return out


def _ipv6_traffic(graph: list[GraphEntry]) -> dict[Pair, set[tuple[str, str, str]]]:
    """The IPv6 ends of each pair's links: a host's IPv4 address does not reach them."""
    out: dict[Pair, set[tuple[str, str, str]]] = {}
    for g in graph:
        if g.src_addr and g.dst_addr and ":" in g.src_addr:
            out.setdefault((g.src_host, g.dst_host), set()).add((g.proto, g.src_addr,
                                                                 g.dst_addr))
    return out


def require_measured(run: RunInputs, changes: dict[Pair, Estimate], why: str,
                     source: str | None = None, field: str | None = None) -> None:
    """InputError naming every link that carried traffic and changes latency (`why`) without
    a measured gradient: a prediction would silently take 0 for it."""
    if missing := unmeasured(run, {p for p, d in changes.items() if d.mean or d.se}):
        raise InputError(Problem(
            f"{', '.join(f'{a}->{b}' for a, b in missing)} carry traffic and change latency "
            f"{why}, but the run measured no gradient on them (measure them: "
            f"parameters.include; or take their passive gradients: {PASSIVE_HINT})", source,
            field=field))


PASSIVE_HINT = "`linkgrad report RUN_DIR` writes explain.json beside gradients.json"


def unmeasured(run: RunInputs, changed: set[Pair]) -> list[Pair]:
    """Pairs whose latency changes and that carried traffic, but whose gradient no link of
    the run measured nor explain.json gave: a prediction without them would silently
    assume 0."""
    measured = {pair for per_pair in run.gradients.values() for pair in per_pair}
    return sorted(p for p in changed if p in run.traffic and p not in measured)


def pair_names(pairs: set[Pair]) -> list[str]:
    """Host pairs as an answer names them: "a<->b" where both directions are there."""
    out = []
    for a, b in sorted(pairs):
        if (b, a) in pairs:
            if a < b:
                out.append(f"{a}<->{b}")
        else:
            out.append(f"{a}->{b}")
    return out

"""Phase 2 of a run, passive: the sniffers' reports make the communication graph, the
requests of the passive phase give the baseline, and the square wave is planned from them
(`wave_plan.plan_wave`, written to `plan.json`); training lasts as long as the spectrum needs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coordinator.config.experiment import Parameters
from coordinator.config.experiment_files import field_problem
from coordinator.config.paths_file import read_paths_file
from coordinator.config.run_dir import RunDir, read_record
from coordinator.config.run_records import BaselineFile, MeasuredLink, PlanFile
from coordinator.explain.calibration_points import calibration_for
from coordinator.explain.choice import STRATEGY_FILE, StrategyFile, choose, link_facts
from coordinator.live import paths_evidence
from coordinator.live.clock import sleep_checking
from coordinator.live.paths_evidence import PATHS_FILE
from coordinator.live.session import Say, Session
from linkgrad.errors import InputError
from linkgrad.explain.strategy import Reach
from linkgrad.graph import (
    GraphLink,
    application,
    build_graph,
    explain_selection,
    select,
)
from linkgrad.protocol.sniffer import Unwatch, Watch
from linkgrad.spectral.wave_plan import (
    TRAIN_BINS,
    TRAIN_CHUNKS,
    PlanBeyondCap,
    WavePlan,
    plan_wave,
    training_needed_s,
)
from linkgrad.transactions import patterns_from
from linkgrad.watch import (
    Baseline,
    failed_fraction,
    failing_before_delay,
    response_baselines,
    training_requests,
)


@dataclass(frozen=True)
class Training:
    """What the passive phase saw."""

    graph: list[GraphLink]
    start_s: float
    end_s: float


def train(session: Session, out: RunDir, say: Say) -> Training:
    """Phase 2a: passive observation; the communication graph from the sniffers' reports,
    the causal paths from their traces (paths.json). `training_s`, or by default
    `min_training_s` and then until the spectrum has enough."""
    p, clock = session.experiment.parameters, session.clock
    start = clock.time()
    for sniffer in session.sniffers.values():
        sniffer.call(Watch(interval_s=2.0))
    for note in paths_evidence.start(session):  # WAP5's trace: the passive phase only
        say(f"[yellow]{note}")
    first = p.training_s if p.training_s is not None else p.min_training_s
    say(f"training: {first:.0f} s of passive observation"
        + ("" if p.training_s is not None else ", then as long as the spectrum needs"))
    sleep_checking(clock, first)
    if p.training_s is None:
        train_until_enough(session, start, say)
    for sniffer in session.sniffers.values():
        sniffer.call(Unwatch())  # its last report comes before this answer
    end = clock.time()
    try:  # the paths are evidence: a failure to save them stops no measurement
        for problem in paths_evidence.save(session, out, (start, end), say):
            say(f"[yellow]{problem}")
    except Exception as e:
        session.warnings.append(f"causal paths not saved: {e}")
        say(f"[yellow]causal paths not saved: {e}")
    # the experiment names each host's IPv4 address, its sniffer its IPv6 ones
    hosts = {**session.addresses, **session.ipv6_addresses}
    return Training(build_graph(session.reports, hosts, p.message_threshold), start, end)


def reach_of(plan: WavePlan, p: Parameters) -> Reach:
    """What this run's measurements would resolve: at the fixed delay (the largest of
    magnitudes_ms), else as the adaptive cycles would size it."""
    fixed = (max(p.magnitudes_ms) / 1e3 if p.magnitudes_ms
             else None if p.adaptive and p.magnitude_ms is None else plan.magnitude_s)
    return Reach(plan, p.half_width, p.max_delay_ms / 1e3, fixed)


def passive_first(session: Session, out: RunDir, links: list[GraphLink],
                  window: tuple[float, float], say: Say, reach: Reach | None = None
                  ) -> list[GraphLink]:
    """The links to inject after the passive phase: those a question needs or whose passive
    evidence is ambiguous (strategy.json keeps each choice and its reasons)."""
    experiment = session.experiment
    if (out.path / STRATEGY_FILE).exists():  # a resumed run keeps the links it chose
        try:
            earlier = read_record(out.path / STRATEGY_FILE, StrategyFile,
                                  "passive-first's choice of links")
        except InputError as e:
            say(f"[yellow]passive-first: the earlier choice cannot be read ({e}): chosen again")
        else:
            chosen = {c.link for c in earlier.links if c.inject}
            say(f"passive-first: the earlier choice kept ({STRATEGY_FILE}): {len(chosen)} of "
                f"{len(earlier.links)} links to inject")
            return [g for g in links if g.label in chosen]
    try:
        paths = read_paths_file(out.path / PATHS_FILE) if (out.path / PATHS_FILE).exists() \
            else None
    except InputError as e:  # no paths: every link ambiguous, said by its reasons
        say(f"[yellow]passive-first: the paths cannot be read ({e})")
        paths = None
    calibration = calibration_for(out.path, experiment.application or experiment.name,
                                  window[0])
    facts = link_facts([MeasuredLink.of(g) for g in links], list(experiment.transactions),
                       paths, session.snap_reports,
                       {**session.addresses, **session.ipv6_addresses}, window)
    choices, record = choose(facts, [q.move for q in experiment.parameters.questions],
                             calibration.describe() if calibration else None, reach)
    out.write(STRATEGY_FILE, record.model_dump(mode="json"))
    chosen = {c.label for c in choices if c.inject}
    say(f"passive-first: {len(chosen)} of {len(choices)} links to inject; calibration: "
        f"{record.calibration or 'none'}")
    for c in choices:
        say(f"  {'inject' if c.inject else 'passive'} {c.label}: {'; '.join(c.reasons)}")
    return [g for g in links if g.label in chosen]


def train_until_enough(session: Session, start: float, say: Say) -> None:
    """Go on until the training holds what the spectrum needs at the request rate seen
    (`training_needed_s`), or `max_training_s`; say how long and why."""
    p, clock, log = session.experiment.parameters, session.clock, session.log
    assert log is not None
    patterns = patterns_from(session.experiment.transactions)
    while True:
        now = clock.time()
        elapsed = now - start
        needed = training_needed_s(training_requests(log.snapshot(), patterns, start, now), p.k)
        if needed is None:
            say(f"training: too few requests of the transactions in {elapsed:.0f} s to size "
                "the spectrum's bins")
            return
        if needed <= elapsed:
            say(f"training: {elapsed:.0f} s hold what the spectrum needs ({needed:.0f} s)")
            return
        if elapsed >= p.max_training_s - 1:
            say(f"[yellow]training stops at max_training_s={p.max_training_s:g}: the spectrum "
                f"needs {needed:.0f} s at this request rate")
            return
        wait = min(needed, p.max_training_s) - elapsed
        say(f"training: the spectrum needs {needed:.0f} s at this request rate "
            f"({TRAIN_CHUNKS} chunks of {TRAIN_BINS} bins of ~{p.k} requests); {wait:.0f} s more")
        sleep_checking(clock, wait)


def plan_measurement(session: Session, out: RunDir, training: Training, say: Say
         ) -> tuple[Baseline, WavePlan, list[GraphLink]]:
    """Phase 2b: the baseline, the square wave and the links to measure (all written)."""
    experiment, start, end = session.experiment, training.start_s, training.end_s
    out.write("graph.json", [MeasuredLink.of(g).model_dump() for g in training.graph])
    assert session.log is not None
    train_log = session.log.snapshot()
    by_tx = training_requests(train_log, patterns_from(experiment.transactions), start, end)
    baseline = BaselineFile.of(response_baselines(by_tx), start, end)
    out.write("baseline.json", baseline.model_dump(mode="json"))
    base_rate = float(sum(len(t) for t, _ in by_tx.values()) / (end - start))
    responses = np.concatenate([y for _, y in by_tx.values()] or [np.zeros(0)])
    base = Baseline(end, base_rate, float(responses.mean() * 1e3) if len(responses) else 0.0,
                    failed_fraction(train_log, start, end))
    if base.failed_fraction is None:
        if "error_rate_limit" in experiment.parameters.model_fields_set:
            raise InputError(field_problem(  # the experiment's limit, found in the log
                experiment, ("parameters", "error_rate_limit"), "the web log has no HTTP "
                "status (a CSV log needs a status column): the error rate cannot be watched"))
        say("the web log has no HTTP status: the error rate is not watched")
    elif warning := failing_before_delay(base, experiment.parameters):
        session.warnings.append(warning)
        say(f"[yellow]{warning}")
    try:
        wave = plan_wave(by_tx, end, experiment.parameters)
    except PlanBeyondCap as e:
        raise InputError(field_problem(experiment, ("parameters", "max_duration_s"), str(e))
                         ) from e
    plan = PlanFile.of(wave, experiment.parameters.half_width, (start, end), base_rate,
                       base.failed_fraction)
    out.write("plan.json", plan.model_dump(mode="json"))  # nulls kept: said, not left out
    nodes, p = experiment.nodes, experiment.parameters
    candidates = application(training.graph, nodes.processes, nodes.ports)
    links = select(candidates, p.include, p.exclude)
    say(f"graph: {len(training.graph)} links, {len(candidates)} between the application's nodes")
    for line in explain_selection(candidates, p.include, p.exclude):
        say(f"  {line}")
    if left_out := [g for g in links if {g.src_host, g.dst_host} & set(session.absent)]:
        links = [g for g in links if g not in left_out]
        hosts = sorted({h for g in left_out for h in (g.src_host, g.dst_host)
                        if h in session.absent})
        say(f"  {len(left_out)} link(s) not measured: {', '.join(hosts)} left out (optional: "
            f"{'; '.join(session.absent[h] for h in hosts)})")
    if p.strategy == "passive-first":
        links = passive_first(session, out, links, (start, end), say, reach_of(wave, p))
    for note in wave.notes:
        say(f"plan: {note}")
    return base, wave, links

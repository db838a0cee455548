"""`linkgrad run experiment.yaml`: the measurement algorithm of thesis §3.2 on live hosts.

Its phases, each a function of its own:
1. `open_session`: connect (SSH, verified keys), start a sniffer on every host, follow the web log.
2. `train`: the sniffers' reports make the communication graph; the requests of the passive
   phase give the baseline and the square wave (`plan_measurement`: period from the quietest
   frequency, delay for the wanted interval).
3. `measure_all`: for every link (each direction), an adaptive cycle to rescale the delay by a
   rough gradient, then the measurement; the injector's actual mean delay and our estimator
   give every transaction's gradient. Throughput and errors are watched throughout: a limit
   crossed aborts.
4. `finish`: every lease ends (the daemons stop injecting and remove their rules), the log is
   saved and the journal written, whatever happened before.

Everything measured is written as it is measured; Ctrl-C or SIGTERM ends the run through
`finish` and keeps what was measured. A run can be resumed, skipping finished links.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import InputError, Problem
from common.protocol.injector import Add, Remove, SquareSchedule
from common.protocol.record import InjectionRecord
from common.protocol.sniffer import Unwatch, Watch
from common.square_wave import SquareWave
from coordinator.config.experiment import Experiment, Parameters
from coordinator.config.run_dir import (
    LinkMeasurement,
    Perturbation,
    RunDir,
    RunJournal,
    WaveEstimate,
    measurement_key,
)
from coordinator.core.estimate import gradient_json, log_gradients, settings_for_log
from coordinator.core.graph import GraphLink, application, build_graph, select
from coordinator.core.transactions import group_by_transaction, patterns_from
from coordinator.core.watch import (
    WATCH_S,
    Aborted,
    Baseline,
    baseline_json,
    check_limits,
    failed_fraction,
    training_requests,
)
from coordinator.core.wave_plan import WavePlan, plan_wave
from coordinator.core.weblog.model import RequestLog
from coordinator.live.clock import SYSTEM, Clock, sleep_checking
from coordinator.live.session import Connect, Session, sigterm_as_interrupt, ssh_connect

TAIL_S = 3.0  # after a wave ends, the requests that started in it are still being logged
Say = Callable[[str], None]


@dataclass(frozen=True)
class Training:
    """What the passive phase saw."""

    graph: list[GraphLink]
    start_s: float
    end_s: float


def run_experiment(experiment: Experiment, run_dir: Path, say: Say, resume: bool = False,
                   connect: Connect = ssh_connect, clock: Clock = SYSTEM) -> RunJournal:
    """The whole run; its journal (also `run_dir/run.json`). Raises only what is not the
    run's own outcome (a bug, a failure to reach a host is `failed` and re-raised)."""
    out = RunDir(run_dir)
    out.write("experiment.json", experiment.model_dump(mode="json"))
    done = {m.key: m for m in out.measurements()} if resume else {}
    journal = RunJournal(status="running", started=clock.time(), links_done=len(done))
    out.write("run.json", journal)
    session = Session(experiment, connect, clock)
    with _sigterm_as_interrupt():
        try:
            journal = journal.model_copy(update={"warnings": open_session(session, say)})
            training = train(session, say)
            base, plan, links = plan_measurement(session, out, training, say)
            measure_all(session, out, links, plan, base, done, say)
            journal = journal.model_copy(update={"status": "completed"})
        except Aborted as e:
            journal = journal.model_copy(update={"status": "aborted", "reason": str(e)})
        except KeyboardInterrupt:
            journal = journal.model_copy(update={"status": "interrupted"})
        except Exception as e:
            journal = journal.model_copy(update={"status": "failed", "reason": str(e)})
            raise
        finally:
            journal = finish(session, out, journal, say)
    return journal


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, sigterm_as_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def open_session(session: Session, say: Say) -> list[str]:
    """Phase 1: connect, start the sniffers, follow the log; what a daemon cannot do."""
    session.open()
    for warning in session.warnings:
        say(f"[yellow]{warning}")
    return session.warnings


def train(session: Session, say: Say) -> Training:
    """Phase 2a: passive observation; the communication graph from the sniffers' reports."""
    p, clock = session.experiment.parameters, session.clock
    start = clock.time()
    for sniffer in session.sniffers.values():
        sniffer.call(Watch(interval_s=2.0))
    say(f"training: {p.training_s:.0f} s of passive observation")
    sleep_checking(clock, p.training_s)
    for sniffer in session.sniffers.values():
        sniffer.call(Unwatch())  # its last report comes before this answer
    end = clock.time()
    return Training(build_graph(session.reports, session.addresses, p.message_threshold),
                    start, end)


def plan_measurement(session: Session, out: RunDir, training: Training, say: Say
         ) -> tuple[Baseline, WavePlan, list[GraphLink]]:
    """Phase 2b: the baseline, the square wave and the links to measure (all written)."""
    experiment, start, end = session.experiment, training.start_s, training.end_s
    out.write("graph.json", [g.as_json() for g in training.graph])
    assert session.log is not None
    train_log = session.log.snapshot()
    by_tx = training_requests(train_log, patterns_from(experiment.transactions), start, end)
    out.write("baseline.json", baseline_json(by_tx, start, end))
    base_rate = float(sum(len(t) for t, _ in by_tx.values()) / (end - start))
    responses = np.concatenate([y for _, y in by_tx.values()] or [np.zeros(0)])
    base = Baseline(end, base_rate, float(responses.mean() * 1e3) if len(responses) else 0.0,
                    failed_fraction(train_log, start, end))
    if base.failed_fraction is None:
        if "error_rate_limit" in experiment.parameters.model_fields_set:
            raise InputError(Problem("the web log has no HTTP status (a CSV log needs a "
                                     "status column): the error rate cannot be watched",
                                     field="parameters.error_rate_limit"))
        say("the web log has no HTTP status: the error rate is not watched")
    wave = plan_wave(by_tx, end, experiment.parameters)
    out.write("plan.json", {"period_s": wave.period_s, "cycles": wave.cycles,
                            "magnitude_ms": wave.magnitude_s * 1e3, "n_bins": wave.n_bins,
                            "notes": list(wave.notes), "training": [start, end],
                            "training_requests_per_s": base_rate,
                            "training_failed_fraction": base.failed_fraction})
    nodes = experiment.nodes
    links = select(application(training.graph, nodes.processes, nodes.ports),
                   experiment.parameters.include, experiment.parameters.exclude)
    say(f"graph: {len(training.graph)} links, measuring {len(links)}; " + "; ".join(wave.notes))
    return base, wave, links


def finish(session: Session, out: RunDir, journal: RunJournal, say: Say) -> RunJournal:
    """Phase 4, whatever happened: every lease ends (no injection survives the run), the log
    is kept, the journal written."""
    if problems := session.close():
        journal = journal.model_copy(update={"cleanup_problems": problems})
        say("[red]cleanup: " + "; ".join(problems))
    if session.log is not None:
        session.log.save(out.path / "weblog.log")
    journal = journal.model_copy(update={"ended": session.clock.time()})
    out.write("run.json", journal)
    return journal


def inject_and_estimate(session: Session, waves: list[tuple[GraphLink, SquareWave]],
                        base: Baseline) -> list[WaveEstimate]:
    """Square waves on links at once (orthogonal when their periods are T, 2T, 4T... from one
    first edge), then every transaction's gradient for each link."""
    p, clock = session.experiment.parameters, session.clock
    added = []
    try:
        for link, wave in waves:
            injector = session.link_injector(link.src_host, link.dst_host)
            reply = injector.call(Add(link=link.injector_link(),
                                      schedule=SquareSchedule.of(wave)))
            added.append((injector, reply.link_id))
        assert session.log is not None
        log = session.log
        labels = ", ".join(link.label for link, _ in waves)
        start = min(w.start_s for _, w in waves)

        def safe() -> None:
            if clock.time() > start + WATCH_S:
                check_limits(log.rate_per_s(WATCH_S), log.recent(WATCH_S), base, p, labels)

        sleep_checking(clock, max(w.end_s for _, w in waves) - clock.time(), safe)
    finally:
        applied = [injector.call(Remove(link_id=link_id)).stats.applied()
                   for injector, link_id in added]
    sleep_checking(clock, TAIL_S)
    snap = log.snapshot()
    groups = group_by_transaction(snap.url, patterns_from(session.experiment.transactions))
    all_waves = [w for _, w in waves]
    return [_estimate(snap, groups, link, wave, on.mean_ms, on.count, base, p,
                      tuple(o for o in all_waves if o is not wave))
            for (link, wave), on in zip(waves, applied, strict=True)]


def _estimate(snap: RequestLog, groups: dict[str, np.ndarray], link: GraphLink,
              wave: SquareWave, applied_ms: float | None, packets: int, base: Baseline,
              p: Parameters, others: tuple[SquareWave, ...] = ()) -> WaveEstimate:
    actual_ms = applied_ms or wave.magnitude_s * 1e3  # no packet while on: as asked
    measured = SquareWave(wave.start_s, wave.period_s, wave.cycles, actual_ms / 1e3)
    results = log_gradients(snap.start_s, snap.response_s, groups, measured,
                            settings_for_log(snap.time_resolution_s, p.k, p.chunks),
                            baseline_end_s=base.end_s, others=others)
    during = (snap.start_s >= wave.start_s) & (snap.start_s < wave.end_s)
    rate = float(during.sum() / wave.duration_s)
    mean_ms = float(snap.response_s[during].mean() * 1e3) if during.any() else float("nan")
    return WaveEstimate(
        record=InjectionRecord.of(wave, actual_ms, link.label),
        requested_ms=wave.magnitude_s * 1e3,
        packets_delayed=packets,
        perturbation=Perturbation(throughput_per_s=rate,
                                  throughput_change=rate / base.rate_per_s - 1,
                                  mean_response_ms=mean_ms,
                                  mean_response_change_ms=mean_ms - base.mean_response_ms),
        transactions={n: gradient_json(r) for n, r in results.items()})


def rough_rescale(result: WaveEstimate, planned_s: float, cap_s: float) -> float:
    """Thesis §3.2.2: A' = A / (rough gradient), the largest over transactions, so the
    response-time effect stays about A however many times the link is crossed."""
    rough = [abs(t["gradient"]) for t in result.transactions.values()
             if t["gradient"] is not None]
    g = max(rough, default=1.0)
    return float(min(cap_s, max(0.001, planned_s / max(g, 0.25))))


def group_waves(plan: WavePlan, count: int, start_s: float,
                magnitudes: list[float]) -> list[SquareWave]:
    """Periods T, 2T, 4T... from one first edge, over one window holding `plan.cycles` of T
    and at least two of the slowest: orthogonal waves with disjoint harmonics."""
    slowest = plan.period_s * 2 ** (count - 1)
    window = max(plan.cycles * plan.period_s, 2 * slowest)
    return [SquareWave(start_s, plan.period_s * 2**j, round(window / (plan.period_s * 2**j)),
                       magnitudes[j]) for j in range(count)]


def group_duration_s(plan: WavePlan, count: int, adaptive: bool) -> float:
    window = max(plan.cycles * plan.period_s, 2 * plan.period_s * 2 ** (count - 1))
    first = (plan.period_s * 2 ** (count - 1) + plan.period_s + TAIL_S + 1) if adaptive else 0
    return first + window + plan.period_s * 2 ** (count - 1) / 2 + TAIL_S + 1


def measure_group(session: Session, links: list[GraphLink], plan: WavePlan, base: Baseline,
                  say: Say, fixed_ms: float | None = None) -> list[LinkMeasurement]:
    """Links at once, at periods T, 2T...; at `fixed_ms` (one of magnitudes_ms) if given,
    else at the plan's delay rescaled by the adaptive cycle."""
    p, clock = session.experiment.parameters, session.clock
    magnitudes = [plan.magnitude_s if fixed_ms is None else fixed_ms / 1e3] * len(links)
    adaptive: list[WaveEstimate | None] = [None] * len(links)
    if p.adaptive and fixed_ms is None:  # one cycle of each wave, then rescale each
        waves = group_waves(plan, len(links), clock.time() + 1.0, magnitudes)
        waves = [SquareWave(w.start_s, w.period_s, max(1, w.cycles // plan.cycles), w.magnitude_s)
                 for w in waves]
        say(f"adaptive cycle: {', '.join(link.label for link in links)}")
        rough = inject_and_estimate(session, list(zip(links, waves, strict=True)), base)
        adaptive = list(rough)
        magnitudes = [rough_rescale(a, plan.magnitude_s, p.max_delay_ms / 1e3) for a in rough]
        sleep_checking(clock, max(w.period_s for w in waves) / 2)  # off before the next edge
    waves = group_waves(plan, len(links), clock.time() + 1.0, magnitudes)
    for link, wave in zip(links, waves, strict=True):
        say(f"{link.label}: {wave.cycles} cycles of {wave.period_s:.1f} s at "
            f"{wave.magnitude_s * 1e3:.1f} ms")
    results = inject_and_estimate(session, list(zip(links, waves, strict=True)), base)
    sleep_checking(clock, max(w.period_s for w in waves) / 2)
    return [LinkMeasurement(link=link.as_json(), adaptive=a, concurrent_with=len(links) - 1,
                            planned_ms=fixed_ms, **dict(r))
            for link, a, r in zip(links, adaptive, results, strict=True)]


def jobs(links: list[GraphLink], done: dict[str, LinkMeasurement], p: Parameters
         ) -> list[tuple[list[GraphLink], float | None]]:
    """Groups of `concurrent` links still to measure, once per delay of magnitudes_ms (or
    once at the planned delay)."""
    out: list[tuple[list[GraphLink], float | None]] = []
    for fixed in p.magnitudes_ms or (None,):
        todo = [link for link in links if measurement_key(link.label, fixed) not in done]
        out += [(todo[i:i + p.concurrent], fixed) for i in range(0, len(todo), p.concurrent)]
    return out


def measure_all(session: Session, out: RunDir, links: list[GraphLink], plan: WavePlan,
                base: Baseline, done: dict[str, LinkMeasurement], say: Say) -> None:
    """Phase 3: every job in turn; each finished group is written at once (records,
    gradients, log)."""
    experiment, log = session.experiment, session.log
    assert log is not None
    results = list(done.values())
    todo = jobs(links, done, experiment.parameters)
    for i, (group, fixed) in enumerate(todo, 1):
        left = sum(group_duration_s(plan, len(g), experiment.parameters.adaptive and f is None)
                   for g, f in todo[i - 1:])
        at = f" at {fixed:g} ms" if fixed is not None else ""
        say(f"group {i}/{len(todo)} ({len(group)} link(s){at}); about {left:.0f} s left")
        measured = measure_group(session, group, plan, base, say, fixed)
        files = [f"injections/{len(results) + j:03d}.json" for j in range(1, len(group) + 1)]
        for result, name in zip(measured, files, strict=True):  # DESIGN.md's record
            out.write(name, result.record)
            partners = [f for f in files if f != name]
            results.append(result.model_copy(update={
                "injection": name, "concurrent_injections": partners,
                "recompute_argv": recompute_argv(experiment, name, partners, base.end_s)}))
        out.write_measurements(experiment.name, results)
        log.save(out.path / "weblog.log")


def recompute_argv(experiment: Experiment, injection: str, partners: list[str],
                   baseline_end_s: float) -> list[str]:
    """`linkgrad gradient` arguments (run from the run directory) that recompute a link offline
    from the run's files with exactly the run's inputs."""
    log = experiment.web_log
    assert log is not None
    argv = ["linkgrad", "gradient", "--log", "weblog.log", "--format", log.format]
    argv += ["--log-format", log.log_format] if log.log_format else []
    argv += ["--injection", injection, "--baseline-end", repr(baseline_end_s),
             "-k", str(experiment.parameters.k), "--chunks", str(experiment.parameters.chunks)]
    for partner in partners:
        argv += ["--concurrent", partner]
    for name, regex in experiment.transactions.items():
        argv += ["--transaction", f"{name}={regex}"]
    return [*argv, "--json"]

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

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coordinator.config.coordinator_process import this_coordinator
from coordinator.config.experiment import Experiment, Parameters
from coordinator.config.experiment_files import field_problem
from coordinator.config.run_dir import RunDir, linearity_of, read_record
from coordinator.config.run_records import (
    LinkMeasurement,
    MeasuredLink,
    MeasurementKey,
    Perturbation,
    PlanFile,
    RunJournal,
    WaveEstimate,
)
from coordinator.live import passive, paths_evidence
from coordinator.live.clock import SYSTEM, Clock, sleep_checking
from coordinator.live.session import Connect, Say, Session, sigterm_interrupts, ssh_connect
from coordinator.live.ssh import Endpoint
from linkgrad.errors import InputError, Problem
from linkgrad.graph import (
    GraphLink,
    application,
    build_graph,
    explain_selection,
    select,
)
from linkgrad.protocol.injector import Add, Remove, SquareSchedule
from linkgrad.protocol.record import InjectionRecord, recorded_delay_ms
from linkgrad.protocol.snap import Profile
from linkgrad.protocol.sniffer import Unwatch, Watch
from linkgrad.spectral.estimate import log_gradients, settings_for_log
from linkgrad.spectral.result import GradientResult, delay_disagreement
from linkgrad.spectral.wave_plan import (
    TRAIN_BINS,
    TRAIN_CHUNKS,
    Precision,
    RoughGradient,
    WavePlan,
    next_delay,
    plan_wave,
    precision_shortfall,
    training_needed_s,
)
from linkgrad.square_wave import SquareWave
from linkgrad.transactions import group_by_transaction, patterns_from
from linkgrad.watch import (
    WATCH_S,
    Aborted,
    Baseline,
    baseline_json,
    check_limits,
    failed_fraction,
    training_requests,
)
from linkgrad.weblog.model import RequestLog

ADAPTIVE_S = 10.0  # an adaptive round lasts at least this long (or half the measurement)
TAIL_S = 3.0  # after a wave ends, the requests that started in it are still being logged


@dataclass(frozen=True)
class Training:
    """What the passive phase saw."""

    graph: list[GraphLink]
    start_s: float
    end_s: float


SAME_ON_RESUME = ("name", "hosts", "transactions", "web_log")


def _same_experiment(experiment: Experiment, path: Path) -> None:
    """InputError unless `path` (a run directory's experiment.json) is the same experiment as
    to what it measures: resuming with another would overwrite it and mix two runs' links."""
    if not path.exists():
        return
    before = RunDir(path.parent).read("experiment.json")
    now = experiment.model_dump(mode="json")
    differ = [key for key in SAME_ON_RESUME
              if isinstance(before, dict) and before.get(key) != now.get(key)]
    if not isinstance(before, dict) or differ:
        raise InputError(Problem(
            "this run directory holds another experiment's run (differs in "
            f"{', '.join(differ) or 'everything'} from {experiment.source or 'the experiment'}"
            "): resume it with the experiment file it was started with", str(path),
            field=differ[0] if differ else None))


def _finished(run_dir: Path) -> RunJournal | None:
    """The journal of a run that completed every link it planned, else None."""
    path = run_dir / "run.json"
    if not path.exists():
        return None
    journal = read_record(path, RunJournal, "how the run went")
    complete = (journal.status == "completed" and journal.links_planned is not None
                and journal.links_done >= journal.links_planned)
    return journal if complete else None


def run_experiment(experiment: Experiment, run_dir: Path, say: Say, resume: bool = False,
                   connect: Connect = ssh_connect, clock: Clock = SYSTEM,
                   endpoints: dict[str, Endpoint] | None = None) -> RunJournal:
    """The whole run; its journal (also `run_dir/run.json`). Raises only what is not the
    run's own outcome (a bug, a failure to reach a host is `failed` and re-raised).
    `endpoints`: the hosts' as the command checked them (`check_local_files`), not looked up
    again."""
    out = RunDir(run_dir)
    if resume and (finished := _finished(run_dir)) is not None:
        say(f"the run completed all {finished.links_planned} links: nothing to resume")
        return finished  # its files stay as they are: no host is touched
    if resume:
        _same_experiment(experiment, run_dir / "experiment.json")
    out.write("experiment.json", experiment.model_dump(mode="json"))
    done = {m.key: m for m in out.measurements()} if resume else {}
    # who is running it: a coordinator killed outright leaves `running`, and this tells
    journal = RunJournal(status="running", started=clock.time(), links_done=len(done),
                         links_resumed=len(done), coordinator=this_coordinator())
    out.write("run.json", journal)
    session = Session(experiment, connect, clock, endpoints=endpoints)
    with sigterm_interrupts():
        try:
            journal = journal.model_copy(update={"warnings": open_session(session, say)})
            training = train(session, out, say)
            base, plan, links = plan_measurement(session, out, training, say)
            planned = len(links) * max(1, len(experiment.parameters.magnitudes_ms))
            journal = journal.model_copy(update={"links_planned": planned})
            out.write("run.json", journal)
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


def open_session(session: Session, say: Say) -> list[str]:
    """Phase 1: connect, start the sniffers and their SNAP profiling (for the whole run),
    follow the log; what a daemon cannot do."""
    session.open()
    snap = session.experiment.snap
    if snap.enabled:
        session.warnings += session.start_profiling(Profile(
            report_interval_s=snap.report_interval_s, table_interval_s=snap.table_interval_s,
            cpu_lower_pct=snap.cpu_lower_pct, cpu_upper_pct=snap.cpu_upper_pct,
            max_queuing_delay_s=snap.max_queuing_delay_ms / 1e3,
            delayed_ack_timeout_s=snap.delayed_ack_timeout_ms / 1e3,
            socket_calls=snap.socket_calls))
    for warning in session.warnings:
        say(f"[yellow]{warning}")
    return session.warnings


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
            raise InputError(field_problem(  # the experiment's limit, found in the log
                experiment, ("parameters", "error_rate_limit"), "the web log has no HTTP "
                "status (a CSV log needs a status column): the error rate cannot be watched"))
        say("the web log has no HTTP status: the error rate is not watched")
    wave = plan_wave(by_tx, end, experiment.parameters)
    plan = PlanFile.of(wave, experiment.parameters.half_width, (start, end), base_rate,
                       base.failed_fraction)
    out.write("plan.json", plan.model_dump(mode="json"))  # nulls kept: said, not left out
    nodes, p = experiment.nodes, experiment.parameters
    candidates = application(training.graph, nodes.processes, nodes.ports)
    links = select(candidates, p.include, p.exclude)
    say(f"graph: {len(training.graph)} links, {len(candidates)} between the application's nodes")
    for line in explain_selection(candidates, p.include, p.exclude):
        say(f"  {line}")
    for note in wave.notes:
        say(f"plan: {note}")
    return base, wave, links


def finish(session: Session, out: RunDir, journal: RunJournal, say: Say) -> RunJournal:
    """Phase 4, whatever happened: every lease ends (no injection survives the run), the log
    is kept, the journal written."""
    try:  # SNAP's evidence is no reason to skip the cleanup below
        if unprofiled := session.stop_profiling():  # each host's last SNAP report, before
            journal = journal.model_copy(update={  # its sniffer goes
                "warnings": [*(journal.warnings or []), *unprofiled]})
            say("[yellow]" + "; ".join(unprofiled))
        passive.save(out, session.experiment.name, session.profiling, session.snap_reports,
                     {**session.addresses, **session.ipv6_addresses},
                     session.experiment.snap.max_queuing_delay_ms * 1e3)
    except Exception as e:  # reported in run.json; the leases must still end
        journal = journal.model_copy(update={
            "warnings": [*(journal.warnings or []), f"SNAP's profile not saved: {e}"]})
        say(f"[yellow]SNAP's profile not saved: {e}")
    if problems := session.close():
        journal = journal.model_copy(update={"cleanup_problems": problems})
        say("[red]cleanup: " + "; ".join(problems))
    if session.log is not None:
        session.log.save(out.path / "weblog.log")
    done = len(out.measurements())
    journal = journal.model_copy(update={"ended": session.clock.time(), "links_done": done})
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
                check_limits(log.judged(), base, p, labels)

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
    # the delay the record can hold: a mean past its limits is noted, never a failed run
    actual_ms, note = recorded_delay_ms(applied_ms, packets, wave.magnitude_s * 1e3)
    measured = SquareWave(wave.start_s, wave.period_s, wave.cycles, actual_ms / 1e3)
    results = log_gradients(snap.start_s, snap.response_s, groups, measured,
                            settings_for_log(snap.time_resolution_s, p.k, p.chunks),
                            baseline_end_s=base.end_s, others=others)
    transactions = {n: GradientResult.of(r).noted(*[note] * bool(note))
                    for n, r in results.items()}
    return WaveEstimate(
        record=InjectionRecord.of(wave, actual_ms, link.label),
        requested_ms=wave.magnitude_s * 1e3,
        packets_delayed=packets,
        perturbation=perturbation(snap, wave),
        transactions=transactions)


def perturbation(snap: RequestLog, wave: SquareWave) -> Perturbation:
    """On half-periods against off ones: `cycles` on, and `cycles + 1` off (the one before
    the first edge too, so both sides have the same mean time)."""
    t = snap.start_s
    window = (t >= wave.start_s - wave.half_s) & (t < wave.end_s)
    on = window & wave.is_on(t)
    off = window & ~on

    def mean_ms(rows: np.ndarray) -> float:
        return float(snap.response_s[rows].mean() * 1e3) if rows.any() else float("nan")

    rate_on = float(on.sum() / (wave.cycles * wave.half_s))
    rate_off = float(off.sum() / ((wave.cycles + 1) * wave.half_s))
    return Perturbation(
        throughput_per_s=rate_on,
        throughput_change=rate_on / rate_off - 1 if rate_off else float("nan"),
        mean_response_ms=mean_ms(on), mean_response_change_ms=mean_ms(on) - mean_ms(off),
        throughput_off_per_s=rate_off, mean_response_off_ms=mean_ms(off),
        # an open loop's arrivals are Poisson: its count alone moves this much
        throughput_change_se=float(np.sqrt(1 / on.sum() + 1 / off.sum()))
        if on.any() and off.any() else None)


def rough_gradients(result: WaveEstimate) -> dict[str, RoughGradient]:
    """Each transaction's gradient and 95% half-width from an adaptive cycle."""
    out = {}
    for name, t in result.transactions.items():
        if t.gradient is not None and t.half_width is not None:
            out[name] = RoughGradient(t.gradient, max(t.half_width, 1e-9))
    return out


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
    first = (plan.period_s * 2 ** (count - 1) * adaptive_cycles(plan) + plan.period_s + TAIL_S
             + 1) if adaptive else 0
    return first + window + plan.period_s * 2 ** (count - 1) / 2 + TAIL_S + 1


def measure_group(session: Session, links: list[GraphLink], plan: WavePlan, base: Baseline,
                  say: Say, fixed_ms: float | None = None) -> list[LinkMeasurement]:
    """Links at once, at periods T, 2T...; at `fixed_ms` (one of magnitudes_ms) if given,
    else at the delay the adaptive cycles choose for each (`adapt`)."""
    p, clock = session.experiment.parameters, session.clock
    magnitudes = [plan.magnitude_s if fixed_ms is None else fixed_ms / 1e3] * len(links)
    adaptive: list[WaveEstimate | None] = [None] * len(links)
    if p.adaptive and p.magnitude_ms is None and fixed_ms is None:
        magnitudes, adaptive = adapt(session, links, plan, base, say)
    waves = group_waves(plan, len(links), clock.time() + 1.0, magnitudes)
    for link, wave in zip(links, waves, strict=True):
        say(f"{link.label}: {wave.cycles} cycles of {wave.period_s:.1f} s at "
            f"{wave.magnitude_s * 1e3:.2f} ms")
    results = inject_and_estimate(session, list(zip(links, waves, strict=True)), base)
    sleep_checking(clock, max(w.period_s for w in waves) / 2)
    return [LinkMeasurement(link=MeasuredLink.of(link), adaptive=a, concurrent_with=len(links) - 1,
                            planned_ms=fixed_ms,
                            **dict(_with_precision(_with_linearity(r, a), p.half_width)))
            for link, a, r in zip(links, adaptive, results, strict=True)]


def _with_precision(result: WaveEstimate, wanted: Precision) -> WaveEstimate:
    """The measurement with a note per transaction whose interval is much wider than wanted."""
    transactions = {}
    for name, t in result.transactions.items():
        note = precision_shortfall(t.gradient, t.ci95, wanted)
        transactions[name] = t.noted(note) if note else t
    return result.model_copy(update={"transactions": transactions})


def _with_linearity(result: WaveEstimate, adaptive: WaveEstimate | None) -> WaveEstimate:
    """The measurement with a note per transaction whose last adaptive cycle, at another
    delay, disagreed with it beyond both intervals."""
    if adaptive is None:
        return result
    transactions = {}
    for name, t in result.transactions.items():
        rough = adaptive.transactions.get(name)
        note = rough and delay_disagreement(rough, adaptive.record.magnitude_ms, t,
                                            result.record.magnitude_ms)
        transactions[name] = t.noted(note) if note else t
    return result.model_copy(update={"transactions": transactions})


def adaptive_cycles(plan: WavePlan) -> int:
    """The thesis's single cycle, or as many as make ADAPTIVE_S (a short period's one cycle
    holds too few requests for a rough gradient), at most half the measurement's."""
    return max(1, min(math.ceil(ADAPTIVE_S / plan.period_s), plan.cycles // 2))


def adapt(session: Session, links: list[GraphLink], plan: WavePlan, base: Baseline, say: Say
          ) -> tuple[list[float], list[WaveEstimate | None]]:
    """Thesis §3.2.2, grown from a small start: one cycle per link at a small delay, a rough
    gradient from it, and again at GROWTH times the delay while the rough gradient is unknown;
    then the delay the wanted precision needs under the effect cap (`next_delay`). Every
    change is said with its reason."""
    p, clock = session.experiment.parameters, session.clock
    delays = [plan.magnitude_s] * len(links)
    rough: list[dict[str, RoughGradient]] = [{} for _ in links]
    last: list[WaveEstimate | None] = [None] * len(links)
    pending = list(range(len(links)))
    while pending:
        waves = group_waves(plan, len(pending), clock.time() + 1.0, [delays[i] for i in pending])
        waves = [SquareWave(w.start_s, w.period_s, max(1, w.cycles * adaptive_cycles(plan)
                                                       // plan.cycles), w.magnitude_s)
                 for w in waves]
        say("adaptive cycle: " + ", ".join(f"{links[i].label} at {delays[i] * 1e3:.2f} ms"
                                           for i in pending))
        estimates = inject_and_estimate(
            session, [(links[i], w) for i, w in zip(pending, waves, strict=True)], base)
        sleep_checking(clock, max(w.period_s for w in waves) / 2)  # off before the next edge
        still = []
        for i, estimate in zip(pending, estimates, strict=True):
            last[i] = estimate
            for name, r in rough_gradients(estimate).items():
                rough[i][name] = rough[i][name].combined(r) if name in rough[i] else r
            choice = next_delay(rough[i], delays[i], plan, p.half_width, p.max_delay_ms / 1e3)
            verb = "measuring at" if choice.final else "growing to"
            say(f"{links[i].label}: {choice.reason}; {verb} {choice.delay_s * 1e3:.2f} ms")
            delays[i] = choice.delay_s
            if not choice.final:
                still.append(i)
        pending = still
    return delays, last


def jobs(links: list[GraphLink], done: dict[MeasurementKey, LinkMeasurement], p: Parameters
         ) -> list[tuple[list[GraphLink], float | None]]:
    """Groups of `concurrent` links still to measure, once per delay of magnitudes_ms (or
    once at the planned delay)."""
    out: list[tuple[list[GraphLink], float | None]] = []
    for fixed in p.magnitudes_ms or (None,):
        todo = [link for link in links if MeasurementKey(link.label, fixed) not in done]
        out += [(todo[i:i + p.concurrent], fixed) for i in range(0, len(todo), p.concurrent)]
    return out


def measure_all(session: Session, out: RunDir, links: list[GraphLink], plan: WavePlan,
                base: Baseline, done: dict[MeasurementKey, LinkMeasurement], say: Say
                ) -> None:
    """Phase 3: every job in turn; each finished group is written at once (records,
    gradients, log)."""
    experiment, log = session.experiment, session.log
    assert log is not None
    results = list(done.values())
    todo = jobs(links, done, experiment.parameters)
    for i, (group, fixed) in enumerate(todo, 1):
        p = experiment.parameters
        adaptive = p.adaptive and p.magnitude_ms is None
        left = sum(group_duration_s(plan, len(g), adaptive and f is None)
                   for g, f in todo[i - 1:])
        at = f" at {fixed:g} ms" if fixed is not None else ""
        say(f"group {i}/{len(todo)} ({len(group)} link(s){at}); about {left:.0f} s left"
            + (" (more while a delay grows)" if adaptive and fixed is None else ""))
        measured = measure_group(session, group, plan, base, say, fixed)
        files = [f"injections/{len(results) + j:03d}.json" for j in range(1, len(group) + 1)]
        for result, name in zip(measured, files, strict=True):  # the injection record
            out.write(name, result.record)
            partners = [f for f in files if f != name]
            results.append(result.model_copy(update={
                "injection": name, "concurrent_injections": partners,
                "recompute_argv": recompute_argv(experiment, name, partners, base.end_s)}))
        out.write_measurements(experiment.name, results)
        log.save(out.path / "weblog.log")
    say_linearity(results, bool(experiment.parameters.magnitudes_ms), say)


def say_linearity(results: list[LinkMeasurement], every: bool, say: Say) -> None:
    """How gradients changed with the delay: all of it when the experiment asked for several
    delays, otherwise only a change beyond its interval (against the adaptive cycle)."""
    for x in linearity_of(results):
        if every or not x.linear:
            say(("linearity: " if x.linear else "[yellow]linearity:[/] ") + x.describe())


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

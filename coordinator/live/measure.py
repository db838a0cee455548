"""Phase 3 of a run: every link measured in groups of `concurrent`, each after adaptive
cycles that size its delay from a rough gradient (thesis §3.2.2), each finished group written
at once with the files that recompute it offline."""

from __future__ import annotations

import math
from dataclasses import replace

from coordinator.config.experiment import Experiment, Parameters
from coordinator.config.run_dir import RunDir, linearity_of
from coordinator.config.run_records import (
    LinkMeasurement,
    MeasuredLink,
    MeasurementKey,
    WaveEstimate,
)
from coordinator.live import probes
from coordinator.live.clock import sleep_checking
from coordinator.live.session import Say, Session
from coordinator.live.wave_estimate import TAIL_S, inject_and_estimate, rough_gradients
from linkgrad.graph import GraphLink
from linkgrad.spectral.result import delay_disagreement
from linkgrad.spectral.wave_plan import (
    Precision,
    RoughGradient,
    WavePlan,
    next_delay,
    precision_shortfall,
)
from linkgrad.square_wave import SquareWave
from linkgrad.watch import Baseline

ADAPTIVE_S = 10.0  # an adaptive round lasts at least this long (or half the measurement)


def band_cycles(count: int, cycles: int) -> list[int]:
    """Cycles per wave of `count` links measured in one window: consecutive counts down from
    the fastest's n, which holds the plan's `cycles` of its period. The slowest makes at least
    two cycles and more than a third of the fastest's, so no wave's fundamental is an odd
    harmonic (3rd, 5th...) of another's: each link's own line is clear of the others, which
    are fitted jointly for what their harmonics share. Octaves (T, 2T, 4T...) share no
    harmonic at all, but eight of them need a window of 256 periods; this band needs
    max(cycles, 11) for eight."""
    if count == 1:
        return [cycles]
    n = max(cycles, count + 1, 3 * (count - 1) // 2 + 1)
    return list(range(n, n - count, -1))


def group_waves(plan: WavePlan, count: int, start_s: float,
                magnitudes: list[float]) -> list[SquareWave]:
    """`count` waves from one first edge over one window of n plan periods (`band_cycles`):
    the first link the fastest, at the plan's period."""
    counts = band_cycles(count, plan.cycles)
    window = counts[0] * plan.period_s
    return [SquareWave(start_s, window / n, n, magnitudes[j]) for j, n in enumerate(counts)]


def adaptive_waves(plan: WavePlan, count: int, start_s: float,
                   magnitudes: list[float]) -> list[SquareWave]:
    """An adaptive round of the group: a band of its own over `adaptive_cycles` of the plan
    (one shared window, as the measurement's: shortening each wave alone would leave the
    slower ones a cycle or less, ending apart, too few to fit)."""
    return group_waves(replace(plan, cycles=adaptive_cycles(plan)), count, start_s, magnitudes)


def group_duration_s(plan: WavePlan, count: int, adaptive: bool) -> float:
    def took(waves: list[SquareWave]) -> float:
        return max(w.duration_s for w in waves) + max(w.period_s for w in waves) / 2 + TAIL_S + 1

    first = took(adaptive_waves(plan, count, 0.0, [1e-3] * count)) if adaptive else 0.0
    return first + took(group_waves(plan, count, 0.0, [1e-3] * count))


def group_size(plan: WavePlan, p: Parameters) -> int:
    """`concurrent`, or fewer where the group's window would pass max_duration_s (the
    injector refuses a wave longer than that): a band of N links needs N + 1 periods or more,
    11 for eight, the plan's cycles however few."""
    size = p.concurrent
    while size > 1 and band_cycles(size, plan.cycles)[0] * plan.period_s > (
            p.max_duration_s - plan.period_s):
        size -= 1
    return size


def measure_group(session: Session, links: list[GraphLink], plan: WavePlan, base: Baseline,
                  say: Say, fixed_ms: float | None = None) -> list[LinkMeasurement]:
    """Links at once, each at its own frequency (`group_waves`); at `fixed_ms` (one of
    magnitudes_ms) if given,
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
        transactions[name] = t.noted(note)
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
        transactions[name] = t.noted(note)
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
        waves = adaptive_waves(plan, len(pending), clock.time() + 1.0,
                               [delays[i] for i in pending])
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


def jobs(links: list[GraphLink], done: dict[MeasurementKey, LinkMeasurement], p: Parameters,
         size: int | None = None) -> list[tuple[list[GraphLink], float | None]]:
    """Groups of `size` (`concurrent`) links still to measure, once per delay of
    magnitudes_ms (or once at the planned delay)."""
    size = size or p.concurrent
    out: list[tuple[list[GraphLink], float | None]] = []
    for fixed in p.magnitudes_ms or (None,):
        todo = [link for link in links if MeasurementKey(link.label, fixed) not in done]
        out += [(todo[i:i + size], fixed) for i in range(0, len(todo), size)]
    return out


def measure_all(session: Session, out: RunDir, links: list[GraphLink], plan: WavePlan,
                base: Baseline, done: dict[MeasurementKey, LinkMeasurement], say: Say
                ) -> None:
    """Phase 3: every job in turn; each finished group is written at once (records,
    gradients, log)."""
    experiment, log = session.experiment, session.log
    assert log is not None
    results = list(done.values())
    size = group_size(plan, experiment.parameters)
    if size < experiment.parameters.concurrent:
        say(f"[yellow]{size} links at once, not concurrent={experiment.parameters.concurrent}: "
            f"{experiment.parameters.concurrent} at once need a window of "
            f"{band_cycles(experiment.parameters.concurrent, plan.cycles)[0]} periods of "
            f"{plan.period_s:.1f} s, beyond max_duration_s="
            f"{experiment.parameters.max_duration_s:g}")
    todo = jobs(links, done, experiment.parameters, size)
    for i, (group, fixed) in enumerate(todo, 1):
        p = experiment.parameters
        adaptive = p.adaptive and p.magnitude_ms is None
        left = sum(group_duration_s(plan, len(g), adaptive and f is None)
                   for g, f in todo[i - 1:])
        at = f" at {fixed:g} ms" if fixed is not None else ""
        say(f"group {i}/{len(todo)} ({len(group)} link(s){at}); about {left:.0f} s left"
            + (" (more while a delay grows)" if adaptive and fixed is None else ""))
        for problem in probes.open_phase(session, f"measure {i}/{len(todo)}{at}", group):
            session.warnings.append(problem)  # run.json's, with the daemons' others
            say(f"[yellow]{problem}")
        for problem in probes.save_series(session, out):  # the series so far, kept
            session.warnings.append(problem)
            say(f"[yellow]{problem}")
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

"""`linkgrad predict --validate`: apply a placement's latency changes for real and measure.

For each placement, the links of every host pair whose latency grows (the protocols the run
saw between them) go through the injector, and their delay is switched off and on in turn
(`alternation`: off, on, off, on, off, on, off) while every transaction's mean response time is
measured on each side. Both sides share the NFQUEUE detour (as the square wave's on and off
phases did), the latency change is the delay the injector actually applied, and a drift of the
machine's load weighs both sides alike. The prediction is remade from the off side (the system
may have drifted since the run) and the applied delays, and the on side's mean is compared with
it: `inside` allows for the measured mean's own standard error, `inside_mean_ci` does not. A
live system cannot be made faster: a placement that shortens a latency is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from coordinator.config.experiment import Experiment
from coordinator.config.run_dir import read_record
from coordinator.config.run_inputs import RunInputs
from coordinator.config.run_records import Pair
from coordinator.live.clock import SYSTEM, Clock, sleep_checking
from coordinator.live.session import Connect, Session, sigterm_interrupts, ssh_connect
from linkgrad.alternation import OFF, ON, Alternation
from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.prediction import Z95, Estimate, batch_mean, predict
from linkgrad.protocol.injector import (
    ON as PHASE_ON,
)
from linkgrad.protocol.injector import (
    Add,
    ConstantSchedule,
    LinkSpec,
    LinkStats,
    Remove,
    SetSchedule,
    SquareSchedule,
)
from linkgrad.protocol.jsonlines import DaemonClient
from linkgrad.transactions import group_by_transaction, patterns_from
from linkgrad.watch import WATCH_S, Baseline, check_limits
from linkgrad.weblog import RequestLog

WARMUP_S = 10.0  # the workload's first seconds, before anything is measured
TAIL_S = 3.0  # requests that started in a window are still being logged
CYCLES = 3  # on sub-windows per placement (and one more off)
GUARD_S = 2.0  # not measured after an edge (queues settle) nor before it (requests finish)
LEAD_S = 1.0  # from setting the schedules to the first off sub-window


@dataclass(frozen=True)
class PlacementChanges:
    """A placement to validate: its file (for errors) and each host pair's latency change."""

    source: str
    changes: dict[Pair, Estimate]


@dataclass(frozen=True)
class ValidatedTransaction:
    current_ms: float
    predicted_ms: float
    ci95: tuple[float, float]
    measured: Estimate
    inside: bool  # within the prediction's and the measurement's errors together
    inside_mean_ci: bool  # within the prediction's interval alone


@dataclass(frozen=True)
class Validation:
    """One placement applied for real: every transaction measured against its prediction."""

    window_s: float
    transactions: dict[str, ValidatedTransaction]
    applied_ms: dict[Pair, Estimate]  # the latency changes the injector actually made


def validate_placements(run: RunInputs, placements: list[PlacementChanges], window_s: float,
                        say: Callable[[str], None], connect: Connect = ssh_connect,
                        clock: Clock = SYSTEM) -> list[Validation]:
    """Each placement applied for real, in order; RuntimeFailure if a daemon does not confirm
    it stopped."""
    experiment = read_record(run.run_dir / "experiment.json", Experiment,
                             "the experiment as run").read_from(run.run_dir / "experiment.json")
    _check_applicable(placements, experiment, window_s)
    session = Session(experiment, connect, clock)
    with sigterm_interrupts():
        try:
            session.open(sniffers=False)
            for warning in session.warnings:
                say(warning)
            if session.absent:  # a placement's delays go on links of every pair it moves
                raise RuntimeFailure(
                    "a placement is validated on every host it applies to, and "
                    + "; ".join(f"{h} was left out: {why}" for h, why in session.absent.items()))
            say(f"validating {len(placements)} placement(s), {window_s:g} s before and under "
                "each")
            sleep_checking(clock, WARMUP_S)
            validations = [_validate_one(session, run, p, window_s, say) for p in placements]
        finally:
            problems = session.close()
    if problems:
        raise RuntimeFailure("cleanup: " + "; ".join(problems))
    return validations


def _check_applicable(placements: list[PlacementChanges], experiment: Experiment,
                      window_s: float) -> None:
    """InputError, before any host is touched, for what the live system cannot do (a cap of
    the run's experiment: the sentence names its file too)."""
    caps, source = experiment.parameters, experiment.source or "the run's experiment"
    for p in placements:
        shorter = [f"{a}->{b}" for (a, b), d in p.changes.items() if d.mean < 0]
        if shorter:
            raise InputError(Problem(
                f"shortens {', '.join(shorter)}: a live system can only be slowed down, so "
                "this placement cannot be validated here", p.source, field="move"))
    if (kept_s := _links_kept_s(window_s)) > caps.max_duration_s:
        raise InputError(Problem(f"each placement keeps its links in the injector for "
                                 f"{kept_s:g} s with this window, beyond the "
                                 f"experiment's max_duration_s {caps.max_duration_s:g} "
                                 f"({source})",
                                 field="--window-s"))
    for p in placements:
        big = [f"{a}->{b}" for (a, b), d in p.changes.items() if d.mean > caps.max_delay_ms]
        if big:
            raise InputError(Problem(f"adds more than the experiment's max_delay_ms "
                                     f"{caps.max_delay_ms:g} ({source}) to {', '.join(big)}",
                                     p.source, field="move"))


def _links_kept_s(window_s: float) -> float:
    return Alternation.for_window(0.0, window_s, CYCLES, GUARD_S).duration_s + LEAD_S + 60


def _validate_one(session: Session, run: RunInputs, placement: PlacementChanges,
                  window_s: float, say: Callable[[str], None]) -> Validation:
    planned = placement.changes
    links = add_links(session, run, planned, _links_kept_s(window_s))
    stats = []
    try:
        alternation = Alternation.for_window(session.clock.time() + LEAD_S, window_s, CYCLES,
                                             GUARD_S)
        for pair, injector, link_id in links:
            injector.call(SetSchedule(link_id=link_id,
                                      schedule=SquareSchedule.of(alternation.wave(planned[pair].mean))))
        say(f"{placement.source}: {len(links)} link(s) through the injector, their delay "
            f"off and on in turn for {alternation.duration_s:.0f} s")
        before, after = measure_alternation(session, alternation)
    finally:
        for pair, injector, link_id in links:
            stats.append((pair, injector.call(Remove(link_id=link_id)).stats))
    measured_delays = applied_changes(stats, schedule_id=1, phase=PHASE_ON)
    predictions = predict(before, run.gradients, {**planned, **measured_delays})
    out = {}
    for name, p in predictions.items():
        if name not in after:
            continue
        measured, (lo, hi) = after[name], p.ci95
        half = Z95 * math.hypot(p.se_ms, measured.se)
        out[name] = ValidatedTransaction(
            p.current_ms.mean, p.predicted_ms, (lo, hi), measured,
            inside=abs(measured.mean - p.predicted_ms) <= half,
            inside_mean_ci=lo <= measured.mean <= hi)
    return Validation(window_s, out, measured_delays)


def applied_changes(stats: list[tuple[Pair, LinkStats]], schedule_id: int,
                    phase: str) -> dict[Pair, Estimate]:
    """Per pair, the mean delay the injector applied in `phase` of `schedule` (its id): the
    latency change made for real. The NFQUEUE detour itself is outside the daemon's clock, and
    both sides pay it. Several protocols of one pair are pooled by packet count."""
    sums: dict[Pair, list[float]] = {}
    for pair, s in stats:
        on = s.applied(schedule_id, phase)
        if not on.count or on.mean_ms is None:
            continue
        n, mean, std = on.count, on.mean_ms, on.std_ms or 0.0
        acc = sums.setdefault(pair, [0.0, 0.0, 0.0])
        acc[0] += n
        acc[1] += n * mean
        acc[2] += n * std**2
    return {pair: Estimate(total / n, math.sqrt(var / n) / math.sqrt(n))
            for pair, (n, total, var) in sums.items()}


def add_links(session: Session, run: RunInputs, changes: dict[Pair, Estimate],
              duration_s: float) -> list[tuple[Pair, DaemonClient, int]]:
    """Every protocol the run saw between each pair whose latency grows, at 0 ms for now:
    between the hosts' IPv4 addresses, and between the IPv6 addresses the run's graph saw the
    pair use (a latency is the pair's, whichever family carries it)."""
    address = {host: addr for addr, host in session.addresses.items()}
    added: list[tuple[Pair, DaemonClient, int]] = []
    try:
        for (a, b), d in sorted(changes.items()):
            if d.mean <= 0:
                continue
            links = [LinkSpec(proto=proto, src=address[a], dst=address[b])
                     for proto in sorted(run.traffic.get((a, b), {"tcp"}))]
            links += [LinkSpec(proto=proto, src=src, dst=dst)
                      for proto, src, dst in sorted(run.ipv6_traffic.get((a, b), set()))]
            for link in links:
                schedule = ConstantSchedule(magnitude_ms=0.0, duration_s=duration_s)
                injector = session.link_injector(a, b)  # as the run measured them
                reply = injector.call(Add(link=link, schedule=schedule))
                added.append(((a, b), injector, reply.link_id))
    except Exception:
        for _, injector, link_id in added:
            injector.call(Remove(link_id=link_id))
        raise
    return added


def measure_alternation(session: Session, alternation: Alternation
                        ) -> tuple[dict[str, Estimate], dict[str, Estimate]]:
    """Every transaction's mean with the delay off and with it on (requests that start in a
    sub-window, clear of its guards). The first off sub-window is the baseline of the abort
    limits, watched from then on."""
    log, p, clock = session.log, session.experiment.parameters, session.clock
    assert log is not None
    first_end = alternation.start_s + alternation.half_s
    sleep_checking(clock, first_end + TAIL_S - clock.time())
    snap = log.snapshot()
    side, _ = alternation.sides(snap.start_s)
    base = _baseline(snap, (side == OFF) & (snap.start_s < first_end), alternation.usable_s,
                     first_end)

    def safe() -> None:
        if clock.time() > first_end + WATCH_S:
            check_limits(log.judged(), base, p, "validating a placement")

    sleep_checking(clock, alternation.end_s - clock.time(), safe)
    sleep_checking(clock, TAIL_S)
    snap = log.snapshot()
    side, measured_s = alternation.sides(snap.start_s)
    return (_transaction_means(session, snap, side == OFF, measured_s),
            _transaction_means(session, snap, side == ON, measured_s))


def _transaction_means(session: Session, snap: RequestLog, inside: np.ndarray,
                       t_s: np.ndarray) -> dict[str, Estimate]:
    """Each transaction's mean over its requests `inside`, batched in equal stretches of
    `t_s` (a transaction with fewer than two has none)."""
    groups = group_by_transaction(snap.url, patterns_from(session.experiment.transactions))
    means = {}
    for name, rows in groups.items():
        mine = rows[inside[rows]]
        if len(mine) >= 2:
            means[name] = batch_mean(t_s[mine], snap.response_s[mine] * 1e3)
    return means


def _baseline(snap: RequestLog, inside: np.ndarray, seconds: float, end_s: float) -> Baseline:
    """What the abort limits compare with: the requests `inside` a stretch of `seconds`."""
    failed = snap.failed()
    return Baseline(end_s, float(inside.sum() / seconds),
                    float(np.mean(snap.response_s[inside]) * 1e3) if inside.any() else 0,
                    float(failed[inside].mean()) if failed is not None and inside.any()
                    else None)


def measure_window(session: Session, window_s: float,
             base: Baseline | None = None) -> tuple[dict[str, Estimate], Baseline]:
    """Every transaction's mean over the next `window_s` (requests that start in it), and what
    it saw as a baseline for the abort limits; with `base`, the limits are watched."""
    log, p, clock = session.log, session.experiment.parameters, session.clock
    assert log is not None
    start = clock.time()

    def safe() -> None:
        if base is not None and clock.time() > start + WATCH_S:
            check_limits(log.judged(), base, p, "validating a placement")

    sleep_checking(clock, window_s, safe)
    sleep_checking(clock, TAIL_S)
    snap = log.snapshot()
    inside = (snap.start_s >= start) & (snap.start_s < start + window_s)
    return (_transaction_means(session, snap, inside, snap.start_s),
            _baseline(snap, inside, window_s, start + window_s))

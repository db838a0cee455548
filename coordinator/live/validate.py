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

import json
import math
import signal
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from common.errors import InputError, Problem, RuntimeFailure
from coordinator.config.experiment import Experiment
from coordinator.config.run_dir import Pair, RunInputs
from coordinator.core.alternation import OFF, ON, Alternation
from coordinator.core.prediction import Z95, Estimate, batch_mean, predict
from coordinator.core.transactions import group_by_transaction, patterns_from
from coordinator.core.watch import WATCH_S, Baseline, check_limits
from coordinator.core.weblog import RequestLog
from coordinator.live.session import Session, sigterm_as_interrupt, sleep_checking

WARMUP_S = 10.0  # the workload's first seconds, before anything is measured
TAIL_S = 3.0  # requests that started in a window are still being logged
CYCLES = 3  # on sub-windows per placement (and one more off)
GUARD_S = 2.0  # not measured after an edge (queues settle) nor before it (requests finish)
LEAD_S = 1.0  # from setting the schedules to the first off sub-window


def validate_placements(run: RunInputs, results: list[dict[str, Any]], window_s: float,
                        say: Callable[[str], None]) -> None:
    """Adds `validation` to each result (which carries its `_changes`); RuntimeFailure if a
    daemon does not confirm it stopped."""
    for r in results:
        shorter = [f"{a}->{b}" for (a, b), d in r["_changes"].items() if d.mean < 0]
        if shorter:
            raise InputError(Problem(
                f"shortens {', '.join(shorter)}: a live system can only be slowed down, so "
                "this placement cannot be validated here", r["placement"], field="move"))
    experiment = Experiment.model_validate(
        json.loads((run.run_dir / "experiment.json").read_text()))
    caps = experiment.parameters
    if (kept_s := _links_kept_s(window_s)) > caps.max_duration_s:
        raise InputError(Problem(f"each placement keeps its links in the injector for "
                                 f"{kept_s:g} s with this window, beyond the "
                                 f"experiment's max_duration_s {caps.max_duration_s:g}",
                                 field="--window-s"))
    for r in results:
        big = [f"{a}->{b}" for (a, b), d in r["_changes"].items() if d.mean > caps.max_delay_ms]
        if big:
            raise InputError(Problem(f"adds more than the experiment's max_delay_ms "
                                     f"{caps.max_delay_ms:g} to {', '.join(big)}",
                                     r["placement"], field="move"))
    session = Session(experiment)
    previous = signal.signal(signal.SIGTERM, sigterm_as_interrupt)
    try:
        session.open(sniffers=False)
        say(f"validating {len(results)} placement(s), {window_s:g} s before and under each")
        sleep_checking(WARMUP_S)
        for r in results:
            r["validation"] = _validate_one(session, run, r, window_s, say)
    finally:
        problems = session.close()
        signal.signal(signal.SIGTERM, previous)
    if problems:
        raise RuntimeFailure("cleanup: " + "; ".join(problems))


def _links_kept_s(window_s: float) -> float:
    return Alternation.for_window(0.0, window_s, CYCLES, GUARD_S).duration_s + LEAD_S + 60


def _validate_one(session: Session, run: RunInputs, result: dict[str, Any], window_s: float,
                  say: Callable[[str], None]) -> dict[str, Any]:
    planned: dict[Pair, Estimate] = result["_changes"]
    links = add_links(session, run, planned, _links_kept_s(window_s))
    stats = []
    try:
        alternation = Alternation.for_window(time.time() + LEAD_S, window_s, CYCLES, GUARD_S)
        for pair, injector, link_id in links:
            injector.request("schedule", link_id=link_id,
                             schedule=alternation.schedule(planned[pair].mean))
        say(f"{result['placement']}: {len(links)} link(s) through the injector, their delay "
            f"off and on in turn for {alternation.duration_s:.0f} s")
        before, after = measure_alternation(session, alternation)
    finally:
        for pair, injector, link_id in links:
            stats.append((pair, injector.request("remove", link_id=link_id)["stats"]))
    measured_delays = applied_changes(stats, schedule="1", phase="on")
    applied = {**planned, **measured_delays}
    predictions = predict(before, run.gradients, applied)
    out: dict[str, Any] = {}
    for name, p in predictions.items():
        if name not in after:
            continue
        measured, (lo, hi) = after[name], p.ci95
        half = Z95 * math.hypot(p.se_ms, measured.se)
        out[name] = {"current_ms": round(p.current_ms.mean, 3),
                     "predicted_ms": round(p.predicted_ms, 3),
                     "ci95": [round(lo, 3), round(hi, 3)],
                     "measured_ms": round(measured.mean, 3),
                     "measured_se_ms": round(measured.se, 3),
                     "error": round((measured.mean - p.predicted_ms) / measured.mean, 4),
                     "inside": abs(measured.mean - p.predicted_ms) <= half,
                     "inside_mean_ci": lo <= measured.mean <= hi}
    return {"window_s": window_s, "cycles": CYCLES, "transactions": out,
            "applied_ms": {f"{a}->{b}": {"mean": round(e.mean, 4), "se": round(e.se, 4)}
                           for (a, b), e in sorted(measured_delays.items())}}


def applied_changes(stats: list[tuple[Pair, dict[str, Any]]], schedule: str,
                    phase: str) -> dict[Pair, Estimate]:
    """Per pair, the mean delay the injector applied in `phase` of `schedule` (its id): the
    latency change made for real. The NFQUEUE detour itself is outside the daemon's clock, and
    both sides pay it. Several protocols of one pair are pooled by packet count."""
    sums: dict[Pair, list[float]] = {}
    for pair, s in stats:
        on = s["schedules"].get(schedule, {}).get(phase, {}).get("actual", {})
        if not on.get("count"):
            continue
        n, mean, std = on["count"], on["mean_ms"], on["std_ms"] or 0.0
        acc = sums.setdefault(pair, [0.0, 0.0, 0.0])
        acc[0] += n
        acc[1] += n * mean
        acc[2] += n * std**2
    return {pair: Estimate(total / n, math.sqrt(var / n) / math.sqrt(n))
            for pair, (n, total, var) in sums.items()}


def add_links(session: Session, run: RunInputs, changes: dict[Pair, Estimate],
              duration_s: float) -> list[tuple[Pair, Any, int]]:
    """Every protocol the run saw between each pair whose latency grows, at 0 ms for now."""
    address = {host: addr for addr, host in session.addresses.items()}
    added: list[tuple[Pair, Any, int]] = []
    try:
        for (a, b), d in sorted(changes.items()):
            if d.mean <= 0:
                continue
            for proto in sorted(run.traffic.get((a, b), {"tcp"})):
                link = {"proto": proto, "src": address[a], "dst": address[b]}
                schedule = {"kind": "constant", "magnitude_ms": 0.0, "duration_s": duration_s}
                injector = session.link_injector(a, b)  # as the run measured them
                reply = injector.request("add", link=link, schedule=schedule)
                added.append(((a, b), injector, reply["link_id"]))
    except Exception:
        for _, injector, link_id in added:
            injector.request("remove", link_id=link_id)
        raise
    return added


def measure_alternation(session: Session, alternation: Alternation
                        ) -> tuple[dict[str, Estimate], dict[str, Estimate]]:
    """Every transaction's mean with the delay off and with it on (requests that start in a
    sub-window, clear of its guards). The first off sub-window is the baseline of the abort
    limits, watched from then on."""
    log, p = session.log, session.experiment.parameters
    assert log is not None
    first_end = alternation.start_s + alternation.half_s
    sleep_checking(first_end + TAIL_S - time.time())
    snap = log.snapshot()
    side, _ = alternation.sides(snap.start_s)
    base = _baseline(snap, (side == OFF) & (snap.start_s < first_end), alternation.usable_s,
                     first_end)

    def safe() -> None:
        if time.time() > first_end + WATCH_S:
            check_limits(log.rate_per_s(WATCH_S), log.recent(WATCH_S), base, p,
                         "validating a placement")

    sleep_checking(alternation.end_s - time.time(), safe)
    sleep_checking(TAIL_S)
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
    log, p = session.log, session.experiment.parameters
    assert log is not None
    start = time.time()

    def safe() -> None:
        if base is not None and time.time() > start + WATCH_S:
            check_limits(log.rate_per_s(WATCH_S), log.recent(WATCH_S), base, p,
                         "validating a placement")

    sleep_checking(window_s, safe)
    sleep_checking(TAIL_S)
    snap = log.snapshot()
    inside = (snap.start_s >= start) & (snap.start_s < start + window_s)
    return (_transaction_means(session, snap, inside, snap.start_s),
            _baseline(snap, inside, window_s, start + window_s))

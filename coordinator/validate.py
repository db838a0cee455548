"""`linkgrad predict --validate`: apply a placement's latency changes for real and measure.

For each placement: measure every transaction's mean response time for a window, add each
host pair's latency change as a constant delay through the injector (the run's protocols
between the pair), measure again, remove the delays. The prediction is remade from the window
just measured (the system may have drifted since the run), and the measured mean is compared
with it: `inside` allows for the measured mean's own standard error, `inside_mean_ci` does not.
A live system cannot be made faster, so a placement that shortens a latency is refused.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from coordinator.errors import InputError, Problem, RuntimeFailure
from coordinator.experiment import Experiment
from coordinator.prediction import Z95, Estimate, batch_mean, predict
from coordinator.run_files import Pair, RunInputs
from coordinator.session import Session, sleep_checking
from coordinator.transactions import group_by_transaction, patterns_from
from coordinator.watch import WATCH_S, Baseline, check_limits

WARMUP_S = 10.0  # the workload's first seconds, before anything is measured
SETTLE_S = 3.0  # requests in flight when the delay starts finish under the old latency
TAIL_S = 3.0  # requests that started in a window are still being logged


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
    session = Session(experiment)
    try:
        session.open(sniffers=False)
        say(f"validating {len(results)} placement(s), {window_s:g} s before and under each")
        sleep_checking(WARMUP_S)
        for r in results:
            r["validation"] = _validate_one(session, run, r, window_s, say)
    finally:
        problems = session.close()
    if problems:
        raise RuntimeFailure("cleanup: " + "; ".join(problems))


def _validate_one(session: Session, run: RunInputs, result: dict[str, Any], window_s: float,
                  say: Callable[[str], None]) -> dict[str, Any]:
    say(f"{result['placement']}: measuring the current response times")
    before, base = _measure(session, window_s)
    added = _apply(session, run, result["_changes"], window_s)
    try:
        say(f"{result['placement']}: {len(added)} link(s) delayed; measuring")
        sleep_checking(SETTLE_S)
        after, _ = _measure(session, window_s, base)
    finally:
        for injector, link_id in added:
            injector.request("remove", link_id=link_id)
    sleep_checking(TAIL_S)
    predictions = predict(before, run.gradients, result["_changes"])
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
    return {"window_s": window_s, "transactions": out}


def _apply(session: Session, run: RunInputs, changes: dict[Pair, Estimate],
           window_s: float) -> list[tuple[Any, int]]:
    """A constant delay on every protocol the run saw between each pair whose latency grows."""
    address = {host: addr for addr, host in session.addresses.items()}
    added = []
    try:
        for (a, b), d in sorted(changes.items()):
            if d.mean <= 0:
                continue
            for proto in sorted(run.traffic.get((a, b), {"tcp"})):
                link = {"proto": proto, "src": address[a], "dst": address[b]}
                schedule = {"kind": "constant", "magnitude_ms": d.mean,
                            "duration_s": window_s + SETTLE_S + 60}  # ends by itself too
                reply = session.injector(a).request("add", link=link, schedule=schedule)
                added.append((session.injector(a), reply["link_id"]))
    except Exception:
        for injector, link_id in added:
            injector.request("remove", link_id=link_id)
        raise
    return added


def _measure(session: Session, window_s: float,
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
    groups = group_by_transaction(snap.url, patterns_from(session.experiment.transactions))
    means = {}
    for name, rows in groups.items():
        rows = rows[inside[rows]]
        if len(rows) >= 2:
            means[name] = batch_mean(snap.start_s[rows], snap.response_s[rows] * 1e3)
    failed = snap.failed()
    return means, Baseline(start + window_s, float(inside.sum() / window_s),
                           float(np.mean(snap.response_s[inside]) * 1e3) if inside.any() else 0,
                           float(failed[inside].mean()) if failed is not None and inside.any()
                           else None)

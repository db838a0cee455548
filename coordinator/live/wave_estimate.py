"""One square wave (or several at once) on live links: the injectors' schedules, the wait
until every request it touched is logged, and each transaction's gradient from the followed
log with the delay the injector actually applied."""

from __future__ import annotations

import numpy as np

from coordinator.config.experiment import Parameters
from coordinator.config.run_records import Perturbation, RunInjection, WaveEstimate
from coordinator.live.clock import sleep_checking
from coordinator.live.session import Session
from linkgrad.graph import GraphLink
from linkgrad.protocol.injector import Add, Remove, SquareSchedule
from linkgrad.protocol.record import recorded_delay_ms
from linkgrad.spectral.estimate import log_gradients, settings_for_log
from linkgrad.spectral.result import GradientResult
from linkgrad.spectral.wave_plan import RoughGradient
from linkgrad.square_wave import SquareWave
from linkgrad.transactions import group_by_transaction, patterns_from
from linkgrad.watch import (
    WATCH_S,
    Baseline,
    check_limits,
)
from linkgrad.weblog.model import RequestLog

TAIL_S = 3.0  # after a wave ends, the requests that started in it are still being logged


def inject_and_estimate(session: Session, waves: list[tuple[GraphLink, SquareWave]],
                        base: Baseline) -> list[WaveEstimate]:
    """Square waves on links at once (one window from one first edge, each at its own
    frequency: `measure.group_waves`), then every transaction's gradient for each link,
    fitted jointly with the others' waves."""
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
    transactions = {n: GradientResult.of(r).noted(note)
                    for n, r in results.items()}
    return WaveEstimate(
        record=RunInjection.of(wave, actual_ms, link.label),
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

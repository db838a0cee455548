"""`linkgrad run experiment.yaml`: the measurement algorithm of thesis §3.2 on live hosts.

1. Connect (SSH, verified keys); start a sniffer on every host and follow the web log.
2. Training: the sniffers' reports make the communication graph; the requests of the passive
   phase give the square wave (period from the quietest frequency, delay for the wanted
   interval).
3. For every link (each direction): an adaptive cycle to rescale the delay by a rough gradient,
   then the measurement; the injector's actual mean delay and our estimator give every
   transaction's gradient. Throughput watched throughout: a drop beyond the limit aborts.

Everything measured is written as it is measured; Ctrl-C or SIGTERM ends every SSH channel (the
daemons' lease: they stop injecting and remove their rules) and keeps what was measured. A run
can be resumed, skipping finished links.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import InputError, Problem
from common.square_wave import SquareWave
from coordinator.cli.gradient import gradient_json
from coordinator.config.experiment import Experiment, Parameters
from coordinator.core.estimate import log_gradients, settings_for_log
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
from coordinator.live.session import Session, sigterm_as_interrupt, sleep_checking

TAIL_S = 3.0  # after a wave ends, the requests that started in it are still being logged


@dataclass
class RunDir:
    path: Path

    def write(self, name: str, data: Any) -> None:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str))
        tmp.replace(target)

    def read(self, name: str) -> Any:
        target = self.path / name
        return json.loads(target.read_text()) if target.exists() else None


def train(session: Session, say: Callable[[str], None]) -> tuple[list[GraphLink], float, float]:
    p = session.experiment.parameters
    start = time.time()
    for sniffer in session.sniffers.values():
        sniffer.request("watch", interval_s=2.0)
    say(f"training: {p.training_s:.0f} s of passive observation")
    sleep_checking(p.training_s)
    for sniffer in session.sniffers.values():
        sniffer.request("unwatch")
    end = time.time()
    graph = build_graph(session.reports, session.addresses, p.message_threshold)
    return graph, start, end


def inject_and_estimate(session: Session, waves: list[tuple[GraphLink, SquareWave]],
                        base: Baseline) -> list[dict[str, Any]]:
    """Square waves on links at once (orthogonal when their periods are T, 2T, 4T... from one
    first edge), then every transaction's gradient for each link."""
    p = session.experiment.parameters
    added = []
    try:
        for link, wave in waves:
            injector = session.link_injector(link.src_host, link.dst_host)
            link_id = injector.request("add", link=link.injector_link(),
                                       schedule=wave.injector_schedule())["link_id"]
            added.append((injector, link_id))
        assert session.log is not None
        log = session.log
        labels = ", ".join(link.label for link, _ in waves)
        start = min(w.start_s for _, w in waves)

        def safe() -> None:
            if time.time() > start + WATCH_S:
                check_limits(log.rate_per_s(WATCH_S), log.recent(WATCH_S), base, p, labels)

        sleep_checking(max(w.end_s for _, w in waves) - time.time(), safe)
    finally:
        stats = [injector.request("remove", link_id=link_id)["stats"]
                 for injector, link_id in added]
    sleep_checking(TAIL_S)
    snap = log.snapshot()
    groups = group_by_transaction(snap.url, patterns_from(session.experiment.transactions))
    all_waves = [w for _, w in waves]
    return [_estimate(snap, groups, link, wave, s, base, p,
                      tuple(o for o in all_waves if o is not wave))
            for (link, wave), s in zip(waves, stats, strict=True)]


def _estimate(snap: RequestLog, groups: dict[str, np.ndarray], link: GraphLink,
              wave: SquareWave, stats: dict[str, Any], base: Baseline, p: Parameters,
              others: tuple[SquareWave, ...] = ()) -> dict[str, Any]:
    on = stats["schedules"]["0"].get("on", {}).get("actual", {})
    actual_ms = on.get("mean_ms") or wave.magnitude_s * 1e3  # no packet while on: as asked
    measured = SquareWave(wave.start_s, wave.period_s, wave.cycles, actual_ms / 1e3)
    results = log_gradients(snap.start_s, snap.response_s, groups, measured,
                            settings_for_log(snap.time_resolution_s, p.k, p.chunks),
                            baseline_end_s=base.end_s, others=others)
    during = (snap.start_s >= wave.start_s) & (snap.start_s < wave.end_s)
    rate = float(during.sum() / wave.duration_s)
    mean_ms = float(snap.response_s[during].mean() * 1e3) if during.any() else float("nan")
    return {
        "record": {"start": wave.start_s, "period_s": wave.period_s, "cycles": wave.cycles,
                   "magnitude_ms": actual_ms, "link": link.label},
        "requested_ms": wave.magnitude_s * 1e3, "packets_delayed": on.get("count", 0),
        "perturbation": {"throughput_per_s": rate,
                         "throughput_change": rate / base.rate_per_s - 1,
                         "mean_response_ms": mean_ms,
                         "mean_response_change_ms": mean_ms - base.mean_response_ms},
        "transactions": {n: gradient_json(r) for n, r in results.items()},
    }


def rough_rescale(result: dict[str, Any], planned_s: float, cap_s: float) -> float:
    """Thesis §3.2.2: A' = A / (rough gradient), the largest over transactions, so the
    response-time effect stays about A however many times the link is crossed."""
    rough = [abs(t["gradient"]) for t in result["transactions"].values()
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
                  say: Callable[[str], None], fixed_ms: float | None = None
                  ) -> list[dict[str, Any]]:
    """Links at once, at periods T, 2T...; at `fixed_ms` (one of magnitudes_ms) if given,
    else at the plan's delay rescaled by the adaptive cycle."""
    p = session.experiment.parameters
    magnitudes = [plan.magnitude_s if fixed_ms is None else fixed_ms / 1e3] * len(links)
    adaptive: list[Any] = [None] * len(links)
    if p.adaptive and fixed_ms is None:  # one cycle of each wave, then rescale each
        waves = group_waves(plan, len(links), time.time() + 1.0, magnitudes)
        waves = [SquareWave(w.start_s, w.period_s, max(1, w.cycles // plan.cycles), w.magnitude_s)
                 for w in waves]
        say(f"adaptive cycle: {', '.join(link.label for link in links)}")
        adaptive = inject_and_estimate(session, list(zip(links, waves, strict=True)), base)
        magnitudes = [rough_rescale(a, plan.magnitude_s, p.max_delay_ms / 1e3) for a in adaptive]
        sleep_checking(max(w.period_s for w in waves) / 2)  # off before the next first edge
    waves = group_waves(plan, len(links), time.time() + 1.0, magnitudes)
    for link, wave in zip(links, waves, strict=True):
        say(f"{link.label}: {wave.cycles} cycles of {wave.period_s:.1f} s at "
            f"{wave.magnitude_s * 1e3:.1f} ms")
    results = inject_and_estimate(session, list(zip(links, waves, strict=True)), base)
    sleep_checking(max(w.period_s for w in waves) / 2)
    extra = {} if fixed_ms is None else {"planned_ms": fixed_ms}
    return [{"link": link.as_json(), "adaptive": a, "concurrent_with": len(links) - 1, **extra,
             **r} for link, a, r in zip(links, adaptive, results, strict=True)]


def measurement_key(label: str, planned_ms: float | None) -> str:
    """What a finished measurement is known by (for --resume): a link, at a delay if fixed."""
    return label if planned_ms is None else f"{label} @ {planned_ms:g} ms"


def jobs(links: list[GraphLink], done: dict[str, Any], p: Parameters
         ) -> list[tuple[list[GraphLink], float | None]]:
    """Groups of `concurrent` links still to measure, once per delay of magnitudes_ms (or
    once at the planned delay)."""
    out: list[tuple[list[GraphLink], float | None]] = []
    for fixed in p.magnitudes_ms or (None,):
        todo = [link for link in links if measurement_key(link.label, fixed) not in done]
        out += [(todo[i:i + p.concurrent], fixed) for i in range(0, len(todo), p.concurrent)]
    return out


def measure_all(session: Session, out: RunDir, links: list[GraphLink], plan: WavePlan,
                base: Baseline, done: dict[str, Any], say: Callable[[str], None]) -> None:
    """Every job in turn; each finished group is written at once (records, gradients, log)."""
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
            out.write(name, result["record"])
            partners = [f for f in files if f != name]
            result.update(injection=name, concurrent_injections=partners,
                          recompute_argv=recompute_argv(experiment, name, partners, base.end_s))
        results += measured
        out.write("gradients.json", {"experiment": experiment.name, "links": results})
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


def run_experiment(experiment: Experiment, run_dir: Path, say: Callable[[str], None],
                   resume: bool = False) -> dict[str, Any]:
    out = RunDir(run_dir)
    out.write("experiment.json", experiment.model_dump(mode="json"))
    done = {measurement_key(r["link"]["label"], r.get("planned_ms")): r
            for r in (out.read("gradients.json") or {}).get("links", [])} if resume else {}
    status: dict[str, Any] = {"status": "running", "started": time.time(), "links_done": len(done)}
    out.write("run.json", status)
    session = Session(experiment)
    previous = signal.signal(signal.SIGTERM, sigterm_as_interrupt)
    try:
        session.open()
        for warning in session.warnings:
            say(f"[yellow]{warning}")
        status["warnings"] = session.warnings
        graph, start, end = train(session, say)
        out.write("graph.json", [g.as_json() for g in graph])
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
        plan = plan_wave(by_tx, end, experiment.parameters)
        out.write("plan.json", {"period_s": plan.period_s, "cycles": plan.cycles,
                                "magnitude_ms": plan.magnitude_s * 1e3, "n_bins": plan.n_bins,
                                "notes": list(plan.notes), "training": [start, end],
                                "training_requests_per_s": base_rate,
                                "training_failed_fraction": base.failed_fraction})
        nodes = experiment.nodes
        links = select(application(graph, nodes.processes, nodes.ports),
                       experiment.parameters.include, experiment.parameters.exclude)
        say(f"graph: {len(graph)} links, measuring {len(links)}; " + "; ".join(plan.notes))
        measure_all(session, out, links, plan, base, done, say)
        status["status"] = "completed"
    except Aborted as e:
        status.update(status="aborted", reason=str(e))
    except KeyboardInterrupt:
        status.update(status="interrupted")
    except Exception as e:
        status.update(status="failed", reason=str(e))
        raise
    finally:
        if problems := session.close():  # every lease ends: no injection survives the run
            status["cleanup_problems"] = problems
            say("[red]cleanup: " + "; ".join(problems))
        signal.signal(signal.SIGTERM, previous)
        if session.log is not None:
            session.log.save(run_dir / "weblog.log")
        status["ended"] = time.time()
        out.write("run.json", status)
        if (run_dir / "gradients.json").exists() and (run_dir / "plan.json").exists():
            from coordinator.cli.report import write_report

            status["report"] = str(write_report(run_dir))
    return status

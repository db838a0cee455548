"""The run's host probes (Kissel et al.: BLiPP driven by XSP sessions): a probe context per
phase on every host's sniffer — fast on the hosts of the links being injected, slow elsewhere —
then `hosts.json` and each measured link's hosts' load in `gradients.json`.

Passive evidence never holds up the active half: a host whose probe fails is a warning and the
run goes on without its series.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from coordinator.config.experiment import Probes
from coordinator.config.hosts_file import HostReport, HostSeries, HostsFile, ProbePhase, read_hosts
from coordinator.config.run_dir import RunDir
from coordinator.config.run_records import LinkMeasurement
from coordinator.live.session import Session
from linkgrad.graph import GraphLink
from linkgrad.hostprobe.load import HostLoad
from linkgrad.protocol.hosts import Probe, Unprobe

__all__ = ["open_phase", "save", "save_series", "stop"]

CALL_S = 30.0  # a probe's answer waits for its last report: one sample of at most a few ms


def _begin(session: Session, phase: ProbePhase) -> None:
    _end(session, phase.start_s)
    session.probe_phases.append(phase)


def _end(session: Session, at_s: float) -> None:
    phases = session.probe_phases
    if phases and phases[-1].end_s is None:
        phases[-1] = phases[-1].model_copy(update={"end_s": at_s})


def _on_every_host(session: Session, request: Probe | Unprobe,
                   requests: dict[str, Probe | Unprobe] | None = None) -> list[str]:
    """The request on every host's sniffer at once; the problems, one per failed host. A
    host whose probe failed once is not asked to probe again, nor said again (one line, not
    one per group); `unprobe` still ends whatever context it kept running."""
    names = [name for name in session.sniffers
             if name not in session.probe_failed or isinstance(request, Unprobe)]
    if not names:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
        calls = {name: pool.submit(session.sniffers[name].call,
                                   (requests or {}).get(name, request), CALL_S)
                 for name in names}
    problems = []
    for name, future in calls.items():
        try:
            session.probing[name] = future.result()
        except Exception as e:  # passive evidence: this host's series is missing, said
            if name not in session.probe_failed:
                problems.append(f"host probe on {name}: {e}; its series ends here")
            session.probe_failed.add(name)
    return problems


def open_phase(session: Session, context: str, links: Sequence[GraphLink] = ()) -> list[str]:
    """A new probe context on every host (the running one ends with its last report):
    fast on the ends of `links`, slow elsewhere. What failed, per host. `context` is short
    ("passive", "measure 2/5"): the phase in hosts.json lists its links."""
    options: Probes = session.experiment.probes
    if not options.enabled:
        return []
    fast = sorted({end for link in links for end in (link.src_host, link.dst_host)})
    slow = Probe(context=context, sample_interval_s=options.slow_sample_s,
                 report_interval_s=options.slow_report_s)
    quick = Probe(context=context, sample_interval_s=options.fast_sample_s,
                  report_interval_s=options.fast_report_s)
    _begin(session, ProbePhase(context=context, start_s=session.clock.time(), fast=fast,
                               links=[link.label for link in links]))
    return _on_every_host(session, slow, {name: quick for name in fast})


def stop(session: Session) -> list[str]:
    """Every host's probe ends (its last report comes before the answer)."""
    if not session.probe_phases:
        return []
    _end(session, session.clock.time())
    return _on_every_host(session, Unprobe())


def series_file(session: Session) -> HostsFile:
    """hosts.json of this session: its phases and every host's reports so far."""
    # copies: a host whose unprobe timed out may still be reporting from its reader thread
    probing, reports = dict(session.probing), {h: list(r) for h, r in
                                               list(session.host_reports.items())}
    return HostsFile(
        experiment=session.experiment.name, phases=list(session.probe_phases),
        hosts={name: HostSeries(probing=probing.get(name),
                                reports=[HostReport.of(e) for e in reports.get(name, [])])
               for name in sorted({*probing, *reports})})


def _window(m: LinkMeasurement) -> tuple[float, float]:
    return m.record.start, m.record.start + m.record.period_s * m.record.cycles


def with_hosts(m: LinkMeasurement, file: HostsFile) -> LinkMeasurement:
    """`m` with each host's load over its measurement's cycles (hosts with no report then
    are left out)."""
    loads: dict[str, HostLoad] = {}
    for name, series in file.hosts.items():
        if (load := series.load_during(*_window(m))) is not None:
            loads[name] = load
    return m.model_copy(update={"hosts": loads or None})


def save_series(session: Session, out: RunDir) -> list[str]:
    """Write `hosts.json`: a resumed run's earlier series (read once, at the first save), then
    this session's so far; what the user must hear of it. Written at each group's start too,
    so a coordinator killed outright leaves the series up to there."""
    if not session.probe_phases:
        return []
    warnings: list[str] = []
    if session.series_before is None:
        # a resumed run's: its series are the earlier links' evidence
        earlier, warnings = out.earlier("hosts.json", read_hosts, "series")
        session.series_before = earlier or HostsFile(experiment=session.experiment.name)
    out.write("hosts.json", session.series_before.merged(series_file(session)).model_dump(
        mode="json"))  # None said: HostRates needs it
    return warnings


def save(session: Session, out: RunDir) -> list[str]:
    """At the run's end: `hosts.json`, and each measured link's hosts' load into
    `gradients.json`; what the user must hear of it."""
    warnings = save_series(session, out)
    file = read_hosts(out.path)
    if file is not None and (measurements := out.measurements()):
        # a resumed run's earlier links keep theirs: their windows are over
        out.write_measurements(session.experiment.name,
                               [m if m.hosts else with_hosts(m, file) for m in measurements])
    return warnings

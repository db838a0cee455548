"""The passive half's evidence on one measured (transaction, link), read from the run's files
into `linkgrad.explain`'s dataclasses."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.config.hosts_file import HostsFile
from coordinator.config.run_records import LinkMeasurement
from coordinator.config.snap_file import SnapFile
from linkgrad.explain.evidence import DirectionTraffic, HostBusy, LinkEvidence, Trend
from linkgrad.explain.paths_view import branches
from linkgrad.linearity import Linearity
from linkgrad.paths.result import PatternResult
from linkgrad.snap.evidence import LinkKey
from linkgrad.snap.traffic import link_traffic

__all__ = ["link_evidence", "passive_window"]


def passive_window(hosts: HostsFile | None) -> tuple[float, float] | None:
    """The probes' passive phase, Unix s."""
    for phase in (hosts.phases if hosts else []):
        if phase.context == "passive" and phase.end_s is not None:
            return phase.start_s, phase.end_s
    return None


def link_evidence(m: LinkMeasurement, transaction: str, snap: SnapFile | None,
                  hosts: HostsFile | None, linear: Sequence[Linearity],
                  patterns: Sequence[PatternResult],
                  training: tuple[float, float] | None = None) -> LinkEvidence:
    """`training`: the passive phase (plan.json's), beside which the measurement's traffic
    is read."""
    t = m.transactions[transaction]
    trends = [Trend("delay", x.points[0].gradient, x.points[-1].gradient, differ=not x.linear)
              for x in linear if x.link == m.link.label and x.transaction == transaction]
    level = t.by_level
    if level is not None and level.quiet.gradient is not None \
            and level.busy.gradient is not None:
        trends.append(Trend("load", level.quiet.gradient, level.busy.gradient,
                            differ=level.differ))
    return LinkEvidence(
        window_requests=sum(x.requests for x in m.transactions.values()),
        passive_requests=sum(x.baseline_requests for x in m.transactions.values()),
        snap=dict((m.snap or {}).get("measurement", {})),
        snap_passive=dict((m.snap or {}).get("passive", {})),
        traffic=_traffic(m, snap, training),
        hosts=_hosts(m, hosts),
        trends=tuple(trends),
        branches=branches(patterns, m.link.paths_key),
        packets_delayed=m.packets_delayed)


def _traffic(m: LinkMeasurement, snap: SnapFile | None,
             training: tuple[float, float] | None) -> tuple[DirectionTraffic, ...]:
    key = m.link.snap_key()
    if snap is None or key is None:
        return ()
    out = []
    for k in (key, LinkKey(key.dst_host, key.dst_port, key.src_host, key.src_port)):
        seen = link_traffic(snap.reports, snap.addresses, k, m.window)
        before = link_traffic(snap.reports, snap.addresses, k, training) if training else None
        out.append(DirectionTraffic(k.src_host, k.dst_host, seen.opened,
                                    before.opened if before else None, seen.writes,
                                    seen.write_bytes, seen.segments))
    return tuple(out)


def _hosts(m: LinkMeasurement, hosts: HostsFile | None) -> tuple[HostBusy, ...]:
    window = passive_window(hosts)
    out = []
    for name, load in (m.hosts or {}).items():
        if name not in m.pair:
            continue
        series = hosts.hosts.get(name) if hosts else None
        before = series.load_during(*window) if series and window else None
        out.append(HostBusy(name, load.cpu_busy, load.cgroup_cpu_cores,
                            before.cgroup_cpu_cores if before else None, load.disk_busy,
                            before.cpu_busy if before else None))
    return tuple(out)

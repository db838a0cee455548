"""The host probes in the run's report: CPU, memory, NIC and disk of every host over the run
with the injections marked, and each link's hosts' load beside the passive phase's, so a reader
sees whether the square wave moved anything but the response time. From `hosts.json`."""

from __future__ import annotations

import html
from collections.abc import Callable

from coordinator.cli.figures import png_img, pyplot
from coordinator.config.hosts_file import HostSeries, HostsFile
from coordinator.config.run_records import LinkMeasurement
from linkgrad.hostprobe.load import HostLoad, ReportedRates, load_during, whole_disks

__all__ = ["html_section"]

# a panel's value of one report, from the host's own cgroup (True) or the machine (False)
Value = Callable[[ReportedRates, bool], float | None]


def _cpu(s: ReportedRates, own: bool) -> float | None:
    if own:
        return s.cgroup.cpu_cores if s.cgroup is not None else None
    busy = s.host.cpu_busy
    return None if busy is None else busy * max(1, len(s.host.cores_busy))


def _memory(s: ReportedRates, own: bool) -> float | None:
    used = (s.cgroup.memory_bytes if s.cgroup is not None else None) if own \
        else s.host.memory_used_bytes
    return None if used is None else used / 2**20


def _network(s: ReportedRates, _own: bool) -> float | None:
    rx, tx = s.host.network("rx_bytes_per_s"), s.host.network("tx_bytes_per_s")
    return None if rx is None or tx is None else (rx + tx) / 1e6


def _disk(s: ReportedRates, own: bool) -> float | None:
    if own:
        if s.cgroup is None:
            return None
        read, write = s.cgroup.own_io("read_bytes_per_s"), s.cgroup.own_io("write_bytes_per_s")
        return None if read is None or write is None else (read + write) / 1e6
    disks = [s.host.disks[d] for d in whole_disks(s.host.disks)]
    return sum(d.read_bytes_per_s + d.write_bytes_per_s for d in disks) / 1e6 if disks else None


# title, the y axis's unit, the value
PANELS: tuple[tuple[str, str, Value], ...] = (
    ("CPU (cores; a host's own cgroup where it has one, else the machine)", "cores", _cpu),
    ("memory (MiB; own cgroup where it has one)", "MiB", _memory),
    ("network in+out (MB/s, loopback left out)", "MB/s", _network),
    ("disk read+write (MB/s; own cgroup where it has one)", "MB/s", _disk),
)


def _own(series: HostSeries) -> bool:
    """Whether a host is drawn as its own cgroup: decided once per host, so a report that
    lacks a value leaves a gap rather than the machine's number."""
    if series.probing is not None:
        return series.probing.cgroup
    return any(r.cgroup is not None for r in series.reports)


def _steps(series: HostSeries, value: Value, t0: float) -> tuple[list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    own = _own(series)
    for r in sorted(series.reports, key=lambda r: r.from_s):
        v = value(r, own)
        if v is None:
            xs.append(r.from_s - t0)
            ys.append(float("nan"))  # a gap in the line
            continue
        xs += [r.from_s - t0, r.to_s - t0]
        ys += [v, v]
    return xs, ys


def figure(file: HostsFile, links: list[LinkMeasurement]) -> str:
    reports = [r for s in file.hosts.values() for r in s.reports]
    t0 = min(r.from_s for r in reports)
    fig, axes = pyplot().subplots(len(PANELS), 1, figsize=(11, 2.2 * len(PANELS)), sharex=True)
    for ax, (title, unit, value) in zip(axes, PANELS, strict=True):
        ax.set_ylabel(unit)
        for name, series in sorted(file.hosts.items()):
            xs, ys = _steps(series, value, t0)
            if xs:
                ax.plot(xs, ys, lw=1, label=name)
        for p in file.phases:  # each group's whole time, adaptive cycles too: light
            if p.links and p.end_s is not None:
                ax.axvspan(p.start_s - t0, p.end_s - t0, color="red", alpha=0.05)
        for m in links:  # each link's measured cycles: darker
            start = m.record.start - t0
            ax.axvspan(start, start + m.record.period_s * m.record.cycles, color="red",
                       alpha=0.08)
        ax.set_title(title, fontsize=9, loc="left")
    for m in links:
        axes[0].annotate(m.link.label, (m.record.start - t0, 1.0),
                         xycoords=("data", "axes fraction"), fontsize=6, rotation=90,
                         va="top", color="#a33")
    axes[0].legend(fontsize=7, ncol=min(6, len(file.hosts)), loc="upper right")
    axes[-1].set_xlabel("s from the first report (light red: a group of links "
                        "injected, adaptive cycles too; darker: the measured cycles)")
    return png_img(fig)


def _cell(load: HostLoad | None) -> str:
    return "-" if load is None else html.escape(load.describe())


def _passive(file: HostsFile) -> dict[str, HostLoad | None]:
    phases = [p for p in file.phases if p.context == "passive" and p.end_s is not None]
    out: dict[str, HostLoad | None] = {}
    for name, series in file.hosts.items():
        loads = [load_during(series.reports, p.start_s, p.end_s) for p in phases
                 if p.end_s is not None]
        out[name] = next((x for x in reversed(loads) if x is not None), None)
    return out


def table(file: HostsFile, links: list[LinkMeasurement]) -> str:
    hosts = sorted(file.hosts)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in hosts)
    passive = _passive(file)
    rows = ["<tr><td><i>passive phase</i></td>"
            + "".join(f"<td>{_cell(passive.get(h))}</td>" for h in hosts) + "</tr>"]
    for m in links:
        loads = m.hosts or {}
        at = f" at {m.record.magnitude_ms:.1f} ms"
        rows.append(f"<tr><td>{html.escape(m.link.label + at)}</td>"
                    + "".join(f"<td>{_cell(loads.get(h))}</td>" for h in hosts) + "</tr>")
    return f"<table><tr><th>while</th>{head}</tr>{''.join(rows)}</table>"


def html_section(file: HostsFile | None, links: list[LinkMeasurement]) -> list[str]:
    if file is None:
        return []
    parts = ["<h2>Hosts</h2>"]
    missing = {name: s.probing.missing for name, s in file.hosts.items()
               if s.probing is not None and s.probing.missing}
    if not any(s.reports for s in file.hosts.values()):
        return [*parts, "<p>no host reported (see run.json's warnings)</p>"]
    parts += [figure(file, links), "<h3>Each host's load while each link was injected</h3>",
              table(file, links)]
    if missing:
        parts.append("<p>not measured: " + "; ".join(
            f"{html.escape(n)}: {html.escape(', '.join(m))}" for n, m in sorted(missing.items()))
            + "</p>")
    return parts

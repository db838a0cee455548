"""The host probes in the run's report: CPU, memory, NIC and disk of every host over the run
with the injections marked, and each link's hosts' load beside the passive phase's, so a reader
sees whether the square wave moved anything but the response time. From `hosts.json`."""

from __future__ import annotations

import html
from collections.abc import Callable

from coordinator.cli.figures import plt, png_img
from coordinator.config.hosts_file import HostReport, HostsFile
from coordinator.config.run_records import LinkMeasurement
from linkgrad.hostprobe.load import HostLoad, Span, load_during, whole_disks

__all__ = ["html_section"]

Value = Callable[[Span], float | None]


def _cpu(s: Span) -> float | None:
    """The host's own cgroup's cores where it has one (a testbed host sees the whole
    machine's /proc/stat), else the machine's busy share in cores."""
    if s.cgroup is not None and s.cgroup.cpu_cores is not None:
        return s.cgroup.cpu_cores
    if not s.host.cpu:
        return None
    busy = 1.0 - s.host.cpu.get("idle", 0.0) - s.host.cpu.get("iowait", 0.0)
    return busy * max(1, len(s.host.cores_busy))


def _memory(s: Span) -> float | None:
    own = s.cgroup.memory_bytes if s.cgroup is not None else None
    used = own if own is not None else s.host.memory_used_bytes
    return None if used is None else used / 2**20


def _network(s: Span) -> float | None:
    nics = [n for name, n in s.host.nics.items() if name != "lo"]
    return sum(n.rx_bytes_per_s + n.tx_bytes_per_s for n in nics) / 1e6 if nics else None


def _disk(s: Span) -> float | None:
    if s.cgroup is not None and s.cgroup.io:
        return sum(io.read_bytes_per_s + io.write_bytes_per_s
                   for io in s.cgroup.io.values()) / 1e6
    disks = [s.host.disks[d] for d in whole_disks(s.host.disks)]
    return sum(d.read_bytes_per_s + d.write_bytes_per_s for d in disks) / 1e6 if disks else None


PANELS: tuple[tuple[str, Value], ...] = (
    ("CPU (cores; own cgroup where it has one)", _cpu),
    ("memory (MiB; own cgroup where it has one)", _memory),
    ("network in+out (MB/s, loopback left out)", _network),
    ("disk read+write (MB/s; own cgroup where it has one)", _disk),
)


def _steps(reports: list[HostReport], value: Value, t0: float
           ) -> tuple[list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    for r in sorted(reports, key=lambda r: r.from_s):
        v = value(r)
        if v is None:
            continue
        xs += [r.from_s - t0, r.to_s - t0]
        ys += [v, v]
    return xs, ys


def figure(file: HostsFile, links: list[LinkMeasurement]) -> str:
    reports = [r for s in file.hosts.values() for r in s.reports]
    t0 = min(r.from_s for r in reports)
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(11, 2.2 * len(PANELS)), sharex=True)
    for ax, (title, value) in zip(axes, PANELS, strict=True):
        for name, series in sorted(file.hosts.items()):
            xs, ys = _steps(series.reports, value, t0)
            if xs:
                ax.plot(xs, ys, lw=1, label=name)
        for m in links:  # each link's cycles, shaded
            start = m.record.start - t0
            ax.axvspan(start, start + m.record.period_s * m.record.cycles, color="red",
                       alpha=0.08)
        ax.set_title(title, fontsize=9, loc="left")
    for m in links:
        axes[0].annotate(m.link.label, (m.record.start - t0, 1.0),
                         xycoords=("data", "axes fraction"), fontsize=6, rotation=90,
                         va="top", color="#a33")
    axes[0].legend(fontsize=7, ncol=min(6, len(file.hosts)), loc="upper right")
    axes[-1].set_xlabel("seconds from the first report (red: a link injected)")
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
        rows.append(f"<tr><td>{html.escape(m.link.label)}</td>"
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

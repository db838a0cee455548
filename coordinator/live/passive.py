"""The run's passive evidence on disk: `snap.json` (what every host's SNAP profiler reported,
and what it could not give), and each link's Table 2 classes beside its gradient in
`gradients.json`, during the passive phase and during the link's own measurement."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.config.run_dir import RunDir
from coordinator.config.run_records import LinkMeasurement
from coordinator.config.snap_file import HostSnapReport, SnapFile, read_snap
from linkgrad.protocol.snap import Profiling
from linkgrad.snap.evidence import link_classes

PHASES = ("passive", "measurement")


def snap_file(profiling: dict[str, Profiling], reports: list[HostSnapReport],
              hosts: dict[str, str]) -> SnapFile:
    """`snap.json`: per host what its profiler could give; which host each address is (so
    the file is read alone, offline); every report, in arrival order."""
    return SnapFile(hosts=profiling, addresses=hosts, reports=reports)


def injected_us(m: LinkMeasurement, every: list[LinkMeasurement]) -> float:
    """The delay on `m`'s host pair during its measurement: its own and that of any link of
    the pair measured at the same time (either direction: ACKs cross it too)."""
    start, end = m.window
    return sum(o.record.magnitude_ms * 1e3 for o in every
               if set(o.pair) == set(m.pair) and o.window[0] < end and o.window[1] > start)


def with_snap(measurement: LinkMeasurement, reports: Sequence[HostSnapReport],
              hosts: dict[str, str], training: tuple[float, float] | None,
              injected: float = 0.0, max_queuing_us: float = 10_000.0) -> LinkMeasurement:
    """`measurement` with the classes its link showed in the passive phase and while it was
    measured (the square wave's cycles; an RTT the `injected` delay (µs) explains is no
    delayed ACK there)."""
    key = measurement.link.snap_key()
    if key is None:
        return measurement
    windows = {"measurement": (*measurement.window, injected)}
    if training is not None:
        windows["passive"] = (*training, 0.0)
    snap = {phase: {name: round(s, 3) for name, s in link_classes(
                reports, hosts, key, (start, end), injected, max_queuing_us).items() if s > 0}
            for phase, (start, end, injected) in windows.items()}
    return measurement.model_copy(update={"snap": snap})


def save(out: RunDir, experiment: str, profiling: dict[str, Profiling],
         reports: list[HostSnapReport], hosts: dict[str, str],
         max_queuing_us: float = 10_000.0) -> list[str]:
    """Write `snap.json` (after the reports a resumed run's earlier sessions kept) and put
    each measured link's classes into `gradients.json`; what the user must hear of it."""
    if not profiling:
        return []
    # a resumed run's: its reports are the earlier links' evidence
    before, warnings = out.earlier("snap.json", read_snap, "reports")
    if before is not None:
        reports = [*before.reports, *reports]
        hosts = {**before.addresses, **hosts}
    out.write("snap.json", snap_file(profiling, reports, hosts).model_dump(mode="json",
                                                                          by_alias=True))
    measurements = out.measurements()
    if not measurements:
        return warnings
    plan = out.read("plan.json") or {}
    training = (float(plan["training"][0]), float(plan["training"][1])) \
        if "training" in plan else None
    out.write_measurements(experiment, [
        with_snap(m, reports, hosts, training, injected_us(m, measurements), max_queuing_us)
        for m in measurements])
    return warnings

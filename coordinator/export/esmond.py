"""The run for an esmond archive (perfSONAR 4's measurement archive), the way pScheduler's
esmond archiver stores a test type esmond has no event type of its own for: per measurement,
the metadata to POST to `.../esmond/perfsonar/archive/` (a point-to-point subject whose
`source`, `destination` and `measurement-agent` are IP addresses, as esmond requires) and the
bulk data to PUT to the metadata's URI, `{"data": [{"ts", "val": [{"event-type", "val"}]}]}`,
with the whole pScheduler result under `pscheduler-raw` and its run's href under
`pscheduler-run-href` (both JSON event types of esmond's closed list). esmond answers an
identical metadata POST with the existing key, so a link's measurements share one. Pure.
"""

from __future__ import annotations

import ipaddress

from coordinator.export.perfsonar import TEST_TYPE, endpoints, record
from coordinator.export.source import RunExport
from linkgrad.errors import InputError, Problem

__all__ = ["EVENT_TYPES", "documents"]

EVENT_TYPES = ("pscheduler-raw", "pscheduler-run-href")


def _ip(value: str) -> str | None:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def _addresses(run: RunExport) -> dict[str, tuple[str, str]]:
    """Each link's (source, destination) IPs; InputError naming every link without them."""
    out, problems = {}, []
    for m in run.links:
        ends = endpoints(run, m)
        ips = [_ip(e) for e in ends]
        for end, host, ip in zip(ends, (m.link.src_host, m.link.dst_host), ips, strict=True):
            if ip is None:
                problems.append(Problem(
                    f"esmond needs IP addresses: host {host!r} of link {m.link.label!r} has "
                    f"{end!r} (neither gradients.json nor experiment.json gives its IP)",
                    "gradients.json", field="link"))
        if None not in ips:
            out[m.link.label] = (ips[0], ips[1])
    if problems:
        raise InputError(sorted(set(problems), key=str))
    return out


def documents(run: RunExport, observer: str, version: str) -> dict[str, object]:
    """The file: each measurement's metadata and data, in gradients.json's order."""
    ips = _addresses(run)
    entries = []
    for m in run.links:
        source, destination = ips[m.link.label]
        r = record(run, m, observer, version)
        metadata = {
            "subject-type": "point-to-point", "source": source, "destination": destination,
            "measurement-agent": source, "input-source": m.link.src_host,
            "input-destination": m.link.dst_host, "tool-name": "linkgrad",
            "ip-transport-protocol": m.link.proto or "tcp",
            "time-duration": round(m.record.period_s * m.record.cycles),
            "pscheduler-test-type": TEST_TYPE,
            f"pscheduler-{TEST_TYPE}-link": m.link.label,
            "event-types": [{"event-type": e, "summaries": []} for e in EVENT_TYPES]}
        data = {"data": [{"ts": int(m.record.start), "val": [
            {"event-type": "pscheduler-raw", "val": r.result},
            {"event-type": "pscheduler-run-href", "val": {"href": r.run.href}}]}]}
        entries.append({"metadata": metadata, "data": data})
    return {"experiment": run.experiment, "run": run.run, "entries": entries}

"""The sniffer's host probe (Kissel et al.: BLiPP, driven by XSP sessions): the `probe` request
and the `host` reports it emits.

`probe` opens a measurement context (an experiment phase: "passive", "measure app1->db") and
samples the host every `sample_interval_s`, emitting a `host` event every `report_interval_s`:
what the host (and its own cgroup, if it lives in one) did over the report, and calipers over
the samples in it (how much each value moved within the report). Another `probe` changes the
context or the rates while it runs: the running context ends with a last report first.
`unprobe` ends it the same way. The coordinator samples fast on the hosts of the link it
measures and slowly elsewhere.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictFloat

from linkgrad.calipers import CaliperSummary
from linkgrad.hostprobe.cgroup import CgroupRates
from linkgrad.hostprobe.sample import HostRates
from linkgrad.protocol.base import Message, Request, Result
from linkgrad.protocol.fields import LIMIT_UNIX_S

__all__ = ["HostReportEvent", "Probe", "Probing", "Unprobe"]


class Probing(Result):
    """What the probe does now (`unprobe`: what it did last; context "" when none ran)."""

    context: str
    sample_interval_s: float
    report_interval_s: float
    cgroup: bool  # the host is measured as its own cgroup (CPU, memory, block I/O)
    missing: tuple[str, ...] = ()  # what this host's files do not give


class Probe(Request[Probing]):
    cmd: Literal["probe"] = "probe"
    context: str = Field("", max_length=200)
    sample_interval_s: StrictFloat = Field(1.0, ge=0.05, le=3600)
    report_interval_s: StrictFloat = Field(5.0, ge=0.05, le=86400)


class Unprobe(Request[Probing]):
    cmd: Literal["unprobe"] = "unprobe"


class HostReportEvent(Message):
    event: Literal["host"] = "host"
    context: str
    from_s: float = Field(ge=0, lt=LIMIT_UNIX_S)
    to_s: float = Field(ge=0, lt=LIMIT_UNIX_S)
    samples: int = Field(ge=1)  # readings in the report (its first is the previous one's last)
    host: HostRates  # from the report's first reading to its last
    cgroup: CgroupRates | None = None  # the host's own cgroup over the same time
    # per sampled value ("cpu_busy", "nic eth0 rx_bytes_per_s"...): calipers over the
    # interval-to-interval values inside the report
    series: dict[str, CaliperSummary]

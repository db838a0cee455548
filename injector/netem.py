"""The tc-netem backend through pyroute2: delay everything leaving one interface.

For hosts where per-interface delay is enough and the kernel has `sch_netem`. A square wave is
the netem qdisc's delay changed at each edge by a timer thread. The backend only ever replaces
the interface's *default* root qdisc, and removes what it added. On a kernel without
`sch_netem` ("qdisc kind is unknown") it raises `NetemUnavailable` with that reason.
"""

from __future__ import annotations

import threading
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict

from injector.calipers import Calipers, delay_summary
from injector.schedule import OFF, Schedule
from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.protocol import injector as protocol

DEFAULT_ROOT_QDISCS = {"noqueue", "pfifo_fast", "fq_codel", "mq", "fq", "pfifo", None}


class NetemStats(BaseModel):
    """What the backend did: its phase now, and how late each delay change came."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dev: str
    backend: Literal["netem"] = "netem"
    phase_now: str
    edge_lateness: protocol.Calipers


class NetemUnavailable(RuntimeFailure):
    """The kernel has no sch_netem."""


class NetemDelay:
    """One interface's netem root qdisc following a schedule until `close()`."""

    def __init__(self, dev: str, schedule: Schedule) -> None:
        from pyroute2 import IPRoute

        self.dev = dev
        self.schedule = schedule
        self.ipr = IPRoute()
        found = self.ipr.link_lookup(ifname=dev)
        if not found:
            self.ipr.close()
            raise InputError(Problem(f"no interface {dev!r}", field="--dev"))
        self.index = found[0]
        self.switches = Calipers()  # lateness of each delay change against its edge
        self._switches_lock = threading.Lock()  # added by the follower, read by stats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._installed = False

    def _root_kind(self) -> str | None:
        for qdisc in self.ipr.get_qdiscs(self.index):
            if qdisc.get("parent") == 0xFFFFFFFF:
                return qdisc.get_attr("TCA_KIND")
        return None

    def _tc(self, command: str, delay_s: float) -> None:
        from pyroute2.netlink.exceptions import NetlinkError

        try:
            self.ipr.tc(command, "netem", self.index, delay=round(delay_s * 1e6))
        except NetlinkError as e:
            if e.code == 2 and command == "add":  # ENOENT: "Specified qdisc kind is unknown"
                raise NetemUnavailable(
                    "this kernel has no sch_netem (tc: 'Specified qdisc kind is unknown'); "
                    "use the nfqueue backend") from e
            raise RuntimeFailure(f"tc {command} netem on {self.dev} failed: {e}") from e

    def start(self) -> NetemDelay:
        kind = self._root_kind()
        if kind not in DEFAULT_ROOT_QDISCS:
            raise InputError(Problem(f"{self.dev} has root qdisc {kind!r}; the netem backend "
                                     "replaces only a default one", field="--dev"))
        self._tc("add", self.schedule.delay_s(time.time()))
        self._installed = True
        self._thread = threading.Thread(target=self._follow, name="netem-schedule", daemon=True)
        self._thread.start()
        return self

    def _follow(self) -> None:
        while not self._stop.is_set():
            edge = self.schedule.next_change_s(time.time())
            if edge is None:
                return
            if self._stop.wait(max(0.0, edge - time.time())):
                return
            self._tc("change", self.schedule.delay_s(time.time()))
            with self._switches_lock:
                self.switches.add(time.time() - edge)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            if self._installed:
                self.ipr.tc("del", "netem", self.index)
                self._installed = False
        finally:
            self.ipr.close()

    def __enter__(self) -> NetemDelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> NetemStats:
        with self._switches_lock:
            lateness = delay_summary(self.switches)
        return NetemStats(dev=self.dev, phase_now=self.schedule.phase(time.time())
                          if self._installed else OFF, edge_lateness=lateness)

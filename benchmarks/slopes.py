"""The truth of a gradient as the slope of a mean: a constant delay on one direction of a link
switched off and on in turn under open-loop load, each transaction's mean response time (the
web server's access log) on minus off, over the delay the injector actually applied; its
standard error the larger of Welch's and the between-cycles one. Used by
`benchmarks/mediawiki_truth.py` and `benchmarks/rubis_truth.py`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from linkgrad.alternation import NEITHER, OFF, ON, Alternation
from linkgrad.protocol.injector import ON as PHASE_ON
from linkgrad.protocol.injector import Add, LinkSpec, LinkStats, SquareSchedule, StatsRequest
from linkgrad.weblog import read_log
from testbed import mariadb
from testbed.description import DescribedTestbed, DescribedTransaction
from testbed.pairs.hosts import Hosts, InjectorProcess


def link_spec(info: DescribedTestbed, link: str, port: int) -> tuple[str, LinkSpec, Hosts]:
    """For `link` "a->b" between a client host and the db host (which listens on `port`):
    the receiving host (its injector delays the link, as `linkgrad run` does by default), the
    injector's link spec, and the testbed's namespaces as `Hosts` (ns(name) is
    lgtb-TAG-name)."""
    address = {h.name: h.address for h in info.hosts}
    client_ns = info.host("client").namespace
    hosts = Hosts(tag=client_ns.removesuffix("client"))
    src, dst = link.split("->")
    if dst == "db":
        return dst, LinkSpec(proto="tcp", src=address[src], dst=f"{address[dst]}:{port}"), hosts
    return dst, LinkSpec(proto="tcp", src=f"{address[src]}:{port}", dst=address[dst]), hosts


def slope(on_s: np.ndarray, off_s: np.ndarray, applied_ms: float) -> dict[str, float]:
    """(mean on - mean off) / applied delay, Welch's standard error; times in s."""
    on, off = on_s * 1e3, off_s * 1e3
    se = float(np.sqrt(on.var(ddof=1) / len(on) + off.var(ddof=1) / len(off)))
    return {"slope": float(on.mean() - off.mean()) / applied_ms, "se": se / applied_ms,
            "on_ms": float(on.mean()), "off_ms": float(off.mean()),
            "n_on": len(on), "n_off": len(off)}


def cycles_se(half: np.ndarray, response_s: np.ndarray, applied_ms: float) -> float | None:
    """The slope's standard error from its spread between cycles: each on half against the
    mean of the off halves either side of it (`half`: each request's half index, off halves
    even). Welch's error treats requests as independent; background episodes (10-40 s) slow
    every request of a few halves together, which only the between-cycles spread shows."""
    means = {k: float(np.mean(response_s[half == k])) * 1e3 for k in np.unique(half)}
    diffs = [means[k] - (means[k - 1] + means[k + 1]) / 2 for k in means
             if k % 2 == 1 and k - 1 in means and k + 1 in means]
    if len(diffs) < 4:
        return None
    return float(np.std(diffs, ddof=1) / np.sqrt(len(diffs))) / applied_ms


def applied_ms_of(stats: Mapping[str, LinkStats], phase: str) -> float:
    """The mean delay the injector applied in `phase`, over all its schedules (by packets)."""
    total = count = 0.0
    for link in stats.values():
        for phases in link.schedules.values():
            if phase not in phases:
                continue
            actual = phases[phase].actual
            if actual.count and actual.mean_ms is not None:
                total += actual.mean_ms * actual.count
                count += actual.count
    return total / count


def loaded_slopes(info: DescribedTestbed, link: str, delay_ms: float, window_s: float,
                  rate_per_s: float, cycles: int = 4, port: int = mariadb.PORT,
                  transactions: list[DescribedTransaction] | None = None) -> dict[str, Any]:
    """Under open-loop load of `transactions` (default: every one of the testbed's, equal
    weights): the delay off and on in turn (linkgrad.alternation), a square schedule
    whose on phase is the constant delay, as `predict --validate` does; each transaction's
    mean response on minus off over the delay the injector applied."""
    transactions = transactions or list(info.transactions)
    receiver, spec, hosts = link_spec(info, link, port)
    namespace = {h.name: h.namespace for h in info.hosts}
    alternation = Alternation.for_window(time.time() + 8.0, window_s, cycles=cycles,
                                         guard_s=1.0)
    load_before = os.getloadavg()[0]
    try:
        injector = InjectorProcess(hosts, receiver, "--queue", "7300")
        injector.ok(Add(link=spec, schedule=SquareSchedule.of(alternation.wave(delay_ms))))
        mix = ",".join(f"{t.path}=1" for t in transactions)
        duration_s = alternation.end_s - time.time() + 1.0
        subprocess.run(["ip", "netns", "exec", namespace["client"], sys.executable, "-m",
                        "testbed.loadgen", "--url", info.frontend_url, "--mix", mix,
                        "--rate", str(rate_per_s), "--duration", f"{duration_s:.1f}", "--json"],
                       capture_output=True, text=True, timeout=duration_s + 120, check=True)
        applied_ms = applied_ms_of(injector.ok(StatsRequest()).links, PHASE_ON)
        injector.stop()
    finally:
        hosts.remove()
    log = read_log(info.web_log.path, info.web_log.format, info.web_log.log_format)
    side, _ = alternation.sides(log.start_s)
    half = np.floor((log.start_s - alternation.start_s) / alternation.half_s).astype(int)
    pages = {}
    for t in transactions:
        page = log.url == t.path
        pages[t.name] = slope(log.response_s[page & (side == ON)],
                              log.response_s[page & (side == OFF)], applied_ms)
        used = page & (side != NEITHER)
        by_cycles = cycles_se(half[used], log.response_s[used], applied_ms)
        pages[t.name] |= {"welch_se": pages[t.name]["se"], "cycles_se": by_cycles,
                          "se": max(pages[t.name]["se"], by_cycles or 0.0)}
    return {"link": link, "requested_ms": delay_ms, "applied_ms": applied_ms,
            "loadavg_1min": [load_before, os.getloadavg()[0]],
            "alternation": {"start": alternation.start_s, "half_s": alternation.half_s,
                            "cycles": alternation.cycles, "guard_s": alternation.guard_s},
            "pages": pages}

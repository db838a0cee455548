"""The truth of a gradient as a slope with no load: one request at a time, in blocks with a
constant delay on one direction of a link off and on in turn, each page type's mean response
time (the web server's access log) on minus off over the delay the injector applied, Welch's
standard error. The loaded counterpart is `benchmarks/slopes.py`'s `loaded_slopes`. Used by
`benchmarks/mediawiki_truth.py` and `benchmarks/redmine_truth.py`."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.slopes import applied_ms_of, link_spec, slope
from linkgrad.alternation import NEITHER, OFF, ON
from linkgrad.protocol.injector import Add, ConstantSchedule, OffSchedule, SetSchedule, StatsRequest
from linkgrad.weblog import read_log
from testbed import mariadb
from testbed.description import DescribedTestbed
from testbed.pairs.hosts import InjectorProcess

__all__ = ["DIRECT", "block_sides", "idle_slopes"]

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def block_sides(start_s: np.ndarray, blocks: Sequence[tuple[int, float, float]],
                slack_s: float = 0.002) -> np.ndarray:
    """Each request's side (ON or OFF) by the block (side, start, end; unix s) it started in,
    NEITHER outside every block. A request may start up to `slack_s` before its block: the
    access log's start stamp is truncated to the millisecond."""
    side = np.full(len(start_s), NEITHER)
    for which, start, end in blocks:
        side[(start_s >= start - slack_s) & (start_s < end)] = which
    return side


def idle_slopes(info: DescribedTestbed, link: str, delay_ms: float, blocks: int = 4,
                per_block: int = 4, port: int = mariadb.PORT,
                opener: urllib.request.OpenerDirector = DIRECT) -> dict[str, Any]:
    """No load: one request at a time through `opener`, every page type `per_block` times per
    block, the delay off and on in turn by block (off, on, ..., off). The link passes the
    injector on both sides (an off schedule), so its own overhead cancels."""
    receiver, spec, hosts = link_spec(info, link, port)
    sides: list[tuple[int, float, float]] = []  # (side, start, end) per block
    try:
        injector = InjectorProcess(hosts, receiver, "--queue", "7300")
        link_id = injector.ok(Add(link=spec, schedule=OffSchedule())).link_id
        for block in range(2 * blocks + 1):
            on = block % 2 == 1
            injector.ok(SetSchedule(link_id=link_id, schedule=ConstantSchedule(
                magnitude_ms=delay_ms) if on else OffSchedule()))
            time.sleep(0.2)
            start = time.time()
            for _ in range(per_block):
                for t in info.transactions:
                    with opener.open(t.url, timeout=60) as answer:
                        answer.read()
            sides.append((ON if on else OFF, start, time.time()))
        applied_ms = applied_ms_of(injector.ok(StatsRequest()).links, "constant")
        injector.stop()
    finally:
        hosts.remove()
    log = read_log(info.web_log.path, info.web_log.format, info.web_log.log_format)
    side = block_sides(log.start_s, sides)
    pages = {t.name: slope(log.response_s[(log.url == t.path) & (side == ON)],
                           log.response_s[(log.url == t.path) & (side == OFF)],
                           applied_ms) for t in info.transactions}
    return {"link": link, "requested_ms": delay_ms, "applied_ms": applied_ms, "pages": pages}

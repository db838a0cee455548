"""Redmine: the truth per page type, measured two independent ways on the Redmine testbed.

(a) Crossings from a capture. Each page type is requested alone (one at a time, a pause after
each), with the session cookie Redmine set on the first request, as the load generator's client
(httpx) and a browser send it back (a page without it makes fewer queries: the issue page 39
round trips, not 48), while a packet socket on the db host records every web<->db packet and
PostgreSQL's log every statement with its backend pid. Per request, as
`benchmarks/mediawiki_truth.py` (a) counts them: per direction the turns (a maximal run of
payload packets one way on a connection is one message), before the response ended (Apache's
%D). Passenger's processes keep their connections open, so there is no set-up to count:
web->db is every answered turn, db->web every turn.
(b) Slopes, as `benchmarks/mediawiki_truth.py` (b) measures them (`benchmarks/slopes.py`,
`benchmarks/idle_slopes.py`): a constant delay on one direction of web<->db (the injector on
the receiving host) switched off and on in turn, each page type's mean response (Apache's %D)
on minus off over the delay the injector applied, ± the standard error. *Loaded*: under the
load generator's open-loop load of every page type (equal weights) at `--rate` (default 10
req/s: 2 per page type per second, as MediaWiki's 12 over six; Passenger's 4 processes keep up
to 30, `paths-redmine-accuracy`), at each delay of `--delay-ms` (default 1 and 2 ms: default
runs of `linkgrad run` chose ~0.6-1.5 ms on these applications, and `benchmarks/coverage.py`
holds a run against the delay nearest its own), `--window-s` per side in `--cycles` cycles;
these are `slopes`, the truth for `benchmarks/coverage.py --app redmine`. *Idle*: one request
at a time with the cookie, at the largest delay. Redmine's responses vary more than MediaWiki's
(sd ~35 ms at 10 req/s in `paths-redmine-accuracy`'s truth logs), hence the longer windows:
expect about ±3 at 1 ms and ±1.5 at 2 ms on slopes of 7-48.

    .venv/bin/python -m benchmarks.redmine_truth [--requests 10] [--delay-ms 1,2]
                                                 [--window-s 120] [--cycles 6] [--rate 10]

Takes about 22 minutes with the defaults: the testbed ~1 min, (a) ~1 min, idle slopes ~1 min,
each loaded phase (2 x cycles + 1) x (window / cycles + 2 s) = ~5 min, for each delay and
direction (4 phases).

Brings up its own Redmine testbed (tag rmt, a scratch root) and takes it down. Writes
benchmarks/out/redmine_truth.json (its `slopes` in the shape of mediawiki_truth.json's) and its
section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.idle_slopes import idle_slopes
from benchmarks.mediawiki_truth import LINKS, _last_logged, count_request, expectation
from benchmarks.on_testbed import scratch_root
from benchmarks.results_md import update_section
from benchmarks.slopes import loaded_slopes
from testbed import postgres
from testbed.description import DescribedTestbed
from testbed.lifecycle import down, up
from testbed.topology import REDMINE

OUT = Path(__file__).with_name("out")
PORT = 5432
STATEMENT = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] LOG:  (?:statement|execute \S+):")


def parse_delays(text: str) -> list[float]:
    """`--delay-ms`: comma-separated positive delays in ms, each measured once, ascending."""
    try:
        delays = sorted({float(x) for x in text.split(",")})
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: expected ms, comma-separated") from e
    if not delays or delays[0] <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: every delay must be above 0 ms")
    return delays


def cookie_browser(info: DescribedTestbed) -> urllib.request.OpenerDirector:
    """A direct opener that sends Redmine's session cookie back, as the load generator does
    (without it a page makes fewer queries), the cookie already set."""
    browser = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                          urllib.request.HTTPCookieProcessor(CookieJar()))
    with browser.open(info.frontend_url + "/", timeout=60) as first:
        first.read()
    time.sleep(0.5)
    return browser


def crossings(info: DescribedTestbed, requests: int) -> dict[str, Any]:
    db = info.host("db")
    directory = info.directory
    log = directory / "logs" / "db-postgres.log"
    sniffer = subprocess.Popen(["ip", "netns", "exec", db.namespace, sys.executable, "-m",
                                "benchmarks.mediawiki_truth", "--sniff", str(PORT)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    packets: list[dict[str, Any]] = []
    try:
        assert sniffer.stdout is not None
        if sniffer.stdout.readline().strip() != "ready":
            sys.exit("redmine_truth: the packet capture did not start")
        reader = threading.Thread(target=lambda: packets.extend(
            json.loads(line) for line in sniffer.stdout), daemon=True)  # type: ignore[union-attr]
        reader.start()
        postgres.statement_log(directory / "pg", True)
        browser = cookie_browser(info)
        result = {}
        for t in info.transactions:
            per = []
            for _ in range(requests):
                offset, mark = log.stat().st_size, len(packets)
                start = time.time()
                with browser.open(t.url, timeout=60) as answer:
                    answer.read()
                end = time.time()
                time.sleep(0.3)
                served = _last_logged(info.web_log.path, info.web_log.log_format)
                counts = count_request(sorted(packets[mark:], key=lambda p: p["t"]),
                                       served + 0.001, PORT)
                lines = log.read_bytes()[offset:].decode(errors="replace").splitlines()
                pids = [m.group(1) for line in lines if (m := STATEMENT.match(line))]
                counts["statements"] = len(pids)
                counts["backends"] = len(set(pids))
                counts["response_ms"] = round((end - start) * 1e3, 1)
                per.append(counts)
            keys = sorted({k for c in per for k in c})
            mean = {k: float(np.mean([c.get(k, 0) for c in per])) for k in keys}
            result[t.name] = {"mean": mean, "expected": expectation(mean),
                                 "min_statements": min(c["statements"] for c in per),
                                 "max_statements": max(c["statements"] for c in per)}
        postgres.statement_log(directory / "pg", False)
        return result
    finally:
        assert sniffer.stdin is not None
        sniffer.stdin.close()
        sniffer.wait(timeout=15)


def slopes(info: DescribedTestbed, args: argparse.Namespace) -> dict[str, Any]:
    """(b): idle slopes at the largest delay, then the loaded ones at each delay and direction
    (`slopes`, the truth `benchmarks/coverage.py` reads)."""
    browser = cookie_browser(info)
    return {"delays_ms": args.delay_ms, "window_s": args.window_s, "cycles": args.cycles,
            "rate": args.rate,
            "idle_slopes": [idle_slopes(info, link, max(args.delay_ms), port=PORT,
                                        opener=browser) for link in LINKS],
            "slopes": [loaded_slopes(info, link, delay_ms, args.window_s, args.rate,
                                     args.cycles, port=PORT)
                       for delay_ms in args.delay_ms for link in LINKS]}


def slope_columns(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The table's slope columns, (heading, pages), per direction: idle, then loaded by
    delay; none for a result measured before slopes were."""
    columns = []
    for link in LINKS:
        arrow = link.replace("->", "→")
        columns += [(f"{arrow} idle {x['requested_ms']:g} ms", x["pages"])
                    for x in result.get("idle_slopes", []) if x["link"] == link]
        columns += [(f"{arrow} {x['requested_ms']:g} ms", x["pages"])
                    for x in sorted(result.get("slopes", []), key=lambda x: x["requested_ms"])
                    if x["link"] == link]
    return columns


def slope_ratio(measured: list[dict[str, Any]], crossings: dict[str, Any]) -> float:
    """Slope over expected crossings, median over pages and directions."""
    return float(np.median([x["pages"][name]["slope"] / c["expected"][x["link"]]
                            for x in measured for name, c in crossings.items()
                            if c["expected"][x["link"]] > 0]))


def slopes_text(result: dict[str, Any]) -> str:
    """The paragraph on (b), for a result that has slopes."""
    loaded = result["slopes"]
    applied = "; ".join(f"{kind} {x['link']} {x['requested_ms']:g} ms: {x['applied_ms']:.2f}"
                        for kind, xs in (("idle", result["idle_slopes"]), ("loaded", loaded))
                        for x in xs)
    loads = ", ".join(f"{v:.1f}" for x in loaded for v in x["loadavg_1min"])
    at = {d: [x for x in loaded if x["requested_ms"] == d] for d in result["delays_ms"]}
    ratios = ", ".join(f"at {d:g} ms {slope_ratio(x, result['crossings']):.2f}"
                       for d, x in at.items())
    return ("Slopes (`benchmarks/slopes.py`, `benchmarks/idle_slopes.py`, as MediaWiki's): "
            f"{', '.join(f'{d:g}' for d in result['delays_ms'])} ms constant delay on one "
            "direction of web<->db (injector at the receiver), off and on in turn: *idle* one "
            "request at a time with the cookie (4 on-blocks of every page ×4, 5 off-blocks), "
            f"*loaded* under the load generator's {result['rate']:g} req/s of all five pages "
            f"({result['cycles']} cycles, {result['window_s']:g} s per side; the truth of "
            "`benchmarks/coverage.py --app redmine`). Δmean of Apache's %D / the delay applied "
            f"(requested: applied, {applied}), ± the standard error (loaded: the larger of "
            "Welch's and the between-cycles one). Load average (1 min) before/after each "
            f"loaded phase: {loads}. Slope over the counted crossings, median over pages and "
            f"directions: idle {slope_ratio(result['idle_slopes'], result['crossings']):.2f}, "
            f"loaded {ratios}.")


def markdown(result: dict[str, Any]) -> str:
    columns = slope_columns(result)
    lines = [f"Redmine's pages, each requested alone {result['requests']} times "
             f"({result['machine']}; `python -m benchmarks.redmine_truth`): "
             "statements in PostgreSQL's log and web<->db turns in a packet capture on db, "
             "before the response ended, the session cookie sent back as the load generator "
             "does. One backend per request (a Passenger process and its persistent "
             "connection), so no connection set-up.", ""]
    if "slopes" in result:
        lines += [slopes_text(result), ""]
    lines += ["| page | statements (min-max) | crossings web->db | crossings db->web "
              "| response ms |"
              + "".join(f" slope {heading} |" for heading, _ in columns),
              "|---|---|---|---|---|" + "---|" * len(columns)]
    for name, r in result["crossings"].items():
        e, m = r["expected"], r["mean"]
        lines.append(f"| {name} | {m['statements']:.1f} ({r['min_statements']}-"
                     f"{r['max_statements']}) | {e['web->db']:.1f} | {e['db->web']:.1f} | "
                     f"{m['response_ms']:.0f} |"
                     + "".join(f" {p[name]['slope']:.1f} ± {p[name]['se']:.1f} |"
                               for _, p in columns))
    return "\n".join(lines)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10, help="per page type, for (a)")
    parser.add_argument("--delay-ms", type=parse_delays, default=[1.0, 2.0],
                        help="delays for (b), comma-separated (default 1,2); idle at the "
                             "largest")
    parser.add_argument("--window-s", type=float, default=120.0,
                        help="per side, for each loaded phase of (b)")
    parser.add_argument("--cycles", type=int, default=6, help="off/on cycles per loaded phase")
    parser.add_argument("--rate", type=float, default=10.0,
                        help="requests/s during the loaded phases of (b); "
                             "`benchmarks/coverage.py --app redmine` runs at the same")
    args = parser.parse_args(argv)
    if args.cycles < 4 or args.window_s <= 0:
        parser.error("--cycles must be 4 or more (the between-cycles error needs 4 on halves) "
                     "and --window-s above 0")
    signal.signal(signal.SIGTERM, _interrupt)  # the testbed comes down either way
    root = scratch_root("redmine_truth")
    try:
        info = up(REDMINE, "rmt", root)
        try:
            result = {"machine": f"{socket.gethostname()}, 2 cores",
                      "requests": args.requests, "links": list(LINKS),
                      "crossings": crossings(info, args.requests),
                      **slopes(info, args)}
        finally:
            down("rmt", root=root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "redmine_truth.json").write_text(json.dumps(result, indent=2))
    text = markdown(result)
    update_section("redmine_truth", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

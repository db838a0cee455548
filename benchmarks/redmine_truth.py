"""Redmine: the truth per page type, from a packet capture on the Redmine testbed.

Each page type is requested alone (one at a time, a pause after each), with the session cookie
Redmine set on the first request, as the load generator's client (httpx) and a browser send it
back (a page without it makes fewer queries: the issue page 39 round trips, not 48), while a
packet socket on
the db host records every web<->db packet and PostgreSQL's log every statement with its backend
pid. Per request, as `benchmarks/mediawiki_truth.py` (a) counts them: per direction the turns
(a maximal run of payload packets one way on a connection is one message), before the
response ended (Apache's %D). Passenger's processes keep their connections open, so there is
no set-up to count: web->db is every answered turn, db->web every turn.

    .venv/bin/python -m benchmarks.redmine_truth [--requests 10]

Brings up its own Redmine testbed (tag rmt, a scratch root) and takes it down. Writes
benchmarks/out/redmine_truth.json and its section of benchmarks/RESULTS.md.
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

from benchmarks.mediawiki_truth import LINKS, _last_logged, count_request, expectation
from benchmarks.on_testbed import scratch_root
from benchmarks.results_md import update_section
from testbed import postgres
from testbed.description import DescribedTestbed
from testbed.lifecycle import down, up
from testbed.topology import REDMINE

OUT = Path(__file__).with_name("out")
PORT = 5432
STATEMENT = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] LOG:  (?:statement|execute \S+):")


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
        browser = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                              urllib.request.HTTPCookieProcessor(CookieJar()))
        with browser.open(info.frontend_url + "/", timeout=60) as first:  # the cookie
            first.read()
        time.sleep(0.5)
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


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Redmine's pages, each requested alone {result['requests']} times "
             f"({result['machine']}; `python -m benchmarks.redmine_truth`): "
             "statements in PostgreSQL's log and web<->db turns in a packet capture on db, "
             "before the response ended, the session cookie sent back as the load generator "
             "does. One backend per request (a Passenger process and its persistent "
             "connection), so no connection set-up.", "",
             "| page | statements (min-max) | web->db | db->web | response ms |",
             "|---|---|---|---|---|"]
    for name, r in result["crossings"].items():
        e, m = r["expected"], r["mean"]
        lines.append(f"| {name} | {m['statements']:.1f} ({r['min_statements']}-"
                     f"{r['max_statements']}) | {e['web->db']:.1f} | {e['db->web']:.1f} | "
                     f"{m['response_ms']:.0f} |")
    return "\n".join(lines)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10, help="per page type")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # the testbed comes down either way
    root = scratch_root("redmine_truth")
    try:
        info = up(REDMINE, "rmt", root)
        try:
            result = {"machine": f"{socket.gethostname()}, 2 cores",
                      "requests": args.requests, "links": list(LINKS),
                      "crossings": crossings(info, args.requests)}
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

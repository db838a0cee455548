"""Linking time against the capture, and crossings against a packet capture's count, on
applications we did not write (issue 27): Debian's MediaWiki on Apache prefork + mod_php, a
MariaDB connection per request, 20-45 queries a page (`--app mediawiki`); Debian's Redmine on
Apache + Passenger, Ruby processes reached over Unix sockets, each with a persistent PostgreSQL
connection, 7-48 queries a page (`--app redmine`). `linkgrad paths` captures --seconds at
each rate with the default budget (0.1 of the capture) as a user runs it; the saved trace is
then linked again offline with no budget and with the threads left out (timing alone), each in
a process of its own (time and peak memory). Goal: linking within 0.1 × the capture, memory
under 1 GB, at 20 and 40 requests/s. Crossings: of each page's requests in Apache's log that
began and ended while every host captured, the share whose linked path crosses web->db and db->web
within one of the count `benchmarks/mediawiki_truth.py` (or `redmine_truth.py`) made from a
packet capture (a request the trace lacks, or left out of the listed patterns, counts as wrong).

    nice -n 5 .venv/bin/python -m benchmarks.paths_app_speed [--app mediawiki] [--seconds 30]
        [--rates 10,20,40]    (root: the testbed)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from benchmarks.on_testbed import linkgrad, scratch_root
from benchmarks.results_md import update_section
from coordinator.config.trace_file import read_trace
from linkgrad.paths.analysis import trace_duration_s
from linkgrad.paths.budget import Budget
from linkgrad.paths.hidden_workers import fold_hidden_workers
from linkgrad.paths.messages import Messages, Trace
from linkgrad.paths.reconcile import reconcile
from linkgrad.paths.structural import context_probabilities
from linkgrad.paths.threads import one_request_per_thread
from linkgrad.paths.wap5 import LinkingSettings
from testbed.lifecycle import down, up
from testbed.topology import MEDIAWIKI, REDMINE, Topology

LOG_LINE = re.compile(r'^\S+ \S+ \S+ (\d+) "\S+ (\S+) [^"]*" \d+ \S+ (\d+)$')


@dataclass(frozen=True)
class App:
    title: str
    topology: Topology
    truth: dict[str, float]  # page -> crossings each way from a packet capture
    pages: dict[str, str]  # page -> regex on the URL (the experiment's transactions)
    mix: str


APPS = {
    # RESULTS.md "MediaWiki: the truth per page type", 2026-11-23, before this linker:
    # set-ups, turns answered within Apache's %D
    "mediawiki": App("MediaWiki", MEDIAWIKI, {"article": 42.0, "hub": 42.1, "api": 8.1},
                     {"article": "title=Topic_7$", "hub": "title=Hub$",
                      "api": "^/api\\.php"},
                     "/index.php?title=Topic_7=2,/index.php?title=Hub=1,"
                     "/api.php?action=query&prop=links&titles=Hub&pllimit=max&format=json=1"),
    # RESULTS.md "redmine_truth", 2026-11-28, with the session cookie; before the runs below
    "redmine": App("Redmine", REDMINE, {"issues": 30.9, "issue": 48.0, "search": 31.0,
                                        "activity": 38.0, "login": 7.0},
                   {"issues": "^/projects/demo/issues$", "issue": "^/issues/\\d+$",
                    "search": "^/search\\?", "activity": "/activity$", "login": "^/login$"},
                   "/projects/demo/issues=2,/issues/42=2,/search?q=river&scope=all=1,"
                   "/projects/demo/activity=1,/login=1"),
}
EXPERIMENT = """
name: speed
testbed: {tag}
workload: {{host: client, rate_per_s: {rate}, mix: '{mix}'}}
transactions:
{transactions}
output: {output}
"""


def out_file(app: str) -> Path:
    return Path(__file__).with_name("out") / f"paths_{app}_speed.json"


def offline(trace_file: Path, threads: bool) -> dict[str, Any]:
    """In this process: link the saved trace with no budget (threads left out if not
    `threads`), hidden workers folded as `linkgrad paths` does; time, peak memory, and what
    the threads say."""
    trace, folds = fold_hidden_workers(reconcile(list(read_trace(trace_file))))
    if not threads:
        m = trace.messages
        trace = Trace(Messages(m.send_s, m.recv_s, m.src, m.dst, m.conn, m.size_bytes),
                      trace.connections, trace.nodes, trace.node_host, trace.hosts)
    m = trace.messages
    t0 = time.perf_counter()
    context_probabilities(trace, LinkingSettings(window_s=2.0), budget=Budget(None),
                          worker_nodes={trace.nodes.index(f.into) for f in folds})
    link_s = time.perf_counter() - t0
    threaded = one_request_per_thread(trace)
    return {"link_s": link_s, "duration_s": trace_duration_s(trace),
            "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
            "threaded": [n for n, t in zip(trace.nodes, threaded, strict=True) if t],
            # of the messages whose sender traced them
            "with_threads": float(np.mean(m.send_thread[~np.isnan(m.send_s)] >= 0))}


def crossings(app: App, result: dict[str, Any], web_log: Path, trace_file: Path
              ) -> dict[str, Any]:
    """Per page: the requests logged inside the capture, how many of them the listed patterns
    hold with crossings within one of the truth each way, the dominant path's crossings."""
    # the window every host captured (their sniffers start and stop a little apart)
    spans = [(min(r.first_s for r in h.records), max(r.last_s for r in h.records))
             for h in read_trace(trace_file) if h.records]
    lo, hi = max(a for a, _ in spans), min(b for _, b in spans)
    pages = {name: re.compile(regex) for name, regex in app.pages.items()}
    logged = dict.fromkeys(pages, 0)
    for line in web_log.read_text().splitlines():
        found = LOG_LINE.match(line)
        if not found:
            continue
        start = int(found[1]) / 1e3
        if lo <= start and start + int(found[3]) / 1e6 <= hi:
            page = next((n for n, p in pages.items() if p.search(found[2])), None)
            if page:
                logged[page] += 1
    out = {}
    for page, truth in app.truth.items():
        patterns = result["transactions"].get(page, [])
        right = sum(p["count"] for p in patterns
                    if all(abs(p["crossings"].get(w, 0) - truth) <= 1
                           for w in ("web->db", "db->web")))
        top = patterns[0]["crossings"] if patterns else {}
        out[page] = {"logged": logged[page], "right": right,
                     "matched": result["transaction_requests"].get(page, 0),
                     "top": [top.get("web->db"), top.get("db->web")]}
    return out


def capture(app: App, tag: str, root: Path, rate: float, seconds: float, web_log: Path
            ) -> dict[str, Any]:
    experiment = root / f"speed-{rate:g}.yaml"
    transactions = "\n".join(f"  {name}: '{regex}'" for name, regex in app.pages.items())
    experiment.write_text(EXPERIMENT.format(tag=tag, rate=rate, mix=app.mix,
                                            transactions=transactions, output=root / "runs"))
    trace_file = root / f"speed-{rate:g}.jsonl"
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    result = json.loads(linkgrad("paths_app_speed", env, "paths", str(experiment),
                                 "--duration", str(seconds), "--output-trace", str(trace_file),
                                 "--json"))
    row: dict[str, Any] = {"rate_per_s": rate, "messages": result["messages"],
                           "duration_s": result["duration_s"], "budget": result["budget"],
                           "fallbacks": result["fallbacks"],
                           "folded": result.get("folded", []),
                           "requests": sum(result["transaction_requests"].values()),
                           "crossings": crossings(app, result, web_log, trace_file)}
    for threads in (True, False):
        argv = [sys.executable, "-m", "benchmarks.paths_app_speed", "--offline",
                str(trace_file), "threads" if threads else "timing"]
        row["threads" if threads else "timing"] = json.loads(subprocess.run(
            argv, capture_output=True, text=True, check=True).stdout)
    return row


def markdown(app: App, rows: list[dict[str, Any]], seconds: float) -> str:
    lines = [
        f"## Causal paths on {app.title}: linking time against the capture "
        f"(`benchmarks/paths_app_speed.py --app {app.title.lower()}`)", "",
        f"{datetime.now(UTC):%Y-%m-%d} on {platform.node()}, 2 cores: one capture of "
        f"{seconds:g} s per rate (`linkgrad paths --duration {seconds:g}`, the default "
        "budget 0.1), then the saved trace linked offline with no budget, with its threads "
        "and without them. × is linking time over the trace's span. Goal: ≤ 0.1 × and "
        "< 1 GB at 20 and 40 requests/s.", "",
        "| req/s | messages | span s | default run: s (×), cut | no budget, threads: s (×), "
        "GB | no budget, timing alone: s (×) | messages with threads | one request per "
        "thread |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b, th, ti = r["budget"], r["threads"], r["timing"]
        cut = ", ".join(f"{f['node']} {f['linker']}" for f in r["fallbacks"]) or "none"
        if b["passes_cut"]:
            cut += f"; {b['passes_cut']} fitting passes"
        lines.append(
            f"| {r['rate_per_s']:g} | {r['messages']:,} | {r['duration_s']:.1f} | "
            f"{b['linking_s']:.1f} ({b['linking_s'] / r['duration_s']:.2f}), {cut} | "
            f"{th['link_s']:.1f} ({th['link_s'] / th['duration_s']:.2f}), "
            f"{th['peak_gb']:.2f} | {ti['link_s']:.1f} ({ti['link_s'] / ti['duration_s']:.2f}) "
            f"| {th['with_threads']:.1%} | {', '.join(th['threaded'])} |")
    lines += ["", "Crossings, the same captures and default runs: per page, of its requests in "
              "Apache's log that began and ended while every host captured, those whose linked "
              "path crosses web->db and db->web within one of the packet capture's count (truth: "
              + ", ".join(f"{p} {t:g}" for p, t in app.truth.items()) + "), with a 95% Wilson "
              "interval, and how many the trace held and matched to their log line (a request in "
              "a pattern past the five listed per page counts as wrong too); and the dominant "
              "path's crossings (web->db / db->web).", "",
              "| req/s | " + " | ".join(f"{p}: within ±1 | {p}: dominant" for p in app.truth)
              + " |", "|---|" + "---|---|" * len(app.truth)]
    for r in rows:
        cells = []
        for page in app.truth:
            c = r["crossings"][page]
            lo, hi = wilson(c["right"], c["logged"])
            top = " / ".join("-" if x is None else f"{x:g}" for x in c["top"])
            right = min(c["right"], c["logged"])  # (see `wilson`)
            cells += [f"{right}/{c['logged']} ({right / max(c['logged'], 1):.2f}, "
                      f"{lo:.2f}-{hi:.2f}; {c['matched']} matched)", top]
        lines.append(f"| {r['rate_per_s']:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of k successes in n (k capped at n: a pattern can hold
    a request whose log line fell just outside the capture)."""
    if n == 0:
        return 0.0, 1.0
    ci = stats.binomtest(min(k, n), n).proportion_ci(0.95, method="wilson")
    return float(ci.low), float(ci.high)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--app", choices=sorted(APPS), default="mediawiki")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--rates", default="10,20,40")
    p.add_argument("--offline", nargs=2, metavar=("TRACE", "HOW"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.offline:  # a child process: one offline linking, JSON on stdout
        print(json.dumps(offline(Path(args.offline[0]), args.offline[1] == "threads")))
        return
    app = APPS[args.app]
    root = scratch_root("paths_app_speed")
    tag = f"s{int(time.time()) % 1000:03d}"
    rows = []
    try:
        web_log = up(app.topology, tag, root).web_log.path
        for rate in (float(x) for x in args.rates.split(",")):
            rows.append(capture(app, tag, root, rate, args.seconds, web_log))
            print(json.dumps(rows[-1]), flush=True)
    finally:
        down(tag, root=root)
        out = out_file(args.app)
        out.parent.mkdir(exist_ok=True)
        for trace in root.glob("speed-*.jsonl"):  # kept: offline re-analysis, new linkers
            shutil.move(trace, out.with_name(f"{out.stem}-{trace.name}"))
        shutil.rmtree(root, ignore_errors=True)
    out.write_text(json.dumps({"at": datetime.now(UTC).isoformat(), "rows": rows}, indent=1))
    section = markdown(app, rows, args.seconds)
    print(section)
    update_section(f"paths-{args.app}-speed", section)


if __name__ == "__main__":
    main()

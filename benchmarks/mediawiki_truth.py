"""MediaWiki: the truth per page type, measured two independent ways on the MediaWiki testbed.

(a) Crossings from a capture. Each page type is requested alone (one at a time, a pause after
each) while a packet socket on the db host's eth0 records every web<->db packet and MariaDB's
general log every statement. Per request: the queries, the connections, and per direction the
*turns* (a maximal run of payload packets one way on a connection is one message) and the
payload-less handshake and teardown packets, each counted before and after the response ended.
The gradient's expectation (what a delay on the link waits for):
  web->db: per connection the SYN and the handshake's last ACK (mariadbd accepts on it and only
           then sends its greeting), plus every web->db turn that db answers (COM_QUIT is not
           answered: nobody waits for it);
  db->web: per connection the SYN-ACK, plus every db->web turn (greeting, auth OK, results);
both counted only before the response ended (Apache's %D).
(b) Slopes. Under the load generator's open-loop load (every page type, equal weights), a
constant delay on one direction (the injector daemon on the receiving host, as `linkgrad run`
injects by default) is switched off and on in turn (linkgrad.alternation: off, on, ...,
off), and each page type's mean response time (the access log, Apache's %D) on minus off,
divided by the delay the injector actually applied, is the slope; its standard error is
Welch's.

    .venv/bin/python -m benchmarks.mediawiki_truth [--requests 10] [--delay-ms 2]
                                                   [--window-s 40] [--rate 12]
    .venv/bin/python -m benchmarks.mediawiki_truth --background-load [--window-s 240]
    .venv/bin/python -m benchmarks.mediawiki_truth --steady-load none,cpu,disk,both --delay-ms 1

(c) With --background-load, only (b) again, while a CPU hog and a disk writer run at random
times (benchmarks/background_load.py, as `benchmarks/coverage.py --load` runs them):
benchmarks/out/mediawiki_truth_load.json. Confounded: the episodes slow whole halves, and
where they happen to fall moves the slope by 2x between two such measurements.
(d) With --steady-load, only (b) again, under each kind of that work held steady in turn:
benchmarks/out/mediawiki_truth_steady-Dms.json, the truth for MediaWiki's coverage under load
(a run is judged against these mixed in the shares of its own window).

Brings up its own MediaWiki testbed (tag mwt, a scratch root) and takes it down. Writes
benchmarks/out/mediawiki_truth.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.background_load import KINDS, BackgroundLoad, steady_load
from benchmarks.idle_slopes import idle_slopes
from benchmarks.on_testbed import scratch_root
from benchmarks.packet_socket import InNamespace, tcp_segments
from benchmarks.results_md import update_section
from benchmarks.slopes import loaded_slopes
from linkgrad.weblog.apache_format import compile_apache
from linkgrad.weblog.textlog import parse_lines
from testbed import mariadb
from testbed.description import DescribedTestbed
from testbed.lifecycle import down, up
from testbed.topology import MEDIAWIKI

OUT = Path(__file__).with_name("out")
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PORT = mariadb.PORT
SYN, FIN, RST = 0x02, 0x01, 0x04
LINKS = ("web->db", "db->web")


def sniff(port: int) -> None:
    """In the db host's namespace: every TCP packet to or from `port` on any interface as a
    JSON line (t, src, dst, sport, dport, flags, payload bytes) until stdin closes."""
    for seg in tcp_segments(port):
        print(json.dumps({"t": time.time(), "src": seg.src, "sport": seg.sport,
                          "dport": seg.dport, "flags": seg.flags, "len": len(seg.payload)}),
              flush=True)


def count_request(packets: list[dict[str, Any]], end_s: float, port: int = PORT
                  ) -> dict[str, int]:
    """Turns and control packets of one request's web<->db packets (time order), split at the
    response's end. Keys `<dir>_<what>_<before|after>`, dir `up` (web->db) or `down`; what:
    `syn` (SYN or SYN-ACK), `handshake_ack`, `fin` (FIN or RST), `turns`, `answered` (up turns
    that a down turn followed on the same connection)."""
    counts: dict[str, int] = {}
    last_dir: dict[int, str] = {}  # connection (web's port) -> direction of its last payload
    syn_acked: set[int] = set()
    accepted: set[int] = set()

    def add(key: str, when: float) -> None:
        k = f"{key}_{'before' if when <= end_s else 'after'}"
        counts[k] = counts.get(k, 0) + 1

    for p in packets:
        up_ = p["dport"] == port
        conn, direction = (p["sport"] if up_ else p["dport"]), ("up" if up_ else "down")
        if p["flags"] & SYN:
            add(f"{direction}_syn", p["t"])
            if not up_:
                syn_acked.add(conn)
        elif p["flags"] & (FIN | RST):
            add(f"{direction}_fin", p["t"])
        elif p["len"] == 0 and up_ and conn in syn_acked and conn not in accepted:
            accepted.add(conn)  # the handshake's last ACK: mariadbd accepts on it
            add("up_handshake_ack", p["t"])
        if p["len"] > 0 and last_dir.get(conn) != direction:
            add(f"{direction}_turns", p["t"])
            if direction == "down" and last_dir.get(conn) == "up":
                add("up_answered", p["t"])
            last_dir[conn] = direction
    return counts


def expectation(c: dict[str, float]) -> dict[str, float]:
    """What each direction's gradient should be, from one request's (mean) counts."""
    b = {k[: -len("_before")]: v for k, v in c.items() if k.endswith("_before")}
    return {"web->db": b.get("up_syn", 0) + b.get("up_handshake_ack", 0) + b.get("up_answered", 0),
            "db->web": b.get("down_syn", 0) + b.get("down_turns", 0)}


def _last_logged(path: Path, log_format: str) -> float:
    """When Apache finished the last request it logged (its start stamp plus %D), unix s."""
    last = path.read_text().splitlines()[-1]
    log = parse_lines([last + "\n"], compile_apache(log_format), str(path))
    return float(log.start_s[0] + log.response_s[0])


def crossings(info: DescribedTestbed, directory: Path, requests: int) -> dict[str, Any]:
    db = info.host("db")
    sniffer = InNamespace(db.namespace, "benchmarks.mediawiki_truth", "--sniff")
    packets = sniffer.records
    try:
        log = mariadb.general_log(directory, True)
        result = {}
        for t in info.transactions:
            per = []
            for _ in range(requests):
                offset, mark = log.stat().st_size, len(packets)
                start = time.time()
                with DIRECT.open(t.url, timeout=60) as answer:
                    answer.read()
                end = time.time()
                time.sleep(0.4)  # what the request does after its response (closing, deferred)
                text = log.read_bytes()[offset:].decode(errors="replace")
                served = _last_logged(info.web_log.path, info.web_log.log_format)
                # Apache's %D ends when it logs, after PHP's post-send work: that is the end
                # a web-log gradient sees (+1 ms: the start stamp is truncated to ms)
                counts = count_request(sorted(packets[mark:], key=lambda p: p["t"]),
                                       served + 0.001)
                counts["post_send_ms"] = round((served - end) * 1e3, 1)
                counts["queries"] = sum(" Query\t" in line for line in text.splitlines())
                counts["connections"] = sum(" Connect\t" in line for line in text.splitlines())
                counts["response_ms"] = round((end - start) * 1e3, 1)
                per.append(counts)
            keys = sorted({k for c in per for k in c})
            mean = {k: float(np.mean([c.get(k, 0) for c in per])) for k in keys}
            result[t.name] = {"mean": mean, "min_queries": min(c["queries"] for c in per),
                                 "max_queries": max(c["queries"] for c in per),
                                 "expected": expectation(mean)}
        mariadb.general_log(directory, False)
        return result
    finally:
        sniffer.stop()


def markdown(result: dict[str, Any]) -> str:
    c = result["crossings"]
    idle = {x["link"]: x for x in result["idle_slopes"]}
    loaded = {x["link"]: x for x in result["slopes"]}
    scan = result["idle_scan"]
    post_send = f"{np.mean([x['mean'].get('post_send_ms', 0) for x in c.values()]):.1f}"
    applied = "; ".join(f"{k} idle {idle[k]['applied_ms']:.2f} ms, loaded "
                        f"{loaded[k]['applied_ms']:.2f} ms" for k in LINKS)
    loads = ", ".join(f"{x:.1f}" for k in LINKS for x in loaded[k]["loadavg_1min"])
    lines = [
        "## MediaWiki: the truth per page type (`benchmarks/mediawiki_truth.py`)",
        "",
        f"Debian's MediaWiki 1.39 on Apache 2.4 + mod_php 8.2 (prefork), MariaDB 10.11, on the "
        f"`--app mediawiki` testbed ({result['machine']}). Parser and message caches in the DB "
        "(CACHE_DB), main cache CACHE_NONE, one connection per request.",
        "",
        f"- **Crossings** (a): each page alone, {result['requests']} times, a packet capture on "
        "db's eth0 and MariaDB's general log; per request (mean): queries, DB connections, "
        "payload turns per direction (a run of payload packets one way on a connection is one "
        "message; in brackets those after Apache finished the request, its %D). *Expected* "
        "gradient: web→db = SYN + the handshake's last ACK + the turns db answered (COM_QUIT "
        "is not); db→web = SYN-ACK + turns; within %D only. PHP's work after the client had "
        f"its response and before Apache logged: {post_send} ms (mean over pages).",
        f"- **Slopes** (b): {result['delay_ms']:g} ms constant delay on the link (injector at "
        "the receiver), off and on in turn: *idle* one request at a time (4 on-blocks of every "
        "page ×4, 5 off-blocks), *loaded* under the load generator's "
        f"{result['rate']:g} req/s of all six pages (4 cycles, {result['window_s']:g} s per "
        f"side). Δmean of Apache's %D / the delay applied ({applied}), ± Welch standard error. "
        f"Load average (1 min) before/after each loaded phase: {loads} (a shared 2-core "
        "machine).",
        "",
        f"- The column *idle {scan['requested_ms']:g} ms* is web→db idle again at "
        f"{scan['applied_ms']:.2f} ms applied: a fixed cost per wait would shrink there.",
        "",
        "| page | queries | conns | turns web→db (after) | turns db→web (after) "
        f"| expected web→db | idle | idle {scan['requested_ms']:g} ms | loaded "
        "| expected db→web | idle | loaded |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def cell(x: dict[str, Any], link: str, name: str) -> str:
        p = x[link]["pages"][name]
        return f"{p['slope']:.1f} ± {p['se']:.1f}"

    for name, x in c.items():
        m, e = x["mean"], x["expected"]
        lines.append(
            f"| {name} | {m.get('queries', 0):.0f} | {m.get('connections', 0):.0f} "
            f"| {m.get('up_turns_before', 0):.1f} ({m.get('up_turns_after', 0):.1f}) "
            f"| {m.get('down_turns_before', 0):.1f} ({m.get('down_turns_after', 0):.1f}) "
            f"| {e['web->db']:.1f} | {cell(idle, 'web->db', name)} "
            f"| {cell({'web->db': scan}, 'web->db', name)} | {cell(loaded, 'web->db', name)} "
            f"| {e['db->web']:.1f} | {cell(idle, 'db->web', name)} "
            f"| {cell(loaded, 'db->web', name)} |")
    ratios = {kind: float(np.median([x[k]["pages"][n]["slope"] / c[n]["expected"][k]
                                     for k in LINKS for n in c]))
              for kind, x in (("idle", idle), ("loaded", loaded))}
    lines += [
        "",
        f"Slope over expected crossings, median over pages and directions: idle "
        f"{ratios['idle']:.2f}, loaded {ratios['loaded']:.2f}. Every page view opens two "
        "connections (the second is SqlBagOStuff's, for the parser and message caches; the API "
        "query needs only the first), and nearly everything happens before the response ends. "
        "The slopes sit a few percent above the counted crossings in both directions, at no "
        "load as under load, and at the larger delay too (so it grows with the delay: not a "
        "fixed cost per wait such as waking the PHP process). Pure ACKs are not counted (no "
        "message is larger than the initial congestion window, so no transfer waits for one) "
        "and PHP does no work after the client has its response: the excess is not "
        "explained yet. "
        "A first run of this script while other benchmarks loaded "
        "the machine's two cores (the injector applied 2.28 ms for 2) gave loaded slopes of "
        "66-80 for the article-like pages: under CPU contention the slope of this application "
        "is not its crossing count. `linkgrad run experiments/mediawiki-quick.yaml` (2 ms, "
        "both directions at once, 12 req/s) measured the article at 44.6 [41.2, 47.9] "
        "(db→web) and 44.2 [40.6, 47.8] (web→db), search 70.8 and 70.2, api 8.1 and 8.8 "
        "(run of 2026-11-23, runs/mediawiki-quick-20261123-123401).",
    ]
    return "\n".join(lines)


def under_background_load(info: DescribedTestbed, args: argparse.Namespace,
                          scratch: Path) -> dict[str, Any]:
    """The loaded slopes again, under `benchmarks.background_load` episodes as
    `benchmarks/coverage.py --load` runs them: halves of ~10 s, so each episode (10-40 s)
    falls on both sides and the slope is the one averaged over loaded and quiet spells."""
    cycles = max(4, round(args.window_s / 10.0))
    slopes = []
    for i, link in enumerate(LINKS):
        with BackgroundLoad(args.seed + 100 + i, scratch) as load:
            x = loaded_slopes(info, link, args.delay_ms, args.window_s, args.rate, cycles)
            x["busy_fraction"] = load.busy_fraction(load.started, time.time())
        x["episodes"] = load.episodes
        slopes.append(x)
    return {"machine": f"{socket.gethostname()}, 2 cores", "delay_ms": args.delay_ms,
            "window_s": args.window_s, "rate": args.rate, "cycles": cycles, "slopes": slopes}


def under_steady_load(info: DescribedTestbed, args: argparse.Namespace,
                      scratch: Path) -> dict[str, Any]:
    """The loaded slopes under each kind of the episodes' work held steady ("none", "cpu",
    "disk", "both"): what the application's gradient is while that work runs. A run under
    random episodes mixes them in the shares its own window saw (`benchmarks/coverage.py`);
    a slope measured under random episodes instead is confounded by where they fell (the
    episodes slow whole halves: 38% of the off halves against 46% of the on ones gave a slope
    half that of another measurement, `mediawiki_truth_load*`)."""
    cycles = max(4, round(args.window_s / 10.0))
    kinds: dict[str, Any] = {}
    for link in LINKS:  # each link under every kind in turn, so slow drift spreads over kinds
        for kind in args.steady_load.split(","):
            with steady_load(kind, scratch):
                x = loaded_slopes(info, link, args.delay_ms, args.window_s, args.rate, cycles)
            kinds.setdefault(kind, {"slopes": []})["slopes"].append(x)
    return {"machine": f"{socket.gethostname()}, 2 cores", "delay_ms": args.delay_ms,
            "window_s": args.window_s, "rate": args.rate, "cycles": cycles, "kinds": kinds}


def markdown_steady(result: dict[str, Any]) -> str:
    kinds = list(result["kinds"])
    by = {k: {x["link"]: x for x in result["kinds"][k]["slopes"]} for k in kinds}
    applied = "; ".join(f"{k}: " + ", ".join(f"{by[k][link]['applied_ms']:.2f}" for link in LINKS)
                        for k in kinds)
    lines = [
        f"## MediaWiki: the truth under steady other work, {result['delay_ms']:g} ms "
        f"(`benchmarks/mediawiki_truth.py --steady-load {','.join(kinds)} --delay-ms "
        f"{result['delay_ms']:g}`)", "",
        f"{result['rate']:g} req/s of all six pages, {result['delay_ms']:g} ms constant delay "
        f"at the receiver, off and on in turn ({result['window_s']:g} s per side in "
        f"{result['cycles']} cycles), while one kind of `benchmarks/background_load.py`'s work "
        "runs throughout: none, a CPU hog, a disk writer (dd with fsync), both. Injector "
        f"applied (web->db, db->web, ms) {applied}. ± is the standard error: the larger of "
        "Welch's and the between-cycles one. A run under random episodes is judged against "
        "these mixed in the shares of its own window (`benchmarks/coverage.py`).", "",
        "| page | " + " | ".join(f"{link.replace('->', '→')} {k}" for link in LINKS
                                  for k in kinds) + " |",
        "| --- |" + " --- |" * (len(LINKS) * len(kinds))]
    for name in by[kinds[0]][LINKS[0]]["pages"]:
        row = [f"{p['slope']:.1f} ± {p['se']:.1f}" for link in LINKS for k in kinds
               for p in [by[k][link]["pages"][name]]]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def markdown_load(result: dict[str, Any], idle: dict[str, Any] | None) -> str:
    loaded = {x["link"]: x for x in result["slopes"]}
    quiet = {x["link"]: x for x in idle["slopes"]} if idle else {}
    option = "" if result["delay_ms"] == 2.0 else f" --delay-ms {result['delay_ms']:g}"
    lines = [
        f"## MediaWiki: the truth under background load, {result['delay_ms']:g} ms "
        f"(`benchmarks/mediawiki_truth.py --background-load{option}`)", "",
        f"As the *loaded* slopes above ({result['rate']:g} req/s of all six pages, "
        f"{result['delay_ms']:g} ms constant delay at the receiver, off and on in turn, "
        f"{result['window_s']:g} s per side in {result['cycles']} cycles), while "
        "`benchmarks/background_load.py` starts a CPU hog, a disk writer or both at random "
        "times (gaps ~45 s, 10-40 s long), as `benchmarks/coverage.py --load` does. Episodes "
        "ran " + ", ".join(f"{loaded[k]['busy_fraction']:.0%} of the {k} phase" for k in LINKS)
        + "; injector applied " + ", ".join(f"{loaded[k]['applied_ms']:.2f} ms ({k})"
                                            for k in LINKS) + ". ± is the standard error: "
        "the larger of Welch's and the between-cycles one (each on half against the off halves "
        "either side; episodes slow whole halves together), where the file has it.", "",
        "| page | web→db loaded | web→db under background load | db→web loaded "
        "| db→web under background load |", "| --- | --- | --- | --- | --- |"]

    def cell(x: dict[str, Any], link: str, name: str) -> str:
        if link not in x:
            return "-"
        p = x[link]["pages"][name]
        return f"{p['slope']:.1f} ± {p['se']:.1f}"

    for name in loaded[LINKS[0]]["pages"]:
        lines.append(f"| {name} | {cell(quiet, 'web->db', name)} | {cell(loaded, 'web->db', name)}"
                     f" | {cell(quiet, 'db->web', name)} | {cell(loaded, 'db->web', name)} |")
    return "\n".join(lines)


def _on_testbed(root: Path, measure: Callable[[DescribedTestbed], dict[str, Any]]
                ) -> dict[str, Any]:
    """`measure` on a MediaWiki testbed of its own (tag mwt under `root`), taken down and
    its root removed whatever happens."""
    try:
        info = up(MEDIAWIKI, "mwt", root)
        try:
            return measure(info)
        finally:
            down("mwt", root=root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=10, help="per page type, for (a)")
    parser.add_argument("--delay-ms", type=float, default=2.0)
    parser.add_argument("--window-s", type=float, default=40.0, help="per side, for (b)")
    parser.add_argument("--scan-ms", type=float, default=6.0,
                        help="a second delay for the idle slopes of web->db (is the slope "
                             "proportional to the delay?)")
    parser.add_argument("--rate", type=float, default=12.0, help="requests/s during (b)")
    parser.add_argument("--background-load", action="store_true",
                        help="only the loaded slopes, under random CPU/disk episodes (the "
                             "truth for `coverage.py --load`); --window-s defaults to 240")
    parser.add_argument("--steady-load", metavar="KINDS",
                        help="only the loaded slopes, under each kind of other work held "
                             "steady in turn (comma-separated: none,cpu,disk,both; the truth "
                             "for `coverage.py --load`); --window-s defaults to 120")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sniff", type=int, nargs="?", const=PORT, metavar="PORT",
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sniff:
        sniff(args.sniff)
        return 0
    if args.background_load and "--window-s" not in (argv or sys.argv):
        args.window_s = 240.0
    if args.steady_load:
        unknown = set(args.steady_load.split(",")) - {"none", *KINDS}
        if unknown:
            parser.error(f"--steady-load: unknown kinds {sorted(unknown)}; "
                         f"expected some of none,{','.join(KINDS)}")
        if "--window-s" not in (argv or sys.argv):
            args.window_s = 120.0
    signal.signal(signal.SIGTERM, _interrupt)  # the testbed comes down either way
    root = scratch_root("mediawiki_truth")
    if args.steady_load:
        result = _on_testbed(root, lambda info: under_steady_load(info, args, root))
        OUT.mkdir(exist_ok=True)
        name = f"mediawiki_truth_steady-{args.delay_ms:g}ms"
        (OUT / f"{name}.json").write_text(json.dumps(result, indent=2))
        text = markdown_steady(result)
        update_section(name, text)
        print(text)
        return 0
    if args.background_load:
        result = _on_testbed(root, lambda info: under_background_load(info, args, root))
        OUT.mkdir(exist_ok=True)
        # one file (and section) per delay: under load the slope depends on it
        name = "mediawiki_truth_load" + ("" if args.delay_ms == 2.0 else f"-{args.delay_ms:g}ms")
        (OUT / f"{name}.json").write_text(json.dumps(result, indent=2))
        idle_path = OUT / "mediawiki_truth.json"
        idle = json.loads(idle_path.read_text()) if idle_path.exists() else None
        text = markdown_load(result, idle)
        update_section(name, text)
        print(text)
        return 0
    result = _on_testbed(root, lambda info: {
        "machine": f"{socket.gethostname()}, 2 cores", "requests": args.requests,
        "delay_ms": args.delay_ms, "window_s": args.window_s, "rate": args.rate,
        "crossings": crossings(info, info.directory, args.requests),
        "idle_slopes": [idle_slopes(info, link, args.delay_ms) for link in LINKS],
        "idle_scan": idle_slopes(info, "web->db", args.scan_ms),
        "slopes": [loaded_slopes(info, link, args.delay_ms, args.window_s, args.rate)
                   for link in LINKS]})
    OUT.mkdir(exist_ok=True)
    (OUT / "mediawiki_truth.json").write_text(json.dumps(result, indent=2))
    text = markdown(result)
    update_section("mediawiki_truth", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

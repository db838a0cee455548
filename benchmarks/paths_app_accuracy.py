"""Causal paths against a per-request truth on applications we did not write (issue 27): the
share of requests whose inferred tree is exactly the true one, for WAP5's §5.1 linking, FCFS
and context linking (ours, as `linkgrad paths` runs it: hidden workers folded, the default
budget; and with no budget), on the same traces, at several request rates.

The truth is the applications' own, read only here (a request's messages are found in the
trace by connection and time; true parents follow WAP5's causality model, a server's greeting
hanging from its caller's last message as the linker places it):
- Redmine (`--app redmine`): the testbed's config.ru wraps Redmine in a Rack middleware that
  logs each request's Passenger process, client port, database connection and the clock when
  the request reached Redmine and when its body was closed (`testbed/redmine.py`, TRUTH_RU).
  A process serves one request at a time: a request's tree is its request and reply on the
  client connection and every message on its process's connection between the two readings.
- MediaWiki (`--app mediawiki`): Apache logs each request's mod_unique_id id, client port and
  arrival (`testbed/apache.py`, TRUTH_FORMAT); MediaWiki comments every query with that id
  (its database agent, `testbed/mediawiki.py`), so MariaDB's general log names each
  connection's request by its thread id; a packet socket on db reads each connection's thread
  id from the server's greeting. A connection per request: a request's tree is its request
  and reply and every message on its connections (where PHP reused a client port at once,
  the one whose greeting came when the sniffer read it).
Every request the truth logs inside the window all hosts captured counts; one whose messages
the trace lacks is wrong for every linker, not dropped.

    nice -n 5 .venv/bin/python -m benchmarks.paths_app_accuracy [--app redmine]
        [--rates 5,10,15] [--seconds 30] [--repeats 3]    (root: brings its own testbed up
        and down; --reanalyse with the same --rates and --repeats)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from benchmarks.on_testbed import linkgrad, scratch_root
from benchmarks.packet_socket import InNamespace, tcp_segments
from benchmarks.paths_accuracy import Conversations
from benchmarks.paths_app_speed import APPS, EXPERIMENT
from benchmarks.results_md import update_section
from coordinator.config.trace_file import read_trace
from linkgrad.paths.accuracy import best_instances
from linkgrad.paths.analysis import DEFAULT_BUDGET, trace_duration_s
from linkgrad.paths.budget import Budget
from linkgrad.paths.hidden_workers import fold_hidden_workers
from linkgrad.paths.instances import path_instances
from linkgrad.paths.messages import Trace
from linkgrad.paths.reconcile import reconcile
from linkgrad.paths.structural import context_probabilities, fcfs_probabilities
from linkgrad.paths.wap5 import LinkingSettings, LinkProbabilities, wap5_probabilities
from testbed import apache, mariadb, redmine
from testbed.description import DescribedTestbed
from testbed.lifecycle import down, up

OUT = Path(__file__).with_name("out")
SETTINGS = LinkingSettings(window_s=2.0)
LINKERS = ("wap5", "fcfs", "context", "context-unbudgeted")
QUEUED_S = 60.0  # how long before the application began a request it may have arrived
SLACK_S = 0.005  # how much later than that the capture may have seen it arrive
GENERAL_LOG = re.compile(r"^(?:\d{6}\s+\d+:\d\d:\d\d)?\s+(\d+) (\w+)\t(.*)$")
AGENT = re.compile(r"/\* .*? (\S+) \*/")  # MediaWiki's comment: /* method agent */
RATES = {"redmine": "5,10,15", "mediawiki": "10,20,30"}


@dataclass(frozen=True)
class TrueRequest:
    page: str
    client_port: int  # its connection to the web server
    began_s: float  # when the server (Apache) or the application (Rack) began it
    # (database client port, from, to); or (port, its greeting's time, NaN): the connection
    # that port opened then, whole (a connection per request reuses ports ms apart)
    db: tuple[tuple[int, float, float], ...]


def captured_window(trace_file: Path) -> tuple[float, float]:
    """The span every host captured (their sniffers start and stop a little apart)."""
    spans = [(min(r.first_s for r in h.records), max(r.last_s for r in h.records))
             for h in read_trace(trace_file) if h.records]
    return max(a for a, _ in spans), min(b for _, b in spans)


def page_matcher(app: str) -> Callable[[str], str | None]:
    pages = {name: re.compile(regex) for name, regex in APPS[app].pages.items()}
    return lambda url: next((n for n, p in pages.items() if p.search(url)), None)


def redmine_truth(directory: Path, window: tuple[float, float]) -> list[TrueRequest]:
    page_of = page_matcher("redmine")
    out = []
    for line in (directory / "truth.log").read_text().splitlines():
        r = json.loads(line)
        page = page_of(r["path"] + (f"?{r['query']}" if r.get("query") else ""))
        if page and r["status"] == 200 and window[0] <= r["t_in"] and r["t_out"] <= window[1]:
            out.append(TrueRequest(page, r["port"], r["t_in"],
                                   tuple((p, r["t_in"], r["t_out"]) for p in r["db_ports"])))
    return out


def mediawiki_truth(directory: Path, window: tuple[float, float]) -> list[TrueRequest]:
    page_of = page_matcher("mediawiki")
    # thread -> (client port, when the greeting was read; NaN in captures before it was kept)
    port_of = {g["thread"]: (g["port"], g.get("t", math.nan)) for g in map(
        json.loads, (directory / "greetings.jsonl").read_text().splitlines())}
    threads: dict[str, set[int]] = {}
    text = (directory / "general.log").read_text(errors="replace")
    for line in text.splitlines():
        found = GENERAL_LOG.match(line)
        if found and found[2] == "Query" and (agent := AGENT.search(found[3])):
            threads.setdefault(agent[1], set()).add(int(found[1]))
    out = []
    for line in (directory / apache.TRUTH_LOG).read_text().splitlines():
        uid, port, start_us, took_us, status, url = line.split(" ", 5)
        start, end = int(start_us) / 1e6, (int(start_us) + int(took_us)) / 1e6
        page = page_of(url)
        if page and status == "200" and window[0] <= start and end <= window[1]:
            db = tuple((port_of[t][0], port_of[t][1], math.nan) if t in port_of and
                       math.isfinite(port_of[t][1]) else
                       (port_of.get(t, (-1,))[0], -math.inf, math.inf)
                       for t in sorted(threads.get(uid, ())))
            out.append(TrueRequest(page, int(port), start, db))
    return out


def on_connection(conv: Conversations, port: int, server_host: str, lo: float, hi: float
                  ) -> list[int] | None:
    """The messages on the connection from `port` to `server_host` that its client sent or
    received between `lo` and `hi`; with `hi` NaN, every message of the connection from that
    port whose first message (the server's greeting) came nearest `lo`, within a second
    (None: no such connection in the trace)."""
    conns = conv.conns_of.get((port, server_host), [])
    m = conv.trace.messages
    if math.isnan(hi):
        near = [(abs(_first_time(conv, k) - lo), k) for k in conns if conv.on.get(k)]
        near = [x for x in near if x[0] <= 1.0]
        return list(conv.on[min(near)[1]]) if near else None
    found = [i for k in conns for i in conv.on.get(k, [])
             if lo <= (m.send_s[i] if m.src[i] == conv.trace.connections.client_node[k]
                       else m.recv_s[i]) <= hi]
    return found if conns else None


def _first_time(conv: Conversations, k: int) -> float:
    m = conv.trace.messages
    i = conv.on[k][0]
    return float(m.recv_s[i] if np.isfinite(m.recv_s[i]) else m.send_s[i])


def members_of(trace: Trace, requests: Sequence[TrueRequest]
               ) -> tuple[list[list[int]], dict[int, str]]:
    """Each request found in the trace: its messages (client request and reply first), and
    root -> page."""
    conv = Conversations(trace)
    members, name_of = [], {}
    for r in requests:
        # the last request to arrive on its client connection before it was begun (it may
        # have queued for a worker, or in the listen backlog; the load generator sends the
        # next on a connection only after the reply), or just after (clocks read apart)
        front = conv.exchange(r.client_port, "web", r.began_s, sent=False,
                              within=(r.began_s - QUEUED_S, r.began_s + SLACK_S))
        calls = [on_connection(conv, port, "db", lo, hi) for port, lo, hi in r.db]
        if front is None or not r.db or any(not c for c in calls):
            continue
        members.append([*front, *(i for c in calls if c for i in c)])
        name_of[front[0]] = r.page
    return members, name_of


def true_parents(trace: Trace, members: Sequence[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """WAP5's causality within each request: a message's parent is the last message of it
    that its sender received before sending it; a server's first words on a connection
    (MySQL's greeting: it received nothing yet) hang from the last message its caller had
    received, as the linker places them. -1: the request's root; -2: in no request."""
    m = trace.messages
    parent = np.full(len(m), -2, dtype=np.int64)
    request = np.full(len(m), -1, dtype=np.int64)
    server = trace.connections.server_node
    for r, msgs in enumerate(members):
        opened = set()
        for i in sorted(msgs, key=lambda j: m.recv_s[j]):
            if m.conn[i] not in opened and m.src[i] == server[m.conn[i]] and i != msgs[0]:
                got = [j for j in msgs if j != i and m.dst[j] == m.dst[i]
                       and m.recv_s[j] <= m.recv_s[i]]
            else:
                got = [j for j in msgs if m.dst[j] == m.src[i] and m.recv_s[j] <= m.send_s[i]]
            opened.add(m.conn[i])
            parent[i] = max(got, key=lambda j: m.recv_s[j]) if got else -1
            request[i] = r
    return parent, request


def link(trace: Trace, linker: str, worker_nodes: set[int]) -> LinkProbabilities:
    if linker == "wap5":
        return wap5_probabilities(trace, SETTINGS)
    if linker == "fcfs":
        return fcfs_probabilities(trace, SETTINGS)
    seconds = None if linker == "context-unbudgeted" else \
        DEFAULT_BUDGET * trace_duration_s(trace)
    return context_probabilities(trace, SETTINGS, budget=Budget(seconds),
                                 worker_nodes=worker_nodes)


def accuracy(trace: Trace, members: list[list[int]], name_of: dict[int, str],
             logged: dict[str, int], linker: str, worker_nodes: set[int]) -> dict[str, Any]:
    """Right trees per page, over every request the truth logged in the window."""
    parent, request = true_parents(trace, members)
    t0 = time.perf_counter()
    best = best_instances(path_instances(link(trace, linker, worker_nodes), SETTINGS))
    link_s = time.perf_counter() - t0
    right = dict.fromkeys(logged, 0)
    for root, page in name_of.items():
        inst = best.get(root)
        truth = members[int(request[root])]
        right[page] += inst is not None and sorted(inst.messages) == sorted(truth) and bool(
            np.all(np.asarray(inst.parents) == parent[np.asarray(inst.messages)]))
    return {"linker": linker, "link_s": link_s, "right": right, "logged": logged,
            "requests": sum(logged.values()),
            "accuracy": sum(right.values()) / max(sum(logged.values()), 1)}


def analyse(app: str, directory: Path, rate: float, run: int) -> list[dict[str, Any]]:
    trace_file = directory / "trace.jsonl"
    trace, folds = fold_hidden_workers(reconcile(list(read_trace(trace_file))))
    workers = {trace.nodes.index(f.into) for f in folds}
    read = redmine_truth if app == "redmine" else mediawiki_truth
    requests = read(directory, captured_window(trace_file))
    logged: dict[str, int] = {}
    for r in requests:
        logged[r.page] = logged.get(r.page, 0) + 1
    members, name_of = members_of(trace, requests)
    rows = []
    for linker in LINKERS:
        row = {"app": app, "rate_per_s": rate, "run": run, "messages": len(trace.messages),
               "duration_s": trace_duration_s(trace), "found": len(name_of),
               "folded": [f.into for f in folds],
               **accuracy(trace, members, name_of, logged, linker, workers)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def greetings(port: int) -> None:
    """In the db host's namespace: each MySQL connection's thread id, read from the server's
    greeting (protocol 10: the first packet, sequence 0, the version string, then the id), as a
    JSON line {port: the client's, thread}, until stdin closes."""
    for seg in tcp_segments(port):
        p = seg.payload
        if seg.sport != port or len(p) < 10 or p[3] != 0 or p[4] != 10:
            continue
        end = p.find(b"\0", 5)
        if 0 < end <= len(p) - 5:
            thread = struct.unpack("<I", p[end + 1:end + 5])[0]
            print(json.dumps({"port": seg.dport, "thread": thread, "t": time.time()}),
                  flush=True)


def wait_until_idle(log: Path, quiet_s: float = 5.0, limit_s: float = 300.0) -> float:
    """Wait until the application has written nothing to `log` for `quiet_s` (an overloaded
    capture's backlog drains after its load stops: the next capture must not start on it);
    the seconds waited."""
    t0 = time.monotonic()
    size, since = -1, t0
    while time.monotonic() - t0 < limit_s:
        now = log.stat().st_size if log.exists() else 0
        if now != size:
            size, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
        time.sleep(0.5)
    return time.monotonic() - t0


def capture_dir(keep: Path, rate: float, run: int) -> Path:
    return keep / f"rate-{rate:g}-run{run}"


def capture(app: str, info: DescribedTestbed, tag: str, root: Path, rate: float,
            seconds: float, out: Path) -> Path:
    """`linkgrad paths` at `rate` over the app's pages, its trace and truth kept in `out`
    (the truth logs are emptied first: their writers append)."""
    spec = APPS[app]
    directory = root / f"linkgrad-testbed-{tag}"
    out.mkdir(parents=True, exist_ok=True)
    experiment = root / f"accuracy-{rate:g}.yaml"
    transactions = "\n".join(f"  {name}: '{regex}'" for name, regex in spec.pages.items())
    experiment.write_text(EXPERIMENT.format(tag=tag, rate=rate, mix=spec.mix,
                                            transactions=transactions, output=root / "runs"))
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    argv = ("paths", str(experiment), "--duration", str(seconds), "--output-trace",
            str(out / "trace.jsonl"), "--json")
    truth_log = directory / "redmine" / "instance" / "log" / redmine.TRUTH_LOG \
        if app == "redmine" else directory / apache.TRUTH_LOG
    print(f"waited {wait_until_idle(truth_log):.0f} s for the server to be idle", flush=True)
    truth_log.write_text("")
    if app == "redmine":
        linkgrad("paths_app_accuracy", env, *argv)
        shutil.copy(truth_log, out / "truth.log")
        return out
    general = mariadb.paths(directory)["general_log"]
    general.unlink(missing_ok=True)
    mariadb.general_log(directory, True)
    db = info.host("db")
    sniffer = InNamespace(db.namespace, "benchmarks.paths_app_accuracy", "--greetings")
    try:
        linkgrad("paths_app_accuracy", env, *argv)
    finally:
        found = sniffer.stop()
        mariadb.general_log(directory, False)
    (out / "greetings.jsonl").write_text("".join(json.dumps(g) + "\n" for g in found))
    shutil.copy(general, out / "general.log")
    shutil.copy(truth_log, out / apache.TRUTH_LOG)
    return out


def wilson(k: int, n: int) -> str:
    if n == 0:
        return "-"
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return f"{k / n:.3f} ({ci.low:.2f}-{ci.high:.2f}; {n})"


DESCRIBE = {
    "redmine": "Debian's Redmine 5.0 on Apache + Passenger (4 Ruby processes, each with a "
               "persistent PostgreSQL connection; the processes hidden behind Unix sockets "
               "and folded into Apache's node), the truth from a Rack middleware's log",
    "mediawiki": "Debian's MediaWiki 1.39 on Apache prefork + mod_php, a MariaDB connection "
                 "per request (two per page view), the truth from Apache's request ids in "
                 "MariaDB's general log (on during the capture) and the greetings' thread ids",
}


def markdown(app: str, rows: list[dict[str, Any]], seconds: float) -> str:
    rates = sorted({r["rate_per_s"] for r in rows})
    runs = len({r["run"] for r in rows})
    taken = "one capture per rate, one run" if runs == 1 else \
        f"{runs} captures per rate, each a run of its own, taken in turn across the rates; " \
        "pooled, each run's figure after it"
    names = {"wap5": "WAP5 §5.1", "fcfs": "FCFS", "context": "context (ours, default budget)",
             "context-unbudgeted": "context (ours, no budget)"}
    lines = [
        f"## Causal paths on {APPS[app].title} against a per-request truth "
        f"(`benchmarks/paths_app_accuracy.py --app {app}`)", "",
        f"{datetime.now(UTC):%Y-%m-%d} on {platform.node()}, 2 cores: {DESCRIBE[app]}. "
        f"Every host traced for {seconds:g} s per capture (`linkgrad paths`, {taken}; taken "
        "after the linker and the truth were fixed), the load generator "
        f"at Poisson times over {', '.join(APPS[app].pages)}. Accuracy: the requests whose "
        "inferred tree is exactly the true one (messages and parents), over every request "
        "the truth logged inside the captured window (one the trace lacks counts as wrong), "
        "with a 95% Wilson interval and the count. Goal: ours ≥ 0.95 at 20 requests/s, or "
        "at the highest rate the 2 cores sustain.", "",
        "| linker | " + " | ".join(f"{r:g} req/s" for r in rates) + " |",
        "|---|" + "---|" * len(rates)]
    for linker in LINKERS:
        cells = []
        for rate in rates:
            got = [r for r in rows if r["rate_per_s"] == rate and r["linker"] == linker]
            cell = wilson(sum(sum(r["right"].values()) for r in got),
                          sum(r["requests"] for r in got))
            if len(got) > 1:
                cell += " [" + ", ".join(f"{r['accuracy']:.2f}" for r in got) + "]"
            cells.append(cell)
        lines.append(f"| {names[linker]} | " + " | ".join(cells) + " |")
    lines += ["", "Per page, ours with the default budget (right / logged), and its linking "
              "time:", ""]
    for r in rows:
        if r["linker"] == "context":
            lines.append(f"- {r['rate_per_s']:g} req/s" + (
                f", run {r['run']}" if runs > 1 else "") + ": " + ", ".join(
                f"{p} {r['right'][p]}/{n}" for p, n in sorted(r["logged"].items()))
                + f"; {r['found']} of {r['requests']} found in the trace; linked in "
                f"{r['link_s']:.1f} s for {r['duration_s']:.0f} s of capture")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--app", choices=sorted(RATES), default="redmine")
    p.add_argument("--rates", help="requests/s, comma-separated (default: per app)")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--repeats", type=int, default=1, help="captures per rate (default 1)")
    p.add_argument("--reanalyse", action="store_true",
                   help="the captures of the last run again (benchmarks/out)")
    p.add_argument("--greetings", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.greetings:  # a child process in the db host's namespace
        greetings(mariadb.PORT)
        return
    keep = OUT / f"paths_{args.app}_accuracy"
    rates = [float(x) for x in (args.rates or RATES[args.app]).split(",")]
    if not args.reanalyse:
        root = scratch_root("paths_app_accuracy")
        tag = f"a{int(time.time()) % 1000:03d}"
        try:
            info = up(APPS[args.app].topology, tag, root)
            # in turn, so a slow drift hits every rate; each capture starts once the last
            # one's backlog has drained
            for run in range(1, args.repeats + 1):
                for rate in rates:
                    out = capture_dir(keep, rate, run)
                    shutil.rmtree(out, ignore_errors=True)
                    capture(args.app, info, tag, root, rate, args.seconds, out)
        finally:
            down(tag, root=root)
            shutil.rmtree(root, ignore_errors=True)
    rows = [row for rate in rates for run in range(1, args.repeats + 1)
            for row in analyse(args.app, capture_dir(keep, rate, run), rate, run)]
    (OUT / f"paths_{args.app}_accuracy.json").write_text(
        json.dumps({"at": datetime.now(UTC).isoformat(), "rows": rows}, indent=1))
    section = markdown(args.app, rows, args.seconds)
    print(section)
    update_section(f"paths-{args.app}-accuracy", section)


if __name__ == "__main__":
    main()

"""Does `linkgrad explain` name the SNAP problem put on a measured link as the cause of the
excess it makes? On the RUBiS-like testbed, one short run per case of app1<->db measured in
both directions (ViewItem, 2 crossings, and single, 1: testbed/transactions.py), the problem
on that link alone for the whole run:

- baseline: nothing.
- loss: db drops each packet from app1 with probability `--loss` (an iptables `statistic`
  rule in db's namespace: this kernel has no netem). A lost query waits for the tail-loss
  probe or the RTO, both a few smoothed RTTs: expected cause `loss`.
- receiver_window: app1's route to db and db's to app1 with `window --window-bytes`, the
  most each advertises to the other (the clamp holds: the messages are too small for receive
  autotuning to raise it). The app's messages are small (earlier runs' SNAP sums: queries
  about 60 B a write, replies about 40), so the window is 36 B, the least segment Linux
  sends with timestamps (68 B less 32 of headers; below it the sender waits for its persist
  timer, a stall of hundreds of ms that no delay makes): a message longer than that takes a
  round trip more: `window`.
- initcwnd: db's route to app1 with `initcwnd 1` (db's first window, and the one it restarts
  from after an idle longer than the RTO, which each of the pool's 48 connections mostly is),
  app1's with `advmss --advmss` and `quickack 1`: db's segments are then 36 B
  (tcp_min_snd_mss, 48, less the timestamps), a reply longer than that two, and the second
  waits for the first's ACK, a round trip: `window`. Without the small segment a window of
  one segment changes no round trip (every message fits one); without quickack app1's
  delayed ACK would add its 40 ms too, the delayed-ACK class on the link. Not initrwnd: the
  window a host first advertises is the receiver window's case.
  Measured: no excess. This machine's congestion control is BBR (net.ipv4.tcp_congestion_
  control, in every namespace too), and Linux restarts no window after an idle for a
  congestion control with its own cong_control (tcp_cwnd_restart is skipped): initcwnd 1
  holds for a connection's first flight only (db's cwnd was 418 after the run, its mss 36).
  A route's `congctl cubic` on db's route would bring the restart back; not run yet.
  The segment sizes are the kernel's: Linux 6.18 floors a route's advmss at TCP_MIN_MSS (88,
  76 B of data with timestamps), so there db's segments are 76 B, not 36, and fewer replies
  need two; the `ss -ti` lines each run keeps say what the kernel used.
- delayed_ack: skipped. Nagle's wait for a delayed ACK needs a sender with Nagle on, and both
  ends of app1<->db turn it off: asyncio sets TCP_NODELAY on every TCP transport (asyncpg's),
  PostgreSQL on every connection it accepts. Producing it would mean changing the app.

A route's metrics are read when a connection opens, and the app's asyncpg pool keeps its
connections: before each case's run (and after it) app1's connections to db are aborted
(`ss -K`); the pool opens new ones on their next use, in the run's passive phase. `ss -ti` on
db's side after each run is kept as the check of what the route did (mss, cwnd, snd_wnd).

For each case and each (transaction, direction) of app1<->db: the measured gradient and its
interval, the passive count (causal paths), the verdict, the causes named and SNAP's classes
while measured and in the passive phase; where the verdict is above, whether the case's
expected cause is among those named. SNAP's shares in both phases are kept beside: explain
names a window limit or a fast retransmit where common (a problem there all along costs the
same round trips), a timeout, Nagle's wait or a handshake only where the delay brought it
(linkgrad/explain/verdict.py). One run per case.

    sudo .venv/bin/python -m benchmarks.explain_causes [--cases baseline,loss] [--cycles 6]
    offline, runs made before: --rescore out/explain_causes.json

Writes benchmarks/out/explain_causes.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.on_testbed import LINKGRAD, scratch_root
from benchmarks.results_md import update_section
from coordinator.config.run_dir import read_measurements
from coordinator.config.snap_file import read_snap
from linkgrad.snap.traffic import link_traffic
from testbed import impairments
from testbed.description import DescribedTestbed
from testbed.lifecycle import down, up
from testbed.topology import DEFAULT
from testbed.transactions import transactions_of

OUT = Path(__file__).with_name("out")
TAG = "ec"
APP, DB, DB_PORT = "app1", "db", 5432
PAIRS = (f"{APP}->{DB}", f"{DB}->{APP}")
TRANSACTIONS = ("ViewItem", "single")


@dataclass(frozen=True)
class Settings:
    loss_probability: float = 0.1  # per packet
    window_bytes: int = 36  # the least segment with timestamps: 68 B less 32 of headers
    advmss_bytes: int = 48  # db's segments: tcp_min_snd_mss (48) less timestamps, 36 B
    cycles: int = 6
    period_s: float = 8.0
    magnitude_ms: float = 15.0
    rate_per_s: float = 40.0


Impair = Callable[[DescribedTestbed, Settings], AbstractContextManager[None]]


@contextmanager
def _nothing(_: DescribedTestbed, __: Settings) -> Iterator[None]:
    yield


def _loss(tb: DescribedTestbed, s: Settings) -> AbstractContextManager[None]:
    return impairments.random_loss(tb.host(DB).namespace, tb.host(APP).address,
                                   s.loss_probability)


@contextmanager
def _window(tb: DescribedTestbed, s: Settings) -> Iterator[None]:
    app, db = tb.host(APP), tb.host(DB)
    with impairments.route_metrics(app.namespace, db.address, {"window": s.window_bytes}), \
            impairments.route_metrics(db.namespace, app.address, {"window": s.window_bytes}):
        yield


@contextmanager
def _initcwnd(tb: DescribedTestbed, s: Settings) -> Iterator[None]:
    app, db = tb.host(APP), tb.host(DB)
    with impairments.route_metrics(db.namespace, app.address, {"initcwnd": 1}), \
            impairments.route_metrics(app.namespace, db.address,
                                      {"advmss": s.advmss_bytes, "quickack": 1}):
        yield


@dataclass(frozen=True)
class Case:
    name: str
    what: str  # the table's words for what was put on the link
    expected: str | None  # the cause kind explain should name where the verdict is above
    impair: Impair | None  # None: skipped, for `skipped`'s reason
    skipped: str = ""


def cases(s: Settings) -> tuple[Case, ...]:
    return (
        Case("baseline", "nothing", None, _nothing),
        Case("loss", f"db drops {s.loss_probability:.0%} of app1's packets (iptables "
             "statistic)", "loss", _loss),
        Case("receiver_window", f"app1 and db advertise at most {s.window_bytes} B to each "
             "other (routes' window)", "window", _window),
        Case("initcwnd", f"db: initcwnd 1 to app1; app1: advmss {s.advmss_bytes}, quickack 1 "
             "(routes)", "window", _initcwnd),
        Case("delayed_ack", "Nagle with delayed ACKs", "nagle", None,
             skipped="both ends set TCP_NODELAY (asyncio's transports, PostgreSQL): Nagle "
             "never holds a write without changing the app"),
    )


def experiment_yaml(root: Path, s: Settings, tag: str = TAG) -> str:
    """Both directions of app1<->db at once, ViewItem and single only in the load."""
    paths = {t.name: t.path for t in transactions_of(DEFAULT) if t.name in TRANSACTIONS}
    mix = ",".join(f"{paths[n]}=1" for n in TRANSACTIONS)
    lines = ["name: explain-causes", f"testbed: {tag}",
             f"workload: {{host: client, rate_per_s: {s.rate_per_s:g}, mix: {json.dumps(mix)}}}",
             "transactions:",
             *(f"  {n}: {json.dumps('^' + paths[n].split('?')[0])}" for n in TRANSACTIONS),
             "parameters:", "  training_s: 30", "  message_threshold: 20",
             f"  cycles: {s.cycles}", f"  period_s: {s.period_s:g}",
             f"  magnitude_ms: {s.magnitude_ms:g}", "  adaptive: false",
             f"  include: {json.dumps(list(PAIRS))}", "  concurrent: 2",
             f"output: {root / 'runs'}"]
    return "\n".join(lines) + "\n"


def cells(rows: list[dict[str, Any]], snap: dict[str, dict[str, dict[str, float]]],
          expected: str | None, traffic: dict[str, dict[str, float | None]] | None = None
          ) -> list[dict[str, Any]]:
    """The case's (transaction, direction) rows of app1<->db with their SNAP classes
    (`snap`: link label -> phase -> class -> seconds) and sender's writes (`traffic`, by
    label), and whether the expected cause was named where the verdict is above (None where
    it is not above)."""
    truth = {(t.name, p): t.expected[p] for t in transactions_of(DEFAULT) for p in PAIRS
             if t.name in TRANSACTIONS}
    out = []
    for r in rows:
        if (r["transaction"], r["pair"]) not in truth or r["gradient"] is None:
            continue
        kinds = [c["kind"] for c in r["causes"]]
        out.append({
            "transaction": r["transaction"], "pair": r["pair"],
            "crossings": truth[(r["transaction"], r["pair"])],
            "gradient": r["gradient"], "ci95": r["ci95"],
            "passive": r["passive_gradient"], "passive_ci95": r["passive_ci95"],
            "verdict": r["verdict"], "causes": kinds, "texts": [c["text"] for c in r["causes"]],
            "snap": snap.get(r["link"], {}), "traffic": (traffic or {}).get(r["link"]),
            "named": (expected in kinds) if r["verdict"] == "above" and expected else None})
    return out


def snap_by_link(gradients: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    return {lk["link"]["label"]: lk.get("snap") or {} for lk in gradients.get("links", [])}


def traffic_by_link(run_dir: Path) -> dict[str, dict[str, float | None]]:
    """Per measured link, what its sender wrote while it was measured (SNAP's sums): the
    sizes explain's window cause reads (segments per write beyond Linux's initial window)."""
    snap = read_snap(run_dir)
    if snap is None:
        return {}
    out: dict[str, dict[str, float | None]] = {}
    for m in read_measurements(run_dir / "gradients.json"):
        if (key := m.link.snap_key()) is None:
            continue
        t = link_traffic(snap.reports, snap.addresses, key, m.window)
        out[m.link.label] = {"writes": t.writes, "opened": t.opened,
                             "bytes_per_write": t.write_bytes / t.writes if t.writes else None,
                             "segments_per_write": t.segments / t.writes if t.writes else None}
    return out


def ss_lines(namespace: str, port: int, peer: str) -> list[str]:
    """`ss -ti` of the connections from `peer` to `port` (the server's side), one line
    each."""
    done = subprocess.run(["ip", "netns", "exec", namespace, "ss", "-tinH", "sport", "=",
                           f":{port}", "dst", peer], capture_output=True, text=True,
                          timeout=30, check=False)
    lines = done.stdout.splitlines()
    # ss prints a socket's addresses and its tcp_info on two lines (a last half: dropped)
    return [" ".join((a + " " + b).split())
            for a, b in zip(lines[::2], lines[1::2], strict=False)]


def one_run(experiment: Path, env: dict[str, str]) -> dict[str, Any]:
    started = time.perf_counter()
    done = subprocess.run([LINKGRAD, "run", str(experiment), "--json"], capture_output=True,
                          text=True, env=env, timeout=3600, check=False)
    out: dict[str, Any] = {"seconds": time.perf_counter() - started}
    try:
        status = json.loads(done.stdout)
    except json.JSONDecodeError:
        status = {}
    if "run_dir" not in status:
        return {**out, "status": "failed", "error": (done.stdout + done.stderr)[-3000:]}
    run_dir = Path(status["run_dir"])
    gradients, explained = run_dir / "gradients.json", run_dir / "explain.json"
    return {**out, "status": status["status"], "run_dir": str(run_dir),
            # a run that stopped early may have measured nothing, or not explained it
            "rows": json.loads(explained.read_text())["rows"] if explained.exists() else [],
            "snap": snap_by_link(json.loads(gradients.read_text()) if gradients.exists()
                                 else {}),
            "traffic": traffic_by_link(run_dir) if gradients.exists() else {}}


def run_case(case: Case, tb: DescribedTestbed, s: Settings, experiment: Path,
             env: dict[str, str]) -> dict[str, Any]:
    app, db = tb.host(APP), tb.host(DB)
    assert case.impair is not None
    with ExitStack() as stack:
        stack.enter_context(case.impair(tb, s))
        # after the routes and however the run ends: the next case's connections are new
        stack.callback(impairments.close_connections, app.namespace, db.address, DB_PORT)
        impairments.close_connections(app.namespace, db.address, DB_PORT)
        result = one_run(experiment, env)
        result["ss"] = ss_lines(db.namespace, DB_PORT, app.address)[:4]
    return result


def markdown(results: list[dict[str, Any]], s: Settings) -> str:
    lines = ["## Explain names the problem put on a link (`benchmarks/explain_causes.py`)", "",
             "RUBiS-like testbed; app1<->db measured in both directions at once, ViewItem "
             f"(2 crossings) and single (1) at {s.rate_per_s:g}/s, {s.cycles} cycles of "
             f"{s.period_s:g} s at {s.magnitude_ms:g} ms, 30 s passive phase; each problem on "
             "app1<->db alone for its whole run. One run per case. Expected cause named: "
             "asked only where the verdict is above.", "",
             "| case | put on the link | transaction | link | gradient [95%] | passive "
             "[95%] | verdict | causes named | expected named | SNAP measured / passive "
             "| sender's writes (B, segments each) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("skipped"):
            lines.append(f"| {r['case']} | {r['what']} | | | | | skipped | | | "
                         f"{r['skipped']} | |")
            continue
        if not r["cells"]:  # failed, or stopped before a row of app1<->db was measured
            lines.append(f"| {r['case']} | {r['what']} | | | | | run {r['status']} | | | | |")
            continue
        for c in r["cells"]:
            snap = snap_shares(c["snap"])
            named = {None: "", True: "yes", False: "**no**"}[c["named"]]
            t = c.get("traffic") or {}
            writes = (f"{t['bytes_per_write']:.0f}, {t['segments_per_write']:.1f}"
                      if t.get("bytes_per_write") and t.get("segments_per_write") else "-")
            lines.append(
                f"| {r['case']} | {r['what']} | {c['transaction']} | {c['pair']} | "
                f"{c['gradient']:.2f} [{c['ci95'][0]:.2f}, {c['ci95'][1]:.2f}] | "
                + (f"{c['passive']:.2f} [{c['passive_ci95'][0]:.2f}, "
                   f"{c['passive_ci95'][1]:.2f}]" if c["passive"] is not None else "-")
                + f" | {c['verdict']} | {', '.join(c['causes']) or '-'} | {named} | {snap} "
                f"| {writes} |")
    checked = [f"{r['case']}: {ss_summary(r['ss'])}" for r in results if r.get("ss")]
    if checked:
        lines += ["", "`ss -ti` on db's side of app1's connections after each run (the "
                  "first one): " + "; ".join(checked) + "."]
    asked = [c for r in results for c in r.get("cells", []) if c["named"] is not None]
    lines += ["", f"Expected cause named in {sum(c['named'] for c in asked)} of {len(asked)} "
              "rows judged above."]
    return "\n".join(lines)


SS_FIELDS = ("mss", "cwnd", "snd_wnd", "rwnd_limited", "retrans", "data_segs_out")


def ss_summary(lines: list[str]) -> str:
    """The fields of `ss -ti`'s first connection that show what a route or a rule did."""
    found = [re.search(rf"\b{f}:(\S+)", lines[0]) for f in SS_FIELDS] if lines else []
    return " ".join(f"{f}:{m.group(1)}" for f, m in zip(SS_FIELDS, found, strict=False) if m) \
        or "-"


def snap_shares(phases: dict[str, dict[str, float]]) -> str:
    """Each problem class's share of the link's connection-seconds (verdict.py's measure),
    while measured / in the passive phase."""
    total = {ph: sum(phases.get(ph, {}).values()) for ph in ("measurement", "passive")}
    share = {ph: {k: v / total[ph] for k, v in phases.get(ph, {}).items() if total[ph] > 0}
             for ph in total}
    found = sorted({k for ph in share.values() for k in ph} - {"app_limited"})
    return "; ".join(f"{k} {share['measurement'].get(k, 0):.0%} / "
                     f"{share['passive'].get(k, 0):.0%}" for k in found) or "-"


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt  # the finally clauses run: the problem undone, the testbed down


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Settings()
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--loss", type=float, default=d.loss_probability,
                    help="loss probability per packet")
    ap.add_argument("--window-bytes", type=int, default=d.window_bytes)
    ap.add_argument("--advmss", type=int, default=d.advmss_bytes)
    ap.add_argument("--cycles", type=int, default=d.cycles)
    ap.add_argument("--note", default="", help="a paragraph for the section (what the runs "
                    "showed beside the table)")
    ap.add_argument("--rescore", type=Path, metavar="JSON",
                    help="explain_causes.json from before: its runs explained again, offline")
    args = ap.parse_args()
    s = Settings(loss_probability=args.loss, window_bytes=args.window_bytes,
                 advmss_bytes=args.advmss, cycles=args.cycles)
    before = json.loads(args.rescore.read_text()) if args.rescore else None
    if before is not None:  # its runs' settings, not today's defaults
        s = Settings(**before["settings"])
    wanted = args.cases.split(",") if args.cases else [c.name for c in cases(s)]
    if unknown := set(wanted) - {c.name for c in cases(s)}:
        ap.error(f"unknown cases {sorted(unknown)}: the cases are "
                 f"{[c.name for c in cases(s)]}")
    chosen = [c for c in cases(s) if c.name in wanted]
    results = rescored(before, chosen) if before is not None else measured(chosen, s)
    OUT.mkdir(exist_ok=True)
    (OUT / "explain_causes.json").write_text(json.dumps(
        {"settings": s.__dict__, "results": results}, indent=1))
    text = markdown(results, s) + (f"\n\n{args.note}" if args.note else "")
    update_section("explain-causes", text)
    print(text)
    return 0


def measured(chosen: list[Case], s: Settings) -> list[dict[str, Any]]:
    signal.signal(signal.SIGTERM, _interrupt)
    root = scratch_root("explain_causes")
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    results = []
    try:
        tb = up(DEFAULT, TAG, root)
        experiment = root / "explain-causes.yaml"
        experiment.write_text(experiment_yaml(root, s))
        for case in chosen:
            head = {"case": case.name, "what": case.what, "expected": case.expected}
            if case.impair is None:
                results.append({**head, "skipped": case.skipped})
                continue
            r = run_case(case, tb, s, experiment, env)
            r["cells"] = cells(r.pop("rows", []), r.get("snap", {}), case.expected,
                               r.get("traffic"))
            results.append({**head, **r})
            print(f"{case.name}: {r['status']} in {r['seconds']:.0f} s: " + "; ".join(
                f"{c['transaction']} {c['pair']} {c['gradient']:.2f} {c['verdict']} "
                f"{c['causes']}" for c in r["cells"]), flush=True)
    finally:
        down(TAG, root=root)  # the runs stay in root, for --rescore
        print(f"explain_causes: runs in {root / 'runs'}", flush=True)
    return results


def rescored(before: dict[str, Any], chosen: list[Case]) -> list[dict[str, Any]]:
    """Each earlier run explained by the code as it is now (`linkgrad explain`, offline; the
    run directories must still be there)."""
    by_name = {c.name: c for c in chosen}
    out = []
    for r in before["results"]:
        if r["case"] not in by_name or "run_dir" not in r:
            out.append(r)
            continue
        done = subprocess.run([LINKGRAD, "explain", r["run_dir"], "--json"],
                              capture_output=True, text=True, timeout=600, check=True)
        rows = json.loads(done.stdout)["rows"]
        out.append({**r, "cells": cells(rows, r.get("snap", {}), by_name[r["case"]].expected,
                                        r.get("traffic"))})
    return out


if __name__ == "__main__":
    sys.exit(main())

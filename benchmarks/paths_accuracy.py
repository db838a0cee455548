"""Causal paths against the truth on the testbed: the fraction of requests whose inferred tree
is exactly their true one, for WAP5's §5.1 linking, FCFS and context linking (ours), on the
same traces, at several request rates.

The truth is logged by the testbed itself and read only here: nginx logs each request's
client connection and the id it hands the app (X-Request-Id, `truth-web.log`); the app logs,
under that id, the connection nginx used and each database call's local port and times
(`truth-<app>.log`). A request's messages are found in the trace by connection and time: its
request and reply on the client connection, on nginx's upstream connection, and each query
and answer on its database connection. True parents follow WAP5's causality model: a
message's parent is the last message of the same request its sender received before
sending it. Transactions with calls the app does not log (the cache, the peer, StoreBid's
BEGIN and COMMIT) are not in the mix.

    nice -n 5 .venv/bin/python -m benchmarks.paths_accuracy [--tag tb] [--rates 50,100,200]
        [--seconds 60]        (a testbed up: `linkgrad testbed up`)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.results_md import update_section
from coordinator.config.trace_file import read_trace
from linkgrad.paths.accuracy import best_instances
from linkgrad.paths.analysis import LINKERS
from linkgrad.paths.clocks import clock_offsets
from linkgrad.paths.instances import path_instances
from linkgrad.paths.messages import Trace
from linkgrad.paths.reconcile import HostTrace, reconcile
from linkgrad.paths.wap5 import LinkingSettings

ROOT = Path(__file__).parents[1]
OUT = Path(__file__).with_name("out") / "paths_accuracy.json"
SECTION = "paths-accuracy"
TESTBED_ROOT = Path(os.environ.get("LINKGRAD_TESTBED_ROOT", "/var/tmp"))
MIX = {"ViewItem": "/rubis/ViewItem?id=42", "PutBidAuth": "/rubis/PutBidAuth?user=7",
       "PutBid": "/rubis/PutBid?id=42&user=7", "single": "/pattern/single",
       "sequential": "/pattern/sequential", "async": "/pattern/async"}
TOLERANCE_S = 0.005

EXPERIMENT = """\
name: paths-accuracy
testbed: {tag}
transactions:
{transactions}
workload:
  host: client
  rate_per_s: {rate}
  mix: "{mix}"
"""


def capture(tag: str, rate: float, seconds: float, directory: Path) -> Path:
    """`linkgrad paths` on the testbed with its load generator at `rate`; the trace's path."""
    experiment = directory / f"paths-{rate:g}.yaml"
    experiment.write_text(EXPERIMENT.format(
        tag=tag, rate=rate, mix=",".join(f"{p}=1" for p in MIX.values()),
        transactions="\n".join(f"  {n}: ^{p.split('?')[0]}" for n, p in MIX.items())))
    trace = directory / f"trace-{rate:g}.jsonl"
    subprocess.run([sys.executable, "-m", "coordinator.cli", "paths", str(experiment),
                    "--duration", str(seconds), "--output-trace", str(trace), "--json"],
                   check=True, capture_output=True, text=True, cwd=ROOT, timeout=seconds + 300)
    return trace


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class Conversations:
    """The trace's messages by connection, and the connections by (client port, server)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        m, c = trace.messages, trace.connections
        t = np.where(np.isnan(m.send_s), m.recv_s, m.send_s)
        self.on: dict[int, list[int]] = {}
        for i in np.argsort(t, kind="stable").tolist():
            self.on.setdefault(int(m.conn[i]), []).append(i)
        host = [trace.hosts[h] for h in trace.node_host]
        # several connections where a client port was reused (reconcile splits at SYNs)
        self.conns_of: dict[tuple[int, str], list[int]] = {}
        for k, (cp, sn) in enumerate(zip(c.client_port.tolist(), c.server_node.tolist(),
                                         strict=True)):
            self.conns_of.setdefault((int(cp), host[int(sn)]), []).append(k)

    def exchange(self, port: int, server_host: str, at_s: float, sent: bool,
                 within: tuple[float, float] | None = None, first: bool = False
                 ) -> tuple[int, int] | None:
        """(request, reply) on the connection from `port` to `server_host`: the client's
        message nearest `at_s` (its send time if `sent`, else its arrival), and the next.
        With `within` (earliest, latest): the latest such time in it (the `first` if asked),
        not the nearest: a handler's clock reading comes after its request arrived, a query
        leaves after the reading before it, and the nearest may be the connection's next."""
        m = self.trace.messages
        found: list[tuple[float, list[int], int]] = []  # (time, its connection's, position)
        for k in self.conns_of.get((port, server_host), ()):
            client = self.trace.connections.client_node[k]
            msgs = self.on.get(k, [])
            for pos, i in enumerate(msgs):
                t = m.send_s[i] if sent else m.recv_s[i]
                if m.src[i] != client or not np.isfinite(t):
                    continue
                near = within[0] <= t <= within[1] if within is not None \
                    else abs(t - at_s) <= TOLERANCE_S
                if near:
                    found.append((t, msgs, pos))
        if not found:
            return None
        if within is not None:
            _, msgs, best = (min if first else max)(found, key=lambda f: f[0])
        else:
            _, msgs, best = min(found, key=lambda f: abs(f[0] - at_s))
        if best + 1 >= len(msgs):
            return None
        return msgs[best], msgs[best + 1]


def truth(trace: Trace, directory: Path) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """(true parent per message: −1 a request's root, −2 in no known request; the request of
    each message, −1 none; root -> transaction), from the truth logs in `directory`."""
    conv = Conversations(trace)
    apps: dict[str, dict[str, Any]] = {}
    late: dict[str, list[dict[str, Any]]] = {}
    for log in directory.glob("truth-app*.log"):
        host = log.stem.removeprefix("truth-")
        for line in _lines(log):
            r = json.loads(line)
            if r.get("late"):
                late.setdefault(r["rid"], []).extend({**c, "host": host} for c in r["calls"])
            else:
                apps[r["rid"]] = {**r, "host": host}
    members: list[list[int]] = []
    name_of: dict[int, str] = {}
    for line in _lines(directory / "truth-web.log"):
        msec, request_time, _, port, rid = line.split()
        front = conv.exchange(int(port), "web", float(msec) - float(request_time), sent=False)
        app = apps.get(rid)
        if front is None or app is None:
            continue
        # the app reads the host's clock, as the capture does: the request it handles is the
        # last to arrive before its handler began; each query the first to leave after the
        # reading before it (the next may follow within 0.1 ms of the reading after it)
        back = conv.exchange(int(app["peer_port"]), app["host"], app["t_in"], sent=False,
                             within=(app["t_in"] - 1.0, app["t_in"]))
        calls = [conv.exchange(int(c["port"]), "db", c["t0"], sent=True,
                               within=(c["t0"], c["t1"]), first=True)
                 for c in app["calls"] + late.get(rid, []) if c.get("port")]
        if back is None or any(x is None for x in calls):
            continue
        members.append([*front, *back, *(i for x in calls if x for i in x)])
        name_of[front[0]] = next((n for n, p in MIX.items() if app["path"] == p.split("?")[0]),
                                 app["path"])
    return *_parents(trace, members), name_of


def _parents(trace: Trace, members: Sequence[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """WAP5's causality within each request: the sender's last received message of it."""
    m = trace.messages
    parent = np.full(len(m), -2, dtype=np.int64)
    request = np.full(len(m), -1, dtype=np.int64)
    for r, msgs in enumerate(members):
        for i in msgs:
            got = [j for j in msgs if m.dst[j] == m.src[i] and m.recv_s[j] <= m.send_s[i]]
            parent[i] = max(got, key=lambda j: m.recv_s[j]) if got else -1
            request[i] = r
    return parent, request


def accuracy(trace: Trace, true_parent: np.ndarray, request: np.ndarray,
             name_of: dict[int, str], linker: str, window_s: float) -> dict[str, Any]:
    settings = LinkingSettings(window_s=window_s)
    best = best_instances(path_instances(LINKERS[linker](trace, settings), settings))
    members: dict[int, list[int]] = {}
    for i, r in enumerate(request.tolist()):
        if r >= 0:
            members.setdefault(r, []).append(i)
    right: dict[str, list[int]] = {}
    for root, name in name_of.items():
        inst = best.get(root)
        ok = inst is not None and list(inst.messages) == members[int(request[root])] and \
            bool(np.all(np.asarray(inst.parents) == true_parent[np.asarray(inst.messages)]))
        right.setdefault(name, []).append(int(ok))
    every = [x for v in right.values() for x in v]
    return {"linker": linker, "requests": len(every), "accuracy": float(np.mean(every)),
            "by_transaction": {n: float(np.mean(v)) for n, v in sorted(right.items())}}


def clock_recovery(hosts: list[HostTrace], seed: int = 5) -> dict[str, Any]:
    """Each traced host's timestamps shifted by a random ±50 ms; the offsets found from the
    messages (Paxson's symmetric least delays) against those put in, relative to the
    reference host."""
    rng = np.random.default_rng(seed)
    put = {h.name: float(rng.uniform(-0.05, 0.05)) for h in hosts}
    shifted = [HostTrace(h.name, h.addresses, h.listening, [
        dataclasses.replace(r, first_s=r.first_s + put[h.name], last_s=r.last_s + put[h.name])
        for r in h.records]) for h in hosts]
    trace = reconcile(shifted)
    found = clock_offsets(trace)
    errors = {}
    for i, name in enumerate(trace.hosts):
        if name in put and found.reference[i] >= 0:
            ref = trace.hosts[found.reference[i]]
            errors[name] = abs(found.offset_s[i] - (put[name] - put[ref]))
    return {"put_s": put, "error_s": errors, "max_error_s": max(errors.values(), default=None)}


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    rates = sorted({r["rate_per_s"] for r in rows})
    lines = ["## Causal paths against the truth on the testbed (`benchmarks/paths_accuracy.py`)",
             "", f"{meta['when']}, kernel {meta['kernel']}, {meta['cpus']} cores (shared). The "
             f"testbed's nginx, app (uvicorn) and PostgreSQL, every host traced for "
             f"{meta['seconds']:g} s per rate with its load generator at Poisson times over "
             f"{', '.join(MIX)} (equal shares). Accuracy: the requests whose inferred tree is "
             "exactly the true one (messages and parents), the truth from nginx's and the app's "
             "own logs. Goal: ours ≥ 0.95 at 200 requests/s.", "",
             "| linker | " + " | ".join(f"{r:g} req/s" for r in rates) + " |",
             "|---|" + "---|" * len(rates)]
    for linker in ("wap5", "fcfs", "context"):
        cells = []
        for rate in rates:
            got = [r for r in rows if r["rate_per_s"] == rate and r["linker"] == linker]
            cells.append(f"{got[0]['accuracy']:.3f} ({got[0]['requests']})" if got else "-")
        name = {"wap5": "WAP5 §5.1", "fcfs": "FCFS", "context": "context (ours)"}[linker]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    clocks = meta.get("clocks")
    if clocks and clocks["max_error_s"] is not None:
        lines += ["", f"Clock offsets: each host's timestamps moved by a random ±50 ms in the "
                  f"{clocks['rate_per_s']:g} requests/s trace; recovered within "
                  f"{1e3 * clocks['max_error_s']:.3f} ms (goal 0.2 ms) over "
                  f"{len(clocks['error_s'])} hosts."]
    lines += ["", "By transaction at the highest rate:", ""]
    top = max(rates)
    for r in rows:
        if r["rate_per_s"] == top:
            lines.append(f"- {r['linker']}: " + ", ".join(
                f"{n} {v:.2f}" for n, v in r["by_transaction"].items()))
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--tag", default="tb")
    p.add_argument("--rates", default="50,100,200")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--window", type=float, default=2.0)
    p.add_argument("--reanalyse", action="store_true", help="the traces of the last run again")
    args = p.parse_args()
    work = OUT.parent / "paths_accuracy"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for rate in (float(x) for x in args.rates.split(",")):
        trace_file = work / f"trace-{rate:g}.jsonl"
        logs = work / f"truth-{rate:g}"
        testbed = TESTBED_ROOT / f"linkgrad-testbed-{args.tag}"
        if not args.reanalyse:
            for log in testbed.glob("truth-*.log"):
                log.write_text("")  # this rate's requests only (the processes append)
            trace_file = capture(args.tag, rate, args.seconds, work)
            logs.mkdir(exist_ok=True)
            for log in testbed.glob("truth-*.log"):
                (logs / log.name).write_text(log.read_text())
        trace = reconcile(list(read_trace(trace_file)))
        parent, request, name_of = truth(trace, logs)
        for linker in ("wap5", "fcfs", "context"):
            row = {"rate_per_s": rate, "messages": len(trace.messages),
                   "truth_requests": len(name_of),
                   **accuracy(trace, parent, request, name_of, linker, args.window)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    top = max(float(x) for x in args.rates.split(","))
    clocks = {"rate_per_s": top,
              **clock_recovery(list(read_trace(work / f"trace-{top:g}.jsonl")))}
    meta = {"when": datetime.now(UTC).isoformat(timespec="seconds"),
            "kernel": platform.release(), "cpus": os.cpu_count(), "seconds": args.seconds,
            "clocks": clocks}
    OUT.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    section = markdown(meta, rows)
    print(section)
    update_section(SECTION, section)


if __name__ == "__main__":
    main()

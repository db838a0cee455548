"""How fast the causal-path analysis runs on a CoDeeN-sized trace (WAP5 §6.5, Table 2: 115
hosts, 4.7 million messages, an hour; linking took WAP5 5-10 minutes), on one core, and how
much memory it takes: goal ≤ 60 s and ≤ 4 GB.

The trace is generated with known paths (testbed.synthetic_paths): clients (not traced) ask
one of 100 proxies; a hit is answered at once, a miss goes to a second proxy and on to one of
10 origin servers (not traced), some first ask one of 5 DNS servers; each proxy's work is
lognormal around 1 ms. Each linker runs in a process of its own (its peak memory alone):
linking, path instances, patterns; the accuracy against the known paths is reported beside.

    nice -n 5 .venv/bin/python -m benchmarks.paths_linking_speed [--messages 4700000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.results_md import update_section
from linkgrad.paths.accuracy import best_instances, tree_accuracy
from linkgrad.paths.analysis import LINKERS
from linkgrad.paths.clocks import clock_offsets
from linkgrad.paths.instances import path_instances
from linkgrad.paths.patterns import aggregate
from linkgrad.paths.wap5 import LinkingSettings
from testbed.synthetic_paths import Application, Behaviour, SyntheticTrace, generate

OUT = Path(__file__).with_name("out") / "paths_linking_speed.json"
SECTION = "paths-linking-speed"
PROXIES, ORIGINS, DNS, CLIENT_HOSTS = 100, 10, 5, 1000
MESSAGES_PER_REQUEST = 4.3  # the mix below, on average


def codeen() -> Application:
    """A CoDeeN-like CDN: 115 traced-or-not server hosts and many client hosts."""
    origin = Behaviour("origin", (), 0.02)
    dns = Behaviour("dns", (), 0.002)
    second = Behaviour("proxy", ((origin,),), 0.001)
    hit = Behaviour("proxy", (), 0.001)
    miss = Behaviour("proxy", ((second,),), 0.001)
    miss_dns = Behaviour("proxy", ((dns,), (second,)), 0.001)
    node_host = {f"c{i}": f"c{i}" for i in range(CLIENT_HOSTS)}
    node_host |= {f"p{i}": f"p{i}" for i in range(PROXIES)}
    node_host |= {f"o{i}": f"o{i}" for i in range(ORIGINS)}
    node_host |= {f"d{i}": f"d{i}" for i in range(DNS)}
    return Application(
        services={"proxy": (tuple(f"p{i}" for i in range(PROXIES)), 3128),
                  "origin": (tuple(f"o{i}" for i in range(ORIGINS)), 80),
                  "dns": (tuple(f"d{i}" for i in range(DNS)), 53)},
        node_host=node_host, requests=((0.5, hit), (0.35, miss), (0.15, miss_dns)),
        clients=tuple(f"c{i}" for i in range(CLIENT_HOSTS)), default_delay_s=0.02,
        jitter_s=0.002)


def make(messages: int, seconds: float) -> SyntheticTrace:
    untraced = frozenset([*(f"c{i}" for i in range(CLIENT_HOSTS)),
                          *(f"o{i}" for i in range(ORIGINS))])
    return generate(codeen(), messages / MESSAGES_PER_REQUEST / seconds, seconds, seed=11,
                    untraced=untraced)


def measure(linker: str, messages: int, seconds: float) -> dict[str, Any]:
    """In this process: generate, then time the analysis (the generation is not timed)."""
    s = make(messages, seconds)
    settings = LinkingSettings(window_s=2.0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0, c0 = time.perf_counter(), time.process_time()
    probs = LINKERS[linker](s.trace, settings)
    t1 = time.perf_counter()
    per_root = path_instances(probs, settings)
    t2 = time.perf_counter()
    best = [inst[0] for inst in per_root if inst]
    patterns = aggregate(best, s.trace, clock_offsets(s.trace))
    t3 = time.perf_counter()
    cpu = time.process_time() - c0
    right, total = tree_accuracy(best_instances(per_root), s.true_parent, s.request)
    return {"linker": linker, "messages": len(s.trace.messages),
            "hosts": len(s.trace.hosts), "link_s": t1 - t0, "instances_s": t2 - t1,
            "patterns_s": t3 - t2, "wall_s": t3 - t0, "cpu_s": cpu,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "rss_before_gb": before / 2**20, "patterns": len(patterns),
            "accuracy": right / total if total else None, "requests": total,
            "nil_send": int(np.isnan(s.trace.messages.send_s).sum())}


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = ["## Linking speed on a CoDeeN-sized trace (`benchmarks/paths_linking_speed.py`)",
             "", f"{meta['when']}, {meta['cpu']}, one core, Python {meta['python']}. "
             f"Generated: {rows[0]['messages']:,} messages, {PROXIES + ORIGINS + DNS} server "
             f"hosts and {CLIENT_HOSTS} client hosts (clients and origins not traced: nil "
             f"times), {meta['seconds']:g} s of trace. WAP5 (§6.5): 4.7 million messages, "
             "linking 5-10 minutes. Goal: ≤ 60 s, ≤ 4 GB.", "",
             "| linker | link s | instances s | patterns s | total s | peak GB | accuracy |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.3f}"
        lines.append(f"| {r['linker']} | {r['link_s']:.1f} | {r['instances_s']:.1f} | "
                     f"{r['patterns_s']:.1f} | {r['wall_s']:.1f} | {r['peak_rss_gb']:.2f} | "
                     f"{acc} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--messages", type=int, default=4_700_000)
    p.add_argument("--seconds", type=float, default=3600.0)
    p.add_argument("--linkers", default="wap5,context")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.messages, args.seconds)))
        return
    rows = []
    for linker in args.linkers.split(","):
        done = subprocess.run([sys.executable, "-m", "benchmarks.paths_linking_speed",
                               "--child", linker, "--messages", str(args.messages),
                               "--seconds", str(args.seconds)], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).parents[1],
                              env={**os.environ, "OMP_NUM_THREADS": "1",
                                   "OPENBLAS_NUM_THREADS": "1"})
        rows.append(json.loads(done.stdout.splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    meta = {"when": datetime.now(UTC).isoformat(timespec="seconds"),
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(), "seconds": args.seconds}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    section = markdown(meta, rows)
    print(section)
    update_section(SECTION, section)


if __name__ == "__main__":
    main()

"""`paths --pcap` against the sniffer, on one run of the testbed's traffic: tcpdump -i any in
every host's namespace while `linkgrad paths --output-trace` traces the same hosts. Says how
many of the capture's request trees fall in the pattern the sniffer's give (its trace cut to
what a capture knows: no processes or threads; and as it is), and how fast the captures are
read: scapy's raw reader with the headers unpacked by struct (what read_pcap does) against
scapy dissecting every packet into its layers.

    linkgrad testbed up --tag pc
    PYTHONPATH=. .venv/bin/python -m benchmarks.pcap_paths --tag pc [--duration 30]

On a topology with nginx and the first app server on one host (web: [web, app]), nginx asks
the app over loopback, a hop a capture sees with the host at both ends:

    linkgrad testbed up experiments/topology-colocated.yaml --tag co
    PYTHONPATH=. .venv/bin/python -m benchmarks.pcap_paths --tag co --section pcap-paths-colocated

Writes benchmarks/out/SECTION.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.on_testbed import linkgrad, scratch_root
from benchmarks.results_md import publish
from coordinator.config.pcap_trace import read_pcap
from coordinator.config.trace_compare import as_captured, tree_agreement, within
from coordinator.config.trace_file import read_trace

EXPERIMENT = """name: pcap-bench
testbed: {tag}
workload: {{host: client, rate_per_s: {rate}}}
transactions: {{ViewItem: ^/rubis/ViewItem, PutBid: ^/rubis/PutBid$, single: ^/pattern/single}}
output: {root}/runs
"""


def testbed_hosts(tag: str) -> dict[str, list[str]]:
    """The running testbed's hosts and their roles."""
    status = subprocess.run([".venv/bin/linkgrad", "testbed", "status", "--tag", tag, "--json"],
                            capture_output=True, text=True, check=True)
    return {h["name"]: h["roles"] for h in json.loads(status.stdout)["hosts"]}


def capture(tag: str, root: Path, hosts: list[str], duration_s: float, rate: int
            ) -> tuple[Path, dict[str, Path]]:
    experiment = root / "pcap.yaml"
    experiment.write_text(EXPERIMENT.format(tag=tag, root=root, rate=rate))
    pcaps = {h: root / f"{h}.pcap" for h in hosts}
    dumps = [subprocess.Popen(["ip", "netns", "exec", f"lgtb-{tag}-{h}", "tcpdump", "-i", "any",
                               "-s", "0", "-U", "-Z", "root", "-w", str(p), "not", "port", "22"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for h, p in pcaps.items()]
    time.sleep(1.0)
    trace = root / "trace.jsonl"
    try:
        linkgrad("pcap_paths", dict(os.environ), "paths", str(experiment), "--duration",
                 str(duration_s), "--output-trace", str(trace), "--json")
    finally:
        time.sleep(0.5)
        for d in dumps:
            d.send_signal(signal.SIGINT)
            d.wait(timeout=10)
    return trace, pcaps


def read_rate(path: Path, runs: int) -> dict[str, float]:
    """Packets per second: read_pcap (raw reader + struct), and scapy's dissection of every
    packet reading the same fields."""
    from scapy.all import IP, TCP, IPv6, PcapReader

    def ours() -> int:
        return read_pcap("h", path, ()).packets

    def dissected() -> int:
        n = 0
        with PcapReader(str(path)) as reader:
            for p in reader:
                n += 1
                ip = p.getlayer(IP) or p.getlayer(IPv6)
                tcp = p.getlayer(TCP)
                if ip is not None and tcp is not None:
                    _ = (ip.src, ip.dst, tcp.sport, tcp.dport, tcp.seq, tcp.flags, len(tcp.payload))
        return n

    out = {}
    for name, f in (("read_pcap", ours), ("scapy_dissect", dissected)):
        took = []
        for _ in range(runs):
            started = time.perf_counter()
            n = f()
            took.append(time.perf_counter() - started)
        out[name] = n / statistics.median(took)
    out["packets"] = float(read_pcap("h", path, ()).packets)
    return out


def measure(tag: str, duration_s: float, rate: int, runs: int) -> dict[str, Any]:
    root = scratch_root("pcap_paths")
    roles = testbed_hosts(tag)
    trace, pcaps = capture(tag, root, list(roles), duration_s, rate)
    sniffed = list(read_trace(trace))
    start = min(r.first_s for h in sniffed for r in h.records)
    end = max(r.last_s for h in sniffed for r in h.records)
    captured = within([read_pcap(h, p).trace for h, p in pcaps.items()], start, end)
    bare = tree_agreement(as_captured(sniffed), captured)
    full = tree_agreement(sniffed, captured)
    biggest = max(pcaps.values(), key=lambda p: p.stat().st_size)
    speed = read_rate(biggest, runs)
    return {"tag": tag, "hosts": roles, "duration_s": duration_s, "rate_per_s": rate,
            "messages": {"sniffer": bare.messages[0], "pcap": bare.messages[1]},
            "trees": {"sniffer": bare.trees[0], "pcap": bare.trees[1]},
            "same_pattern_bare": bare.same, "same_pattern_fraction_bare": bare.fraction,
            "same_pattern_threads": full.same, "same_pattern_fraction_threads": full.fraction,
            "read": {"file": biggest.name, **speed}, "runs": runs,
            "machine": f"{platform.node()} {platform.release()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def markdown(r: dict[str, Any]) -> str:
    read = r["read"]
    return "\n".join([
        f"One run, {r['date']}, {r['machine']}: the testbed ("
        + ", ".join(f"{h}: {'+'.join(roles)}" for h, roles in r.get("hosts", {}).items())
        + f") at {r['rate_per_s']} requests/s for "
        f"{r['duration_s']:g} s, tcpdump -i any in every host's namespace while `linkgrad "
        "paths` traced the same hosts (`PYTHONPATH=. .venv/bin/python -m benchmarks.pcap_paths "
        f"--tag {r['tag']}{r.get('command_tail', '')}`).",
        "",
        "| | sniffer | pcap |",
        "|---|---|---|",
        f"| messages (the sniffer's window) | {r['messages']['sniffer']} | "
        f"{r['messages']['pcap']} |",
        f"| request trees | {r['trees']['sniffer']} | {r['trees']['pcap']} |",
        "",
        f"Trees in the same pattern, of the larger count: {r['same_pattern_bare']} "
        f"({_share(r['same_pattern_bare'], max(r['trees'].values()))}) against the sniffer's "
        "trace without processes and threads (what a capture knows), "
        f"{r['same_pattern_threads']} "
        f"({_share(r['same_pattern_threads'], max(r['trees'].values()))}) against it as it is "
        "(threads guide its linking).",
        "",
        f"Reading {read['file']} ({read['packets']:.0f} packets, median of {r['runs']}): "
        f"read_pcap (scapy's raw reader, headers by struct, messages assembled) "
        f"{read['read_pcap']:,.0f} packets/s; scapy dissecting each packet (fields only, no "
        f"assembly) {read['scapy_dissect']:,.0f} packets/s, "
        f"{read['read_pcap'] / read['scapy_dissect']:.1f}x slower.",
    ])


def _share(k: int, n: int) -> str:
    """k of n as a percentage with its 95% Wilson interval."""
    from scipy import stats

    ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return f"{100 * k / n:.1f}%, 95% CI {100 * ci.low:.1f}-{100 * ci.high:.1f}%"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tag", required=True, help="a running testbed's tag")
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--rate", type=int, default=100)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--section", default="pcap-paths",
                   help="its name in RESULTS.md and benchmarks/out (one per topology)")
    args = p.parse_args()
    result = measure(args.tag, args.duration, args.rate, args.runs)
    result["command_tail"] = "" if args.section == "pcap-paths" else \
        f" --section {args.section}"
    publish(args.section, result, markdown(result))


if __name__ == "__main__":
    main()

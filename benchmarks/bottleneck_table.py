"""`linkgrad bottleneck` against planted bottlenecks on the testbed, beside Kissel et al.'s
Table II.

Each case is a disk-to-disk transfer from client to web (`linkgrad bottleneck --json`) with
one resource limited on purpose (`testbed.impairments`): the link (tbf on client's eth0), the
disk read (blkio on client's cgroup), the disk write (blkio on web's), the receiver's CPU (web
on one core with busy loops of its own there; client on the other), and two at one rate (disk
read and link). One more case limits nothing: what the testbed itself is limited by is
reported, not scored. A run is named right when the verdict names the planted resource (for
the two at one rate: says "statistically similar" with exactly those two).

    .venv/bin/python -m benchmarks.bottleneck_table [--runs 10] [--record DIR]

Writes benchmarks/out/bottleneck_table.json and its section of benchmarks/RESULTS.md;
`--record DIR` also keeps each case's first run's lines (`--output`) in DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy import stats

from benchmarks.on_testbed import linkgrad, scratch_root
from benchmarks.results_md import update_section
from testbed import impairments
from testbed.description import DescribedTestbed
from testbed.lifecycle import down, up
from testbed.topology import DEFAULT

OUT = Path(__file__).with_name("out")
RATE = 40_000_000  # bytes/s: far below the testbed's disks (~1 GB/s) and veths (GB/s)
TAG = "btb"
Impair = Callable[[DescribedTestbed, Path], AbstractContextManager[Any]]


@dataclass(frozen=True)
class Case:
    name: str
    planted: str  # what is limited, in words
    expected: tuple[str, ...] | None  # named right: this one, or these as similar; None: unscored
    impair: Impair
    size: str = "256M"
    interval: str = "0.5"


def _both(*parts: Impair) -> Impair:
    def impair(info: DescribedTestbed, root: Path) -> AbstractContextManager[Any]:
        stack = ExitStack()
        for part in parts:
            stack.enter_context(part(info, root))
        return stack
    return impair


def _link(rate: float) -> Impair:
    return lambda info, _: impairments.link_rate(info.host("client").namespace, rate)


def _disk(host: str, op: str) -> Impair:
    return lambda info, root: impairments.disk_throttle(
        info.host(host).cgroups["blkio"], impairments.disk_of(root), op, RATE)  # type: ignore[arg-type]


def _cpu(loops: int) -> Impair:
    return _both(lambda info, _: impairments.on_core(info.host("client").cgroups["cpuset"], 0),
                 lambda info, _: impairments.busy_core(info.host("web").cgroups, 1, loops))


CASES = (
    Case("none", "nothing", None, lambda *_: nullcontext(), size="1G", interval="0.25"),
    Case("network", "client's link at 40 MB/s (tbf)", ("network.receive",), _link(RATE)),
    Case("disk read", "client's disk reads at 40 MB/s (blkio)", ("disk.read",),
         _disk("client", "read")),
    Case("disk write", "web's disk writes at 40 MB/s (blkio)", ("disk.write",),
         _disk("web", "write")),
    Case("cpu", "web on one core with 4 busy loops (client on the other)", ("cpu.receiver",),
         _cpu(4), size="512M", interval="0.25"),
    Case("similar", "client's disk reads at 40 MB/s and its link at 43.2 MB/s",
         ("disk.read", "network.receive"), _both(_disk("client", "read"), _link(RATE * 1.08))),
)


def right(case: Case, answer: dict[str, Any]) -> bool | None:
    if case.expected is None:
        return None
    if len(case.expected) == 1:
        return bool(answer["bottleneck"] == case.expected[0])
    return answer["bottleneck"] is None and \
        {answer["candidate"], *answer["similar"]} == set(case.expected)


def run_case(case: Case, info: DescribedTestbed, root: Path, runs: int,
             record: Path | None) -> list[dict[str, Any]]:
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    out = []
    for i in range(runs):
        save = record / f"{case.name.replace(' ', '-')}.jsonl" if record and i == 0 else None
        with case.impair(info, root):
            answer = json.loads(linkgrad(
                "bottleneck_table", env, "bottleneck", str(root / "bottleneck.yaml"),
                "--from", f"client:{root}/sent.bin", "--to", f"web:{root}/got.bin",
                "--size", case.size, "--interval", case.interval, "--json",
                *(["--output", str(save)] if save else [])))
        out.append({"verdict": answer["verdict"], "bottleneck": answer["bottleneck"],
                    "candidate": answer["candidate"], "similar": answer["similar"],
                    "right": right(case, answer),
                    "tput_i": {r["resource"]: r["tput_i_bytes_per_s"]
                               for r in answer["resources"]},
                    "p": {t["other"]: t["p"] for t in answer["tests"]}})
        print(f"{case.name} {i + 1}/{runs}: {answer['verdict']}", flush=True)
    return out


def wilson(k: int, n: int) -> tuple[float, float]:
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return ci.low, ci.high


def runs_text(n: int) -> str:
    return "one run" if n == 1 else f"{n} runs"


# Kissel et al. Table II, and what their §IV.C expected from their Table I benchmarks (TCP:
# disk.read for D2D, disk.write for M2D; UDT: the network but for D2D): a verdict a cell (how
# many transfers each cell is, the paper does not say)
PAPER = [  # (resources, protocol, streams, [0/0, 100ms/0, 100ms/0.01%], expected)
    ("D2D", "TCP", 1, ["disk.read", "network", "n/a"], "disk.read"),
    ("D2D", "TCP", 4, ["disk.read", "network", "n/a"], "disk.read"),
    ("D2D", "UDT", 1, ["disk.read", "disk.read", "n/a"], "disk.read"),
    ("D2D", "UDT", 4, ["disk.read", "disk.read", "n/a"], "disk.read"),
    ("M2D", "TCP", 1, ["network", "network", "network"], "disk.write"),
    ("M2D", "TCP", 4, ["disk.write", "disk.write", "disk.write"], "disk.write"),
    ("M2D", "UDT", 1, ["network", "network", "network"], "network"),
    ("M2D", "UDT", 4, ["network", "network", "disk.write"], "network"),
]


def markdown(results: dict[str, list[dict[str, Any]]], runs: int, seconds: float) -> str:
    cells = [c for row in PAPER for c in row[3] if c != "n/a"]
    paper_right = sum(c == row[4] for row in PAPER for c in row[3] if c != "n/a")
    lo, hi = wilson(paper_right, len(cells))
    lines = [
        "## Bottleneck detection: Kissel et al. Table II beside ours "
        "(`benchmarks/bottleneck_table.py`)", "",
        f"{platform.node()}, {time.strftime('%Y-%m-%d')}: the default testbed, a disk-to-disk "
        f"transfer from client to web per run, {runs_text(runs)} per case "
        f"({seconds / 60:.0f} min in all). One resource is limited on purpose; a run is named "
        "right when the verdict names it (for the two at one rate: \"statistically similar\" "
        "with exactly those two). The count's 95% interval is Wilson's.", "",
        "| case | planted | named right | 95% CI | verdicts (the bottleneck named, or the "
        "resources said similar) | the lowest mean tput_i, MB/s |",
        "| --- | --- | --- | --- | --- | --- |"]
    total_k = total_n = 0
    for case in CASES:
        got = results[case.name]
        verdicts: dict[str, int] = {}
        for g in got:
            said = g["bottleneck"] or "similar: " + ", ".join(sorted([g["candidate"],
                                                                    *g["similar"]]))
            verdicts[said] = verdicts.get(said, 0) + 1
        shown = "; ".join(f"{v} ×{n}" for v, n in sorted(verdicts.items(), key=lambda kv: -kv[1]))
        means = {r: statistics.fmean(g["tput_i"][r] for g in got) / 1e6
                 for r in got[0]["tput_i"] if r != "network.send"}
        low = ", ".join(f"{r} {m:.0f}" for r, m in sorted(means.items(), key=lambda kv: kv[1])[:3])
        if case.expected is None:
            lines.append(f"| {case.name} | {case.planted} | (not scored) | | {shown} | {low} |")
            continue
        k = sum(bool(g["right"]) for g in got)
        total_k, total_n = total_k + k, total_n + len(got)
        lo_c, hi_c = wilson(k, len(got))
        lines.append(f"| {case.name} | {case.planted} | {k} of {len(got)} | "
                     f"{lo_c:.2f}–{hi_c:.2f} | {shown} | {low} |")
    lo_t, hi_t = wilson(total_k, total_n)
    lines += [
        "", f"All planted cases: **{total_k} of {total_n}** named right "
        f"(95% CI {lo_t:.2f}–{hi_t:.2f}). Reproduce (root): `.venv/bin/python -m "
        f"benchmarks.bottleneck_table --runs {runs}`.", "",
        "The two at one rate are a boundary case, and its rates were chosen by trying. Its "
        "tuning history, as run on 2026-11-29 before the setting was fixed (a record of those "
        "runs, written here as it was then, not measured again by this script): the link at "
        "44 MB/s with a 50 ms tbf queue said similar in 6 of 10 runs and named disk.read in 4 "
        "(the disk read over its rate in some runs: idle at times, as if the link ran below "
        "its rate in bursts; we took it the short queue overflowed and TCP backed off, and did "
        "not measure it); with a 200 ms queue, at 44 MB/s 13 of 15 similar (2 disk.read), at "
        "42.4 MB/s 7 of 8 (1 network.receive), at 43.2 MB/s 8 of 8; 43.2 MB/s was then fixed. "
        "\"Similar\" depends on the number of intervals: with enough of them the tests find "
        "a small real gap between the two (docs/bottleneck.md). With "
        "nothing limited the testbed's one virtual disk is what limits: its reads and writes "
        "are close, so the verdict varies.", "",
        "Kissel et al. Table II (their hosts H_B → H_A over 10G, GridFTP; a cell per "
        "configuration, how many transfers each is they do not say; columns latency / loss):",
        "",
        "| resources | protocol | streams | 0 / 0 | 100 ms / 0 | 100 ms / 0.01% | their "
        "benchmarks expected |", "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r} | {p} | {s} | {' | '.join(c)} | {e} |" for r, p, s, c, e in PAPER]
    lines += [
        "", f"{paper_right} of their {len(cells)} cells name what their Table I benchmarks "
        f"expected (95% CI {lo:.2f}–{hi:.2f}). Of the others the paper discusses two: TCP "
        "memory-to-disk, one stream, 100 ms (its Fig. 3(a): the network named, which it says "
        "\"may be due to\" the instrumentation seeing the OS's write buffering) and UDT "
        "memory-to-disk, four streams, with loss (its Fig. 4(b): UDT's user-level reads hide "
        "lost packets' time). The other four (TCP disk-to-disk at 100 ms, one and four "
        "streams; TCP memory-to-disk, one stream, at 0 ms and with loss) it does not explain. "
        "Theirs are "
        "bottlenecks the hardware had, judged against benchmark expectations; ours are planted, "
        "so the truth is known, and the resource names are ours (their `network` is our "
        "`network.receive`; they had no CPU resource).", "",
        "How ours differs from the paper's test, and why: each interval's tput_i is the bytes "
        "over the time spent moving them (the paper's mean of per-call nbytes/dur reads a blkio "
        "throttle that lets most 1 MiB calls through at once as ~1 GB/s at 40 MB/s); a disk's "
        "time excludes the thread's waits for a CPU, which are charged to a CPU resource per "
        "side; the network send is shown but not tested (it waits for the receiver's window); "
        "each side's disk and network run in two threads, as GridFTP overlaps them (one "
        "thread doing both in turn leaves an idle throttled disk fast when it runs again)."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs per case (default 10)")
    parser.add_argument("--record", type=Path, help="keep each case's first run's lines here")
    parser.add_argument("--rewrite", action="store_true",
                        help="only write the section again from benchmarks/out's JSON")
    args = parser.parse_args()
    if args.rewrite:
        saved = json.loads((OUT / "bottleneck_table.json").read_text())
        update_section("bottleneck_table", markdown(
            {name: case["runs"] for name, case in saved["cases"].items()}, saved["runs"],
            saved["seconds"]))
        return
    root = scratch_root("bottleneck_table")
    started = time.time()
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        info = up(DEFAULT, TAG, root)
        (root / "bottleneck.yaml").write_text(
            f"name: bottleneck\ntestbed: {TAG}\ntransactions: {{all: ^/}}\n")
        try:
            for case in CASES:
                results[case.name] = run_case(case, info, root, args.runs, args.record)
        finally:
            down(TAG, root=root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    seconds = time.time() - started
    OUT.mkdir(exist_ok=True)
    (OUT / "bottleneck_table.json").write_text(json.dumps(
        {"runs": args.runs, "seconds": seconds, "rate_bytes_per_s": RATE,
         "cases": {c.name: {"planted": c.planted, "expected": c.expected,
                            "runs": results[c.name]} for c in CASES}}, indent=1))
    update_section("bottleneck_table", markdown(results, args.runs, seconds))
    print(f"done in {seconds / 60:.1f} min")


if __name__ == "__main__":
    main()

"""Peak memory of `linkgrad gradient` against the log's size, with and without very long URLs.

Issue 13: one 8 KB URL in a 58k-line log took `linkgrad gradient` from 156 MB to 5.5 GB
(`np.unique` over fixed-width strings as wide as the longest URL, for every row), and a few
long URLs made it fail outright. Memory must be bounded by the log's size, not by its longest
URL. This writes one synthetic nginx log (the example's workload and format, scaled by
`--rate`) in several variants and runs `linkgrad gradient` on each in a subprocess, reading its
peak resident set (ru_maxrss of the child):

- plain: the log as generated;
- one_8kb_url: one request's query string 8 KB long (the issue's case);
- few_64kb_urls: five requests with distinct 64 KB query strings;
- long_url_every_10th: every tenth request with its own 2 KB query string (the log grows by
  a fifth of its lines times 2 KB: here memory may grow, but with the log's size).

The bound is stated as peak RSS above the interpreter's own (`linkgrad --help`) per MB of log.
Prints a table, writes `benchmarks/out/weblog_memory.json` and its section of RESULTS.md.

    .venv/bin/python -m benchmarks.weblog_memory [--rate 28]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.results_md import update_section
from linkgrad.square_wave import SquareWave
from testbed.synthetic import NoiseSpec, generate, standard_workload
from testbed.synthetic_log import EXAMPLE_LOG_FORMAT, injection_record, nginx_lines

OUT = Path(__file__).parent / "out" / "weblog_memory.json"
START_S = 1_795_000_000.0
# Runs a command and prints its peak RSS (kB): RUSAGE_CHILDREN of a fresh process holds only it.
MEASURE = ("import resource, subprocess, sys\n"
           "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
           "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def _lines(rate_per_s: float, seed: int = 2026) -> tuple[list[str], SquareWave]:
    """The example's workload (9 training chunks before 6 cycles of 40 s) at `rate_per_s`
    requests per second per transaction."""
    wave = SquareWave(START_S, period_s=40.0, cycles=6, magnitude_s=0.03)
    training_s = 9 * wave.cycles * wave.period_s
    requests = generate(standard_workload(NoiseSpec.production(), rate_per_s=rate_per_s),
                        START_S - training_s, training_s + wave.duration_s + 30.0, wave, seed)
    return nginx_lines(requests), wave


def _with_query(line: str, query: str) -> str:
    """The line with `?query` appended to its URL (the path, and so its transaction, stays)."""
    head, sep, rest = line.partition(" HTTP/1.1\"")
    return f"{head}?q={query}{sep}{rest}"


def variants(lines: list[str]) -> dict[str, list[str]]:
    rng = random.Random(13)
    one = list(lines)
    one[len(one) // 2] = _with_query(one[len(one) // 2], "x" * 8192)
    few = list(lines)
    for k, i in enumerate(rng.sample(range(len(few)), 5)):
        few[i] = _with_query(few[i], str(k) * 65536)
    every = [_with_query(line, f"{i:08d}" * 256) if i % 10 == 0 else line
             for i, line in enumerate(lines)]
    return {"plain": lines, "one_8kb_url": one, "few_64kb_urls": few,
            "long_url_every_10th": every}


def peak_rss_mb(argv: list[str]) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of `argv`, run to completion in a fresh process."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True, text=True,
                         check=True, timeout=1800).stdout.split()
    if out[0] != "0":
        raise SystemExit(f"{' '.join(argv)} exited {out[0]}")
    return int(out[1]) / 1024, time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=28.0,
                        help="requests per second per transaction (default 28: ~400k lines)")
    rate = parser.parse_args().rate
    linkgrad = str(Path(sys.executable).with_name("linkgrad"))
    lines, wave = _lines(rate)
    base_mb, _ = peak_rss_mb([linkgrad, "--help"])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        record = Path(tmp) / "injection.json"
        record.write_text(injection_record(wave))
        for name, variant in variants(lines).items():
            log = Path(tmp) / f"{name}.log"
            log.write_text("\n".join(variant) + "\n")
            log_mb = log.stat().st_size / 2**20
            peak_mb, seconds = peak_rss_mb([linkgrad, "gradient", "--log", str(log),
                                            "--log-format", EXAMPLE_LOG_FORMAT,
                                            "--injection", str(record), "--json"])
            results[name] = {"lines": len(variant), "log_mb": round(log_mb, 1),
                             "peak_rss_mb": round(peak_mb, 1), "seconds": round(seconds, 1),
                             "mb_per_log_mb": round((peak_mb - base_mb) / log_mb, 2)}
            print(f"{name:20s} {len(variant):>8d} lines {log_mb:7.1f} MB log  "
                  f"peak {peak_mb:7.1f} MB  ({(peak_mb - base_mb) / log_mb:.2f} MB per MB of "
                  f"log above the interpreter's {base_mb:.0f} MB)  {seconds:5.1f} s")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "rate_per_s": rate, "interpreter_mb": round(base_mb, 1)}
    OUT.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    print(f"wrote {OUT}")
    update_section("weblog_memory", _markdown(results, meta))


def _markdown(results: dict[str, dict[str, float]], meta: dict[str, object]) -> str:
    plain = results["plain"]
    worst = max(r["mb_per_log_mb"] for r in results.values())
    lines = [
        "## Memory of `linkgrad gradient` (`benchmarks/weblog_memory.py`)",
        "",
        f"Peak RSS of `linkgrad gradient --json` on a synthetic nginx log (the example's "
        f"workload at {meta['rate_per_s']:g} requests/s per transaction), with long URLs "
        f"added; Python {meta['python']} on {meta['machine']}; the interpreter alone "
        f"(`linkgrad --help`) peaks at {meta['interpreter_mb']} MB. Issue 13 measured one 8 KB "
        "URL in a 58k-line log taking 156 MB to 5.5 GB (the papers give no figure).",
        "",
        "| log | lines | log MB | peak RSS MB | MB per MB of log, above the interpreter | s |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {name} | {r['lines']:,} | {r['log_mb']} | {r['peak_rss_mb']} | "
              f"{r['mb_per_log_mb']} | {r['seconds']} |" for name, r in results.items()]
    lines += [
        "",
        f"Bound: peak RSS ≤ interpreter + {worst:.1f} × the log's size in every variant; long "
        f"URLs add what their bytes add (one 8 KB URL: "
        f"{results['one_8kb_url']['peak_rss_mb'] - plain['peak_rss_mb']:+.1f} MB, five 64 KB "
        f"ones: {results['few_64kb_urls']['peak_rss_mb'] - plain['peak_rss_mb']:+.1f} MB).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""Open-loop load: Poisson arrivals at a given rate over a transaction mix.

Arrival times are drawn up front and each request is issued at its time whether or not earlier
ones have answered, so slow responses cannot hold back the offered load (no coordinated
omission). It records its own latencies as CSV (`start_unix_s,response_ms,url,status`, which
`linkgrad gradient --format csv` reads) and how late it issued each request, its own overhead.

    python -m testbed.loadgen --url http://WEB --mix /pattern/single=1,/rubis/ViewItem?id=1=2
                              --rate 20 --duration 60 [--seed 1] [--out latencies.csv] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass(frozen=True)
class Sample:
    start_unix_s: float
    response_ms: float
    url: str
    status: int
    issue_lag_ms: float  # how late the request left against its scheduled arrival


def arrival_times(rate_per_s: float, duration_s: float, rng: random.Random) -> list[float]:
    """Poisson arrivals in [0, duration): exponential gaps of mean 1/rate."""
    times, t = [], rng.expovariate(rate_per_s)
    while t < duration_s:
        times.append(t)
        t += rng.expovariate(rate_per_s)
    return times


def parse_mix(text: str) -> list[tuple[str, float]]:
    """`PATH=WEIGHT,PATH=WEIGHT` (the last `=` splits, so query strings may hold `=`)."""
    mix = []
    for item in text.split(","):
        path, _, weight = item.rpartition("=")
        if not path.startswith("/"):
            raise ValueError(f"mix item {item!r}: expected /PATH=WEIGHT")
        mix.append((path, float(weight)))
    return mix


async def run_load(base_url: str, mix: list[tuple[str, float]], rate_per_s: float,
                   duration_s: float, seed: int = 1, timeout_s: float = 30.0) -> list[Sample]:
    rng = random.Random(seed)
    plan = arrival_times(rate_per_s, duration_s, rng)
    paths = rng.choices([p for p, _ in mix], weights=[w for _, w in mix], k=len(plan))
    samples: list[Sample] = []
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=2000)
    async with httpx.AsyncClient(base_url=base_url, limits=limits,
                                 timeout=timeout_s) as client:

        async def one(path: str, lag_ms: float) -> None:
            start = time.time()
            t0 = time.perf_counter()
            try:
                status = (await client.get(path)).status_code
            except httpx.HTTPError:
                status = 0
            samples.append(Sample(start, (time.perf_counter() - t0) * 1e3, path, status, lag_ms))

        tasks = []
        origin = time.perf_counter()
        for at, path in zip(plan, paths, strict=True):
            delay = origin + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            lag_ms = (time.perf_counter() - origin - at) * 1e3
            tasks.append(asyncio.create_task(one(path, lag_ms)))
        await asyncio.gather(*tasks)
    return sorted(samples, key=lambda s: s.start_unix_s)


def write_csv(samples: list[Sample], path: Path) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["start_unix_s", "response_ms", "url", "status"])
        out.writerows([f"{s.start_unix_s:.6f}", f"{s.response_ms:.3f}", s.url, s.status]
                      for s in samples)


def summary(samples: list[Sample], rate_per_s: float, duration_s: float) -> dict[str, object]:
    ok = [s for s in samples if 200 <= s.status < 400]
    lags = [s.issue_lag_ms for s in samples]
    by_url: dict[str, list[float]] = {}
    for s in ok:
        by_url.setdefault(s.url, []).append(s.response_ms)
    return {
        "offered_per_s": rate_per_s, "duration_s": duration_s, "requests": len(samples),
        "achieved_per_s": len(samples) / duration_s, "errors": len(samples) - len(ok),
        "issue_lag_ms": {"median": statistics.median(lags) if lags else None,
                         "p99": statistics.quantiles(lags, n=100)[98] if len(lags) > 100 else None,
                         "max": max(lags, default=None)},
        "response_ms": {url: {"count": len(v), "mean": statistics.fmean(v),
                              "median": statistics.median(v)} for url, v in sorted(by_url.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--mix", required=True, help="/PATH=WEIGHT,... (relative weights)")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--duration", type=float, required=True, help="seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=30.0,
                        help="a request not answered by then is given up (status 0 here, 499 "
                             "in nginx's log), as an impatient user would (default 30)")
    parser.add_argument("--out", type=Path, help="CSV of every request's latency")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        mix = parse_mix(args.mix)
    except ValueError as e:
        print(f"loadgen: --mix: {e}", file=sys.stderr)
        return 2
    samples = asyncio.run(run_load(args.url, mix, args.rate, args.duration, args.seed,
                                        args.timeout_s))
    if args.out:
        write_csv(samples, args.out)
    result = summary(samples, args.rate, args.duration)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

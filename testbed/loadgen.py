"""Load over a transaction mix, open-loop (Poisson arrivals) or closed-loop (N clients).

Open loop (`--rate`): arrival times are drawn up front and each request is issued at its time
whether or not earlier ones have answered, so slow responses cannot hold back the offered load
(no coordinated omission); the throughput cannot fall unless requests fail.

Closed loop (`--clients N`): N clients, each sending its next request only after the previous
one answered and it then thought for an exponential time of mean `--think-s` (default 0.5 s;
0: no thinking, each client as fast as the server answers, which saturates it). Each client
starts by thinking, so they do not all arrive at once. A slower response delays everything the
client does afterwards, as with real users and the thesis's RUBiS clients: throughput is
N / (mean response + mean think), and falls when responses slow.

Either way it records its own latencies as CSV (`start_unix_s,response_ms,url,status`, which
`linkgrad gradient --format csv` reads) and how late it issued each request against its
scheduled time (its arrival, or the end of the client's think time), its own overhead.

    python -m testbed.loadgen --url http://WEB --mix /pattern/single=1,/rubis/ViewItem?id=1=2
                              (--rate 20 | --clients 20 [--think-s 0.5]) --duration 60
                              [--seed 1] [--out latencies.csv] [--json]
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, TypeAdapter

try:
    import httpx
except ImportError as e:  # a plain install on the client host: what to install, no traceback
    raise SystemExit(f"testbed.loadgen: {e.name} is missing: this host's linkgrad install is "
                     "incomplete (pip install linkgrad)") from e

DEFAULT_THINK_S = 0.5


@dataclass(frozen=True)
class Sample:
    start_unix_s: float
    response_ms: float
    url: str
    status: int
    issue_lag_ms: float  # how late the request left against its scheduled time


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


def client_rng(seed: int, client: int) -> random.Random:
    """Client `client`'s own stream: a run is reproducible whatever order clients run in."""
    return random.Random(seed * 1_000_003 + client)


def client_steps(rng: random.Random, mix: list[tuple[str, float]],
                 think_s: float) -> Iterator[tuple[float, str]]:
    """A closed-loop client's script, endless: (think time before the request, its path).
    Think times are exponential of mean `think_s` (0: none); paths drawn by the mix's weights."""
    if think_s < 0:
        raise ValueError(f"{think_s=} must be >= 0")
    paths, weights = [p for p, _ in mix], [w for _, w in mix]
    while True:
        think = rng.expovariate(1.0 / think_s) if think_s > 0 else 0.0
        yield think, rng.choices(paths, weights=weights)[0]


def _client(base_url: str, connections: int, timeout_s: float) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout_s)


async def _get(client: httpx.AsyncClient, path: str, lag_ms: float) -> Sample:
    start = time.time()
    t0 = time.perf_counter()
    try:
        status = (await client.get(path)).status_code
    except httpx.HTTPError:
        status = 0
    return Sample(start, (time.perf_counter() - t0) * 1e3, path, status, lag_ms)


async def run_load(base_url: str, mix: list[tuple[str, float]], rate_per_s: float,
                   duration_s: float, seed: int = 1, timeout_s: float = 30.0) -> list[Sample]:
    """Open loop: Poisson arrivals at `rate_per_s` for `duration_s`."""
    rng = random.Random(seed)
    plan = arrival_times(rate_per_s, duration_s, rng)
    paths = rng.choices([p for p, _ in mix], weights=[w for _, w in mix], k=len(plan))
    samples: list[Sample] = []
    async with _client(base_url, 2000, timeout_s) as client:

        async def one(path: str, lag_ms: float) -> None:
            samples.append(await _get(client, path, lag_ms))

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


async def run_closed_load(base_url: str, mix: list[tuple[str, float]], clients: int,
                          think_s: float, duration_s: float, seed: int = 1,
                          timeout_s: float = 30.0) -> list[Sample]:
    """Closed loop: `clients` clients, each think-then-request, for `duration_s` (no request
    is sent after it; those under way are waited for, up to `timeout_s`)."""
    if clients < 1:
        raise ValueError(f"{clients=} must be at least 1")
    samples: list[Sample] = []
    async with _client(base_url, clients, timeout_s) as client:
        origin = time.perf_counter()
        end = origin + duration_s

        async def user(steps: Iterator[tuple[float, str]]) -> None:
            ready = origin  # when the previous response came (the start, for the first)
            for think, path in steps:
                due = ready + think
                if due >= end:
                    return
                if (wait := due - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)
                samples.append(await _get(client, path, (time.perf_counter() - due) * 1e3))
                ready = time.perf_counter()

        await asyncio.gather(*(user(client_steps(client_rng(seed, i), mix, think_s))
                               for i in range(clients)))
    return sorted(samples, key=lambda s: s.start_unix_s)


def write_csv(samples: list[Sample], path: Path) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["start_unix_s", "response_ms", "url", "status"])
        out.writerows([f"{s.start_unix_s:.6f}", f"{s.response_ms:.3f}", s.url, s.status]
                      for s in samples)


class _Summary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IssueLag(_Summary):
    """How late requests were sent against their schedule (ms)."""

    median: float | None
    p99: float | None
    max: float | None


class UrlResponses(_Summary):
    count: int
    mean: float
    median: float


class _Achieved(_Summary):
    duration_s: float
    requests: int
    achieved_per_s: float
    errors: int
    issue_lag_ms: IssueLag
    response_ms: dict[str, UrlResponses]  # of the answered requests, by URL


class _Offered(_Summary):
    offered_per_s: float


class _Clients(_Summary):
    clients: int
    think_s: float | None
    mean_response_ms: float | None
    littles_law_per_s: float | None  # clients / (mean response + mean think)


# pydantic takes the bases' fields last base first: what was offered leads, as it always did
class OpenLoopSummary(_Achieved, _Offered):
    """An open loop's run: requests at a rate, whatever their answers."""


class ClosedLoopSummary(_Achieved, _Clients):
    """A closed loop's run, and the throughput Little's law expects of it."""


# what `--json` prints, read back (by the coordinator's `testbed load`)
LOAD_SUMMARY: TypeAdapter[OpenLoopSummary | ClosedLoopSummary] = TypeAdapter(
    OpenLoopSummary | ClosedLoopSummary)


def summary(samples: list[Sample], rate_per_s: float | None, duration_s: float,
            clients: int | None = None, think_s: float | None = None
            ) -> OpenLoopSummary | ClosedLoopSummary:
    """What a run did: open loop with `rate_per_s`, closed loop with `clients`."""
    ok = [s for s in samples if 200 <= s.status < 400]
    lags = [s.issue_lag_ms for s in samples]
    by_url: dict[str, list[float]] = {}
    for s in ok:
        by_url.setdefault(s.url, []).append(s.response_ms)
    achieved = _Achieved(
        duration_s=duration_s, requests=len(samples), achieved_per_s=len(samples) / duration_s,
        errors=len(samples) - len(ok),
        issue_lag_ms=IssueLag(median=statistics.median(lags) if lags else None,
                              p99=statistics.quantiles(lags, n=100)[98] if len(lags) > 100
                              else None,
                              max=max(lags, default=None)),
        response_ms={url: UrlResponses(count=len(v), mean=statistics.fmean(v),
                                       median=statistics.median(v))
                     for url, v in sorted(by_url.items())})
    if clients is None:
        if rate_per_s is None:
            raise ValueError("an open loop has a rate")
        return OpenLoopSummary(offered_per_s=rate_per_s, **dict(achieved))
    mean_ms = statistics.fmean(s.response_ms for s in samples) if samples else None
    return ClosedLoopSummary(
        clients=clients, think_s=think_s, mean_response_ms=mean_ms,
        littles_law_per_s=None if mean_ms is None or think_s is None
        or mean_ms / 1e3 + think_s == 0 else clients / (mean_ms / 1e3 + think_s),
        **dict(achieved))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--mix", required=True, help="/PATH=WEIGHT,... (relative weights)")
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=float, help="open loop: requests per second (Poisson)")
    load.add_argument("--clients", type=int, help="closed loop: concurrent clients, each "
                      "waiting for its response and then thinking before the next request")
    parser.add_argument("--think-s", type=float, help="closed loop: mean think time in "
                        f"seconds, exponential (default {DEFAULT_THINK_S}; 0: none)")
    parser.add_argument("--duration", type=float, required=True, help="seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=30.0,
                        help="a request not answered by then is given up (status 0 here, 499 "
                             "in nginx's log), as an impatient user would (default 30)")
    parser.add_argument("--out", type=Path, help="CSV of every request's latency")
    parser.add_argument("--json", action="store_true")
    return parser


def check_args(args: argparse.Namespace) -> list[str]:
    """Every problem with the load's numbers (the parser has checked the rest)."""
    problems = []
    if args.rate is not None and not args.rate > 0:
        problems.append(f"--rate {args.rate:g}: must be > 0")
    if args.clients is not None and args.clients < 1:
        problems.append(f"--clients {args.clients}: must be at least 1")
    if args.think_s is not None and args.clients is None:
        problems.append("--think-s goes with --clients (the closed loop)")
    if args.think_s is not None and not args.think_s >= 0:
        problems.append(f"--think-s {args.think_s:g}: must be >= 0")
    if not args.duration > 0:
        problems.append(f"--duration {args.duration:g}: must be > 0")
    try:
        parse_mix(args.mix)
    except ValueError as e:
        problems.append(f"--mix: {e}")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if problems := check_args(args):
        for problem in problems:
            print(f"loadgen: {problem}", file=sys.stderr)
        return 2
    mix = parse_mix(args.mix)
    if args.clients is None:
        samples = asyncio.run(run_load(args.url, mix, args.rate, args.duration, args.seed,
                                       args.timeout_s))
        result = summary(samples, args.rate, args.duration)
    else:
        think_s = DEFAULT_THINK_S if args.think_s is None else args.think_s
        samples = asyncio.run(run_closed_load(args.url, mix, args.clients, think_s,
                                              args.duration, args.seed, args.timeout_s))
        result = summary(samples, None, args.duration, args.clients, think_s)
    if args.out:
        write_csv(samples, args.out)
    print(json.dumps(result.model_dump(), indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

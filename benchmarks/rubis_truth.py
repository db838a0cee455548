"""The RUBiS-like testbed: the truth on both directions of app1<->db measured as slopes, beside
the crossing counts the application is built with (`testbed/transactions.py`).

Under `benchmarks/coverage.py`'s workload (40 req/s open loop, ViewItem, single, sequential
and async in equal shares), a constant delay on one direction (the injector daemon on the
receiving host, as `linkgrad run` injects by default) is switched off and on in turn, at each
delay asked for; each transaction's mean response time on minus off over the delay the injector
applied is its slope (`benchmarks/slopes.py`). At large delays the slope is the crossing count;
at the ~1 ms a default run chooses it need not be (a delay partly hidden behind other work),
which is the gradient a run there measures.

    .venv/bin/python -m benchmarks.rubis_truth [--delays 1,4] [--window-s 120] [--rate 40]
                                               [--work none|cpu|disk|both]

Brings up its own testbed (tag rbt, a scratch root) and takes it down. Writes
benchmarks/out/rubis_truth.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from benchmarks.background_load import KINDS, steady_load
from benchmarks.coverage import RUBIS_TRANSACTIONS
from benchmarks.on_testbed import scratch_root
from benchmarks.results_md import update_section
from benchmarks.slopes import loaded_slopes
from testbed.description import DescribedTestbed
from testbed.lifecycle import down, up
from testbed.topology import DEFAULT
from testbed.transactions import transactions_of

OUT = Path(__file__).with_name("out")
PORT = 5432  # PostgreSQL on the db host (testbed/postgres.py)
LINKS = ("app1->db", "db->app1")


def measure(info: DescribedTestbed, delays_ms: list[float], window_s: float,
            rate: float, work: str = "none", scratch: Path | None = None
            ) -> list[dict[str, Any]]:
    """The slopes of RUBIS_TRANSACTIONS on each link at each delay (each delay's two links
    in turn, smallest delay first), while `work` (a kind of `benchmarks/background_load.py`'s
    work, held steady) runs."""
    wanted = [t for t in info.transactions if t.name in RUBIS_TRANSACTIONS]
    cycles = max(4, round(window_s / 10.0))
    out = []
    for delay in sorted(delays_ms):
        for link in LINKS:
            with steady_load(work, scratch or info.directory):
                out.append(loaded_slopes(info, link, delay, window_s, rate, cycles,
                                         port=PORT, transactions=wanted))
    return out


def markdown(result: dict[str, Any]) -> str:
    crossings = {(t.name, link): g for t in transactions_of(DEFAULT)
                 for link, g in t.expected.items()}
    delays = sorted({s["requested_ms"] for s in result["slopes"]})
    work = result.get("work", "none")
    by = {(s["link"], s["requested_ms"]): s for s in result["slopes"]}
    lines = [
        "## RUBiS-like testbed: the truth as slopes"
        + ("" if work == "none" else f", {work} work held steady")
        + " (`benchmarks/rubis_truth.py`)", "",
        f"`--delays {','.join(f'{d:g}' for d in delays)} --window-s {result['window_s']:g} "
        f"--rate {result['rate']:g}" + ("" if work == "none" else f" --work {work}")
        + f"`: {result['rate']:g} req/s open loop of "
        f"{', '.join(RUBIS_TRANSACTIONS)} in equal shares, a constant delay at the receiver "
        f"off and on in turn ({result['window_s']:g} s per side in {result['cycles']} cycles); "
        "the slope of each mean response time over the delay the injector applied (ms, shown "
        "per column), ± its standard error (the larger of Welch's and the between-cycles one), "
        "beside the crossing count the application is built with."
        + ("" if work == "none" else f" Throughout, `benchmarks/background_load.py`'s {work} "
           "work ran (as in its episodes, but without pause)."), "",
        "| transaction | link | crossings | " + " | ".join(
            f"slope at {by[(LINKS[0], d)]['applied_ms']:.2f} / "
            f"{by[(LINKS[1], d)]['applied_ms']:.2f} ms" for d in delays) + " |",
        "| --- | --- | --- |" + " --- |" * len(delays)]
    for name in RUBIS_TRANSACTIONS:
        for link in LINKS:
            row = [f"{p['slope']:.3g} ± {p['se']:.2g}" for d in delays
                   for p in [by[(link, d)]["pages"][name]]]
            lines.append(f"| {name} | {link} | {crossings[(name, link)]:g} | "
                         + " | ".join(row) + " |")
    return "\n".join(lines)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delays", default="1", help="ms, comma-separated")
    parser.add_argument("--window-s", type=float, default=120.0, help="per side")
    parser.add_argument("--rate", type=float, default=40.0)
    parser.add_argument("--work", choices=("none", *KINDS), default="none",
                        help="a kind of other work held steady throughout (is the gradient "
                             "the same under contention?); writes rubis_truth-WORK.json")
    args = parser.parse_args(argv)
    try:
        delays = [float(x) for x in args.delays.split(",")]
    except ValueError:
        parser.error(f"--delays: expected ms, comma-separated, not {args.delays!r}")
    signal.signal(signal.SIGTERM, _interrupt)  # the testbed comes down either way
    root = scratch_root("rubis_truth")
    try:
        info = up(DEFAULT, "rbt", root)
        try:
            slopes = measure(info, delays, args.window_s, args.rate, args.work, root)
        finally:
            down("rbt", root=root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"machine": f"{socket.gethostname()}, 2 cores", "window_s": args.window_s,
              "rate": args.rate, "cycles": max(4, round(args.window_s / 10.0)),
              "work": args.work, "slopes": slopes}
    name = "rubis_truth" + ("" if args.work == "none" else f"-{args.work}")
    OUT.mkdir(exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2))
    text = markdown(result)
    update_section(name, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

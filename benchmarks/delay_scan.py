"""Small delays against large ones: does a link gradient depend on the delay that measured it?

One `linkgrad run` on the testbed (the RUBiS-like application or MediaWiki) with
`magnitudes_ms` set, so both directions of the app's pair (app1<->db, web<->db) are measured at
every delay, the same number of cycles each; the run's own `linearity` (gradients.json) gives
each transaction's gradient per delay, the weighted line through them and the change from the
smallest delay to the largest with its 95% interval. Beside it, the truth of
`benchmarks/coverage.py` (crossing counts; MediaWiki's slopes under a 2 ms constant delay).

    .venv/bin/python -m benchmarks.delay_scan --app rubis [--delays 0.5,1,2,4,8] [--cycles 12]

Writes benchmarks/out/delay-scan-APP.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

from benchmarks.coverage import PAIRS, _interrupt, experiment_yaml, one_run, topology, truth
from benchmarks.on_testbed import scratch_root
from benchmarks.results_md import update_section
from testbed.lifecycle import down, up

OUT = Path(__file__).with_name("out")
TAG = "dsc"
DEFAULT_DELAYS = {"rubis": "0.5,1,2,4,8", "mediawiki": "0.5,1,2,4"}


def to_markdown(app: str, args: argparse.Namespace, result: dict[str, Any], seconds: float,
                status: str, expected: dict[tuple[str, str], tuple[float, float]]) -> str:
    delays = [link["record"]["magnitude_ms"] for link in result["links"]] or [float("nan")]
    lines = [f"## Small delays against large ones, {app} (`benchmarks/delay_scan.py`)", "",
             f"`--app {app} --delays {args.delays} --cycles {args.cycles} --rate {args.rate}`: "
             f"one `linkgrad run` ({status}, {seconds:.0f} s) measuring both directions of "
             f"{'↔'.join(PAIRS[app])} at each delay ({args.cycles} cycles each, the two "
             f"directions at once); delays applied {min(delays):.2f}-{max(delays):.2f} ms. "
             "Each row is the run's own `linearity`: the gradient at each delay, then the "
             "change of a weighted straight line from the smallest delay to the largest, with "
             "its 95% interval.", "",
             "| transaction | link | truth | gradient at each delay (ms: value ± 95%) "
             "| change smallest→largest | linear? |", "|---|---|---|---|---|---|"]
    pair = {link["link"]["label"]: f"{link['link']['src_host']}->{link['link']['dst_host']}"
            for link in result["links"]}
    for x in result.get("linearity", []):
        value, se = expected.get((x["transaction"], pair.get(x["link"], x["link"])), (None, 0.0))
        truth_text = "-" if value is None else f"{value:.3g}" + (f" ± {se:.2g}" if se else "")
        points = "; ".join(f"{p['delay_ms']:.2g}: {p['gradient']:.3g} ± {p['half_width']:.2g}"
                           for p in x["points"])
        lo, hi = x["difference_ci95"]
        rel = x["relative_difference"]
        lines.append(f"| {x['transaction']} | {x['link']} | {truth_text} | {points} "
                     f"| {x['difference']:+.3g} [{lo:+.3g}, {hi:+.3g}]"
                     + (f" ({rel:+.0%})" if rel is not None else "")
                     + f" | {'yes' if x['linear'] else '**no**'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", choices=sorted(PAIRS), default="rubis")
    parser.add_argument("--delays", default=None, help="ms, comma-separated")
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--rate", type=float, default=None,
                        help="requests/s (default: 40 for rubis, 12 for mediawiki)")
    args = parser.parse_args()
    args.rate = args.rate or (40.0 if args.app == "rubis" else 12.0)
    args.delays = args.delays or DEFAULT_DELAYS[args.app]
    delays = [float(d) for d in args.delays.split(",")]
    signal.signal(signal.SIGTERM, _interrupt)
    expected = truth(args.app, False)
    root = scratch_root("delay_scan")
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    try:
        up(topology(args.app), TAG, root)
        experiment = experiment_yaml(
            args.app, root, args.rate, 2,
            (f"magnitudes_ms: {json.dumps(delays)}", f"cycles: {args.cycles}"), tag=TAG)
        result, seconds, status = one_run(experiment, env)
    finally:
        down(TAG, root=root)
        shutil.rmtree(root, ignore_errors=True)
    OUT.mkdir(exist_ok=True)
    name = f"delay-scan-{args.app}"
    (OUT / f"{name}.json").write_text(json.dumps(
        {"args": vars(args), "seconds": seconds, "status": status, "result": result}, indent=1))
    markdown = to_markdown(args.app, args, result, seconds, status, expected)
    update_section(name, markdown)
    print(markdown)


if __name__ == "__main__":
    main()

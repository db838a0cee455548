"""Thesis §5.5 / Fig. 5.5 on the testbed, for real: per-transaction routing between two copies
of the app tier against fixed load-balancing ratios, predicted from link gradients and measured.

The deployment: web server at the edge, the database moved to the core (10 ms one way), an app
server copy at each. On the testbed app1 plays the edge copy and app2 the core copy: the
injector adds 10 ms to app1<->db and to web<->app2 (the only moved pairs this workload's
transactions use), and nginx routes by the policy under test (`linkgrad testbed routes`):
all to app1, all to app2, half each (by request id), and `linkgrad route --nginx`'s
per-transaction map.

Predictions are remade, as `predict --validate` does, from windows measured at each copy with
the injector at 0 ms (app2 never had its gradients measured: a copy has the original's
gradients, moved) and the delays the injector actually applied.

    .venv/bin/python -m benchmarks.routing_accuracy [--rate 40] [--window-s 40]

Writes benchmarks/out/routing_accuracy.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks.on_testbed import linkgrad, scratch_root
from benchmarks.prediction_accuracy import SPLIT_SITES, experiment
from benchmarks.results_md import update_section
from coordinator.config.experiment import Experiment
from coordinator.config.run_inputs import load_run
from coordinator.config.run_records import Pair
from coordinator.live.clock import SYSTEM, sleep_checking
from coordinator.live.session import Session
from coordinator.live.validate import add_links, applied_changes, measure_window
from linkgrad.prediction import Z95, Curve, Estimate, predict
from linkgrad.protocol.injector import CONSTANT, ConstantSchedule, Remove, SetSchedule
from linkgrad.routing import nginx_fixed_ratio
from testbed import nginx
from testbed.description import DescribedTestbed
from testbed.lifecycle import down, up
from testbed.topology import DEFAULT

OUT = Path(__file__).with_name("out")
COPIES = ("app1", "app2")  # the edge copy, the core copy
DELAY_MS = 10.0
MOVED: tuple[Pair, ...] = (("app1", "db"), ("db", "app1"), ("web", "app2"), ("app2", "web"))
POLICIES = ("all to app1 (edge)", "all to app2 (core)", "half each", "per transaction")
SETTLE_S = 5.0  # after a reload: old workers finish their requests


def _linkgrad(env: dict[str, str], *argv: str) -> str:
    return linkgrad("routing_accuracy", env, *argv)


def moved_to(gradients: dict[str, dict[Pair, Curve]], old: str, new: str
             ) -> dict[str, dict[Pair, Curve]]:
    """A copy's gradients: the original's, on the copy's links."""
    def rename(h: str) -> str:
        return new if h == old else h
    return {n: {(rename(a), rename(b)): c for (a, b), c in per.items()}
            for n, per in gradients.items()}


def mix_mean(share: dict[str, float], means: dict[str, Estimate]) -> Estimate:
    return Estimate(sum(s * means[n].mean for n, s in share.items()),
                    math.sqrt(sum((s * means[n].se) ** 2 for n, s in share.items())))


def measure(root: Path, info: DescribedTestbed, rate: float, window_s: float) -> dict[str, Any]:
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    run_dir = Path(json.loads(_linkgrad(env, "run", str(experiment(root, rate)),
                                        "--json"))["run_dir"])
    (root / "split.yaml").write_text(SPLIT_SITES)
    (root / "db-core.yaml").write_text("move: {db: core}\n")
    route = ["route", "--gradients", str(run_dir / "gradients.json"), "--latencies",
             str(root / "split.yaml"), "--placement", str(root / "db-core.yaml"),
             "--component", "app1", "--copies", "edge", "core"]
    advice = json.loads(_linkgrad(env, *route, "--json"))
    per_transaction = _linkgrad(env, *route, "--nginx", *COPIES)
    run = load_run(run_dir / "gradients.json")
    total = sum(run.requests.values())
    share = {n: c / total for n, c in run.requests.items()}
    policies = {POLICIES[0]: nginx_fixed_ratio(1.0, COPIES),
                POLICIES[1]: nginx_fixed_ratio(0.0, COPIES),
                POLICIES[2]: nginx_fixed_ratio(0.5, COPIES), POLICIES[3]: per_transaction}
    web = info.with_role("web")[0].namespace
    directory = info.directory

    def routes(text: str) -> None:
        nginx.install_routes(directory, web, text, "benchmark")
        sleep_checking(SYSTEM, SETTLE_S)

    session = Session(Experiment.model_validate(
        json.loads((run_dir / "experiment.json").read_text())))
    measured: dict[str, dict[str, Estimate]] = {}
    try:
        session.open(sniffers=False)
        sleep_checking(SYSTEM, 10.0)
        planned = {p: Estimate(DELAY_MS) for p in MOVED}
        links = add_links(session, run, planned, 6 * (window_s + 15) + 60)
        stats = []
        try:
            before = {}
            for copy, policy in zip(COPIES, POLICIES[:2], strict=True):
                routes(policies[policy])
                before[copy], base = measure_window(session, window_s)
            for _, injector, link_id in links:
                injector.call(SetSchedule(link_id=link_id, schedule=ConstantSchedule(
                    magnitude_ms=DELAY_MS, duration_s=4 * (window_s + 15) + 60)))
            for policy, text in policies.items():
                routes(text)
                measured[policy], _ = measure_window(session, window_s, base)
        finally:
            for pair, injector, link_id in links:
                stats.append((pair, injector.call(Remove(link_id=link_id)).stats))
    finally:
        routes(nginx.DEFAULT_ROUTES)
        problems = session.close()
    if problems:
        sys.exit("routing_accuracy: cleanup: " + "; ".join(problems))
    applied = applied_changes(stats, schedule_id=1, phase=CONSTANT)
    at = {"app1": predict(before["app1"], run.gradients, applied),
          "app2": predict(before["app2"], moved_to(run.gradients, "app1", "app2"), applied)}
    to = {n: COPIES[0] if t["to"] == "edge" else COPIES[1]
          for n, t in advice["transactions"].items()}
    predicted_policy = {
        POLICIES[0]: {n: at["app1"][n].predicted_ms for n in share},
        POLICIES[1]: {n: at["app2"][n].predicted_ms for n in share},
        POLICIES[2]: {n: (at["app1"][n].predicted_ms + at["app2"][n].predicted_ms) / 2
                      for n in share},
        POLICIES[3]: {n: at[to[n]][n].predicted_ms for n in share},
    }
    rows = []
    for n in sorted(share):
        for copy, policy in zip(COPIES, POLICIES[:2], strict=True):
            p, m = at[copy][n], measured[policy][n]
            half = Z95 * math.hypot(p.se_ms, m.se)
            rows.append({"transaction": n, "share": share[n], "copy": copy,
                         "routed_to": to[n], "current_ms": p.current_ms.mean,
                         "predicted_ms": p.predicted_ms, "ci95": p.ci95,
                         "measured_ms": m.mean, "measured_se_ms": m.se,
                         "error": (m.mean - p.predicted_ms) / m.mean,
                         "inside": abs(m.mean - p.predicted_ms) <= half})
    mixes = {}
    for policy in POLICIES:
        m = mix_mean(share, measured[policy])
        mixes[policy] = {"predicted_ms": sum(share[n] * v
                                             for n, v in predicted_policy[policy].items()),
                         "measured_ms": m.mean, "measured_se_ms": m.se}
    return {"rate": rate, "window_s": window_s, "rows": rows, "mix": mixes,
            "applied_ms": {f"{a}->{b}": e.mean for (a, b), e in applied.items()},
            "route_advice": advice, "per_transaction_routes": per_transaction}


def to_markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "## Per-transaction routing, measured: thesis §5.5 / Fig. 5.5 "
        "(`benchmarks/routing_accuracy.py`)",
        "",
        "Web server at the edge, database moved to the core (+10 ms one way), an app server "
        "copy at each: app1 is the edge copy (+10 ms on app1↔db), app2 the core copy (+10 ms "
        "on web↔app2), both applied by the injector. Gradients from a `linkgrad run` (app1↔db, "
        "web↔app1 at 12 ms); `linkgrad route` picks each transaction's copy and writes the "
        "nginx map; `linkgrad testbed routes` installs each policy. Predictions remade from "
        "windows at each copy with the injector at 0 ms and the delays actually applied.",
        "",
        "| req/s | transaction | share | copy | predicted ms (95%) | measured ms | error | "
        "inside | routed to |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines += [f"| {r['rate']:g} | {x['transaction']} | {x['share']:.2f} | {x['copy']} | "
                  f"{x['predicted_ms']:.1f} [{x['ci95'][0]:.1f}, {x['ci95'][1]:.1f}] | "
                  f"{x['measured_ms']:.1f} ± {x['measured_se_ms']:.1f} | {x['error']:+.1%} | "
                  f"{'yes' if x['inside'] else 'no'} | {x['routed_to']} |" for x in r["rows"]]
    lines += ["", "Mix-weighted mean response time (ms) of the transactions, per routing policy "
              "(measured ± its standard error; predicted in brackets):", "",
              "| req/s | " + " | ".join(POLICIES) + " | per-transaction gain over the best "
              "fixed (measured) |", "|---|" + "---|" * (len(POLICIES) + 1)]
    for r in results:
        mix = r["mix"]
        fixed = min(mix[p]["measured_ms"] for p in POLICIES[:3])
        gain = fixed - mix[POLICIES[3]]["measured_ms"]
        lines.append(f"| {r['rate']:g} | " + " | ".join(
            f"{mix[p]['measured_ms']:.1f} ± {mix[p]['measured_se_ms']:.1f} "
            f"({mix[p]['predicted_ms']:.1f})" for p in POLICIES) + f" | {gain:.1f} ms |")
    inside = sum(x["inside"] for r in results for x in r["rows"])
    count = sum(len(r["rows"]) for r in results)
    lines += ["", f"Per transaction at each copy: {inside} of {count} measured means inside "
              "the prediction's 95% interval (widened by the measurement's own standard "
              "error). Thesis Fig. 5.5(b) (60 users, ratios 1:1 to 1:9): per-transaction "
              "routing by link gradients was faster than every fixed ratio."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window-s", type=float, default=40.0)
    parser.add_argument("--rates", type=float, nargs="+", default=[40.0])
    args = parser.parse_args()
    root = scratch_root("routing_accuracy")
    results = []
    try:
        info = up(DEFAULT, "tpa", root)
        for rate in args.rates:
            results.append(measure(root, info, rate, args.window_s))
            print(f"{rate:g} req/s done", flush=True)
    finally:
        down("tpa", root=root)
        shutil.rmtree(root, ignore_errors=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "routing_accuracy.json").write_text(json.dumps(results, indent=2, default=list))
    update_section("routing_accuracy", to_markdown(results))
    print(to_markdown(results))


if __name__ == "__main__":
    main()

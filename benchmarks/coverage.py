"""Do linkgrad's 95% intervals hold on real applications, idle and under other work (issue 12)?

For an application of the testbed (the RUBiS-like one, MediaWiki on Apache + mod_php +
MariaDB, or Redmine on Apache + Passenger + PostgreSQL) and a condition (idle, or background
load: a CPU hog and a disk writer started at random times for random lengths on the same
machine, as "a machine with other work running"),
`--runs` runs of `linkgrad run` with **default parameters** (only the link pair given), each
cell compared with the truth measured independently:

* rubis: the crossing counts of `testbed/transactions.py` (app1<->db), except where
  `benchmarks/rubis_truth.py`'s slope at a delay (constant delays alternated with none) departs
  from the count beyond its error (`departing`): there the slope, at that delay;
* mediawiki: the slopes of the mean response time under constant delays on web<->db,
  alternated with none, by `benchmarks/mediawiki_truth.py`: idle `out/mediawiki_truth.json`
  (2 ms) and the "none" of `out/mediawiki_truth_steady-1ms.json` (1 ms);
  under background load `out/mediawiki_truth_steady-1ms.json` (its `--steady-load`: the slope
  under each kind of the episodes' work held steady, since this application's slope rises under
  contention), mixed in the shares of time each kind ran in the cell's own injection window:
  the gradient of the mean over that window;
* redmine: the slopes measured as MediaWiki's on web<->db by `benchmarks/redmine_truth.py`
  (`out/redmine_truth.json`, at each delay it measured; default 1 and 2 ms at 10 req/s, the
  rate these runs default to), idle only: there is no Redmine truth under background load, so
  `--app redmine --load` stops and says so.

It reports the coverage (intervals holding the truth), each cell's run-to-run sd beside the
mean standard error the runs reported (half-width / t), the time a default run takes, and each
run's perturbation (on half-periods against off ones) — beside the thesis's Table 4.2 (sd
0.02-0.11 at gradients 0.5-2).

    .venv/bin/python -m benchmarks.coverage --app rubis --runs 3 [--load] [--rate 40] [--append]
    .venv/bin/python -m benchmarks.coverage --app redmine --runs 3 [--rate 10] [--append]

Writes benchmarks/out/coverage-APP-CONDITION.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import norm

from benchmarks.background_load import KINDS, BackgroundLoad, busy_fractions
from benchmarks.on_testbed import LINKGRAD, scratch_root
from benchmarks.results_md import update_section
from testbed.lifecycle import down, up
from testbed.topology import BUILT_IN, DEFAULT, Topology
from testbed.transactions import transactions_of

OUT = Path(__file__).with_name("out")
TAG = "cov"
PAIRS = {"rubis": ("app1", "db"), "mediawiki": ("web", "db"), "redmine": ("web", "db")}
# a run's open-loop req/s by default: the rate MediaWiki's and Redmine's slopes were measured at
RATES = {"rubis": 40.0, "mediawiki": 12.0, "redmine": 10.0}
RUBIS_TRANSACTIONS = ("ViewItem", "single", "sequential", "async")


def topology(app: str) -> Topology:
    return BUILT_IN[app]


# per (transaction, "src->dst"): each measurement as (the delay it was measured at, or None
# where it does not depend on one; {condition: (gradient, its standard error)}), condition
# "none" (no other work) or a kind of background work held steady ("cpu", "disk", "both")
Measured = tuple[float | None, dict[str, tuple[float, float]]]
Truth = dict[tuple[str, str], list[Measured]]


def truth(app: str, load: bool) -> Truth:
    """The gradients measured independently: rubis's crossing counts are exact (a slope where
    it departs from them, `departing`); MediaWiki's
    are the slopes under a constant delay alternated with none (`benchmarks/mediawiki_truth.py`),
    idle, or for runs under background load under each kind of that work held steady
    (`--steady-load`: its slope rises under contention), at every delay measured (a cell is
    held against the truth at the delay nearest its own); Redmine's are its slopes as
    MediaWiki's idle ones (`benchmarks/redmine_truth.py`), with no truth under load."""
    if app == "redmine":
        return redmine_truth(load)
    if app == "rubis":
        counts: Truth = {(t.name, link): [(None, {"none": (float(g), 0.0)})]
                         for t in transactions_of(DEFAULT) if t.name in RUBIS_TRANSACTIONS
                         for link, g in t.expected.items() if g is not None}
        slopes = OUT / "rubis_truth.json"
        return departing(counts, _slopes(json.loads(slopes.read_text())["slopes"])) \
            if slopes.exists() else counts
    paths = sorted(OUT.glob("mediawiki_truth_steady-*.json")) if load else \
        [OUT / "mediawiki_truth.json"]
    if not paths or not paths[0].exists():
        sys.exit(f"coverage: {OUT}/{'mediawiki_truth_steady-1ms' if load else 'mediawiki_truth'}"
                 ".json is missing: run benchmarks/mediawiki_truth.py"
                 f"{' --steady-load none,cpu,disk,both --delay-ms 1' if load else ''} first")
    if not load:  # the steady files' "none" is the idle truth at their delay
        paths += sorted(OUT.glob("mediawiki_truth_steady-*.json"))
    out: Truth = {}
    for path in paths:
        data = json.loads(path.read_text())
        by_kind = data["kinds"] if "kinds" in data else {"none": {"slopes": data["slopes"]}}
        if not load:
            by_kind = {k: v for k, v in by_kind.items() if k == "none"}
        if not by_kind:
            continue
        for key, measured in _slopes(*(m["slopes"] for m in by_kind.values()),
                                     kinds=list(by_kind)).items():
            out.setdefault(key, []).extend(measured)
    return out


def redmine_truth(load: bool) -> Truth:
    """Redmine's slopes from `out/redmine_truth.json` at every delay it measured; a clear stop
    where the file, its slopes or (under `load`) any truth for the condition is missing."""
    if load:
        sys.exit("coverage: Redmine has no truth under background load "
                 "(benchmarks/redmine_truth.py measures its slopes without other work); "
                 "run --app redmine without --load")
    path = OUT / "redmine_truth.json"
    if not path.exists():
        sys.exit(f"coverage: {path} is missing: run benchmarks/redmine_truth.py first")
    data = json.loads(path.read_text())
    if not data.get("slopes"):
        sys.exit(f"coverage: {path} has no slopes (measured before redmine_truth measured "
                 "them): run benchmarks/redmine_truth.py again")
    return _slopes(data["slopes"])


def _slopes(*slopes: list[dict[str, Any]], kinds: list[str] | None = None) -> Truth:
    """A truth file's `slopes` (one list per condition in `kinds`, default "none"), grouped
    by requested delay: each delay one measurement, at the mean delay its conditions applied."""
    kinds = kinds or ["none"]
    conditions: dict[tuple[str, str, float], dict[str, tuple[float, float]]] = {}
    applied: dict[tuple[str, float], list[float]] = {}  # per link and requested delay
    for kind, measured in zip(kinds, slopes, strict=True):
        for s in measured:
            applied.setdefault((s["link"], float(s["requested_ms"])), []).append(
                float(s["applied_ms"]))
            for name, page in s["pages"].items():
                key = (name, s["link"], float(s["requested_ms"]))
                conditions.setdefault(key, {})[kind] = (float(page["slope"]), float(page["se"]))
    out: Truth = {}
    for (name, link, requested), c in sorted(conditions.items()):
        at = float(np.mean(applied[(link, requested)]))
        out.setdefault((name, link), []).append((at, c))
    return out


def departing(counts: Truth, slopes: Truth) -> Truth:
    """Each cell's crossing count (exact, the gradient at large delays), but at a delay where
    its slope departs from the count beyond the slopes' 95% error corrected for testing every
    cell (Bonferroni), that slope: the application's gradient at that delay is not its count.
    Most slopes at ~1 ms are far less precise than the count (single and sequential: ±1.1-1.6
    from 100 ms of random service), so a slope only replaces the count where it has shown a
    difference."""
    z = float(norm.ppf(1 - 0.025 / max(1, sum(len(m) for m in slopes.values()))))
    out = dict(counts)
    for key, measured in slopes.items():
        count = counts[key][0][1]["none"]
        out[key] = [m if abs(m[1]["none"][0] - count[0]) > z * m[1]["none"][1]
                    else (m[0], {"none": count}) for m in measured]
    return out


def nearest(measured: list[Measured], delay_ms: float) -> Measured:
    """The truth measured at the delay nearest `delay_ms` (by ratio); one that does not depend
    on the delay only where nothing was measured at one."""
    at_delays = [m for m in measured if m[0] is not None]
    if not at_delays:
        return measured[0]
    return min(at_delays, key=lambda m: abs(np.log(m[0] / delay_ms)))


def mixed(conditions: dict[str, tuple[float, float]], shares: dict[str, float]
          ) -> tuple[float, float]:
    """The gradient of the mean response over a window that spent `shares` of its time under
    each kind of work (the rest under none): under open-loop load requests arrive evenly in
    time, so the mean's gradient is the time-weighted mean of each condition's, and so is its
    error (independent measurements). A truth measured only without work (rubis, idle runs)
    is that truth whatever the shares."""
    if set(conditions) == {"none"}:
        return conditions["none"]
    weights = {k: shares.get(k, 0.0) for k in KINDS}
    weights["none"] = max(0.0, 1.0 - sum(weights.values()))
    missing = sorted(k for k, w in weights.items() if w > 0 and k not in conditions)
    if missing:
        sys.exit(f"coverage: the truth has no slope under {missing} (it has {sorted(conditions)})")
    value = sum(w * conditions[k][0] for k, w in weights.items() if w > 0)
    se = float(np.sqrt(sum((w * conditions[k][1]) ** 2 for k, w in weights.items() if w > 0)))
    return value, se


def experiment_yaml(app: str, root: Path, rate: float, concurrent: int,
                    parameters: tuple[str, ...] = (), tag: str = TAG) -> Path:
    """Both directions of the app's pair, every transaction, default parameters unless
    `parameters` (YAML lines under `parameters:`) adds some."""
    a, b = PAIRS[app]
    txs = [t for t in transactions_of(topology(app))
           if app != "rubis" or t.name in RUBIS_TRANSACTIONS]
    mix = ",".join(f"{t.path}=1" for t in txs)
    lines = [f"name: coverage-{app}", f"testbed: {tag}",
             f"workload: {{host: client, rate_per_s: {rate}, mix: {json.dumps(mix)}}}",
             "transactions:"]
    # the RUBiS-like paths by their path, the others' by path and query (index.php?title=...)
    for t in txs:
        matched = t.path.split("?")[0] if app == "rubis" else t.path
        lines.append(f"  {t.name}: {json.dumps('^' + re.escape(matched))}")
    lines += ["parameters:", f"  include: ['{a}->{b}', '{b}->{a}']", f"  concurrent: {concurrent}",
              *(f"  {line}" for line in parameters), f"output: {root / 'runs'}"]
    path = root / f"coverage-{app}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def one_run(experiment: Path, env: dict[str, str]) -> tuple[dict[str, Any], float, str]:
    started = time.perf_counter()
    done = subprocess.run([LINKGRAD, "run", str(experiment), "--json"], capture_output=True,
                          text=True, env=env, timeout=5400, check=False)
    seconds = time.perf_counter() - started
    try:
        status = json.loads(done.stdout)
    except json.JSONDecodeError:  # counted as a failed run; the others go on
        print(f"coverage: run failed ({done.returncode}): {done.stderr[-3000:]}", flush=True)
        return {"links": []}, seconds, "failed"
    if "run_dir" not in status:
        print(f"coverage: run failed: {done.stdout[-2000:]}", flush=True)
        return {"links": []}, seconds, "failed"
    run_dir = Path(status["run_dir"])
    gradients = run_dir / "gradients.json"
    result = json.loads(gradients.read_text()) if gradients.exists() else {"links": []}
    explained = run_dir / "explain.json"  # the run's own, made at its end (issue 30)
    if explained.exists():
        result["explain_rows"] = json.loads(explained.read_text())["rows"]
        result["calibration"] = json.loads(explained.read_text())["summary"]["calibration"]
    plan = run_dir / "plan.json"  # the wave and why: the scratch root goes with the benchmark
    if plan.exists():
        result["plan"] = {k: v for k, v in json.loads(plan.read_text()).items()
                          if k in ("period_s", "cycles", "magnitude_ms", "notes",
                                   "effect_cap_ms", "effect_noise_ms")}
    return result, seconds, status["status"]


def judged(cell: dict[str, Any], expected: Truth) -> dict[str, Any]:
    """`cell` (transaction, link, gradient, ci95, delay_ms, and under background load
    `busy_by_kind`: the share of its window each kind of work ran) with its truth: `held` if
    the interval holds the truth's value, `held_within_truth_error` if it does once the
    truth's own 95% error is allowed for."""
    lo, hi = cell["ci95"]
    at_ms, conditions = nearest(expected[(cell["transaction"], cell["link"])],
                                cell["delay_ms"])
    value, se = mixed(conditions, cell.get("busy_by_kind", {}))
    slack = float(np.hypot((hi - lo) / 2, 1.96 * se))
    # the answer a user reads: both halves combined where they agreed, else the measurement
    alo, ahi = cell.get("combined_ci95") or (lo, hi)
    answer = cell["combined"] if cell.get("combined_ci95") else cell["gradient"]
    answer_slack = float(np.hypot((ahi - alo) / 2, 1.96 * se))
    return {**cell, "truth": value, "truth_se": se, "truth_delay_ms": at_ms,
            "truth_mixed": set(conditions) != {"none"},
            "held": lo <= value <= hi,
            "held_within_truth_error": abs(cell["gradient"] - value) <= slack,
            "answer_held": alo <= value <= ahi,
            "answer_held_within_truth_error": abs(answer - value) <= answer_slack,
            "half_width_rel": (hi - lo) / 2 / max(abs(value), 1.0),
            "answer_half_width_rel": (ahi - alo) / 2 / max(abs(value), 1.0)}


def with_shares(cell: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """`cell` with `busy_by_kind` over its link's injection window, or for a run stored
    before windows were (no `window`), over the whole run."""
    if not run.get("episodes"):
        return cell
    if "window" in cell:
        return {**cell, "busy_by_kind": busy_fractions(run["episodes"], *cell["window"])}
    whole = {k: sum(e["length_s"] for e in run["episodes"] if e["kind"] == k) / run["seconds"]
             for k in KINDS}
    return {**cell, "busy_by_kind": whole, "busy_from": "whole run"}


def cells(result: dict[str, Any], expected: Truth) -> list[dict[str, Any]]:
    """Every measured cell of a run's --json result that has a truth (judged by `main`)."""
    out = []
    explained = {(r["transaction"], r["link"]): r for r in result.get("explain_rows", [])}
    for link in result["links"]:
        label = f"{link['link']['src_host']}->{link['link']['dst_host']}"
        both = {name: explained.get((name, link["link"]["label"]), {})
                for name in link["transactions"]}
        for name, t in link["transactions"].items():
            if (name, label) not in expected or t["gradient"] is None:
                continue
            lo, hi = t["ci95"]
            record = link["record"]
            out.append({"transaction": name, "link": label, "gradient": t["gradient"],
                        "ci95": [lo, hi], "se": (hi - lo) / 2 / 1.96,
                        "delay_ms": record["magnitude_ms"],
                        "window": [record["start"],
                                   record["start"] + record["period_s"] * record["cycles"]],
                        "interval_from": t.get("interval_from"), "notes": t["notes"],
                        "by_level": t.get("by_level"),
                        "verdict": both[name].get("verdict"),
                        "combined": both[name].get("combined"),
                        "combined_ci95": both[name].get("combined_ci95")})
    return out


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    every = [c for r in runs for c in r["cells"]]
    by_cell: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in every:
        by_cell.setdefault((c["transaction"], c["link"]), []).append(c)
    rows = []
    for (name, link), cs in sorted(by_cell.items()):
        values = [c["gradient"] for c in cs]
        # a count is exact at any delay: its delay is where a slope was found not to depart
        truths = sorted({(c.get("truth_delay_ms") if c["truth_se"] else None, c["truth"],
                          c["truth_se"]) for c in cs}, key=lambda x: x[0] or 0.0)
        rows.append({"transaction": name, "link": link, "truth": cs[0]["truth"],
                     "truths": truths, "mixed": any(c.get("truth_mixed") for c in cs),
                     "whole_run": sum(c.get("truth_mixed", False)
                                      and c.get("busy_from") == "whole run" for c in cs),
                     "mean": statistics.mean(values),
                     "sd": statistics.stdev(values) if len(values) > 1 else None,
                     "mean_se": statistics.mean(c["se"] for c in cs),
                     "truth_se": cs[0]["truth_se"],
                     "held": sum(c["held"] for c in cs), "n": len(cs)})
    answered = [c for c in every if "answer_held" in c]
    return {"held": sum(c["held"] for c in every),
            "answer_held": sum(c["answer_held"] for c in answered),
            "answer_held_within_truth_error": sum(
                c.get("answer_held_within_truth_error", c["answer_held"]) for c in answered),
            "answered": len(answered),
            "combined_cells": sum(c.get("combined") is not None for c in answered),
            "median_half_width_rel": (statistics.median(c["half_width_rel"] for c in answered)
                                      if answered else None),
            "median_answer_half_width_rel": (statistics.median(
                c["answer_half_width_rel"] for c in answered) if answered else None),
            "held_within_truth_error": sum(c["held_within_truth_error"] for c in every),
            "cells": len(every), "rows": rows,
            "delays_ms": sorted({round(c["delay_ms"], 2) for c in every}),
            "seconds": [r["seconds"] for r in runs], "statuses": [r["status"] for r in runs],
            "busy": [r.get("busy_fraction", min(1.0, sum(e["length_s"] for e in r["episodes"])
                                                / r["seconds"])) for r in runs],
            "perturbation": [lk for r in runs for lk in r["perturbation"]]}


def to_markdown(app: str, condition: str, args: argparse.Namespace,
                s: dict[str, Any]) -> str:
    lines = [f"## Interval coverage, {app}, {condition} (`benchmarks/coverage.py`)", "",
             f"`--app {app} --rate {args.rate} --concurrent {args.concurrent}"
             f"{' --load' if args.load else ''}`: {len(s['statuses'])} runs of `linkgrad run` with "
             f"default parameters on both directions of {'↔'.join(PAIRS[app])}, "
             f"{args.rate} req/s open loop; statuses {', '.join(s['statuses'])}; a run took "
             f"{statistics.mean(s['seconds']):.0f} s on average "
             f"({min(s['seconds']):.0f}-{max(s['seconds']):.0f})."
             + (" Background load was running " + ", ".join(f"{b:.0%}" for b in s["busy"])
                + " of each run's time." if args.load else ""), "",
             f"**The truth was inside the 95% interval in {s['held']} of {s['cells']} cells"
             f" ({s['held'] / max(s['cells'], 1):.0%})** (goal: 90% or more); allowing for the "
             f"truth's own 95% error, {s['held_within_truth_error']} of {s['cells']}. Delays the "
             f"runs chose: {', '.join(f'{d:g}' for d in s['delays_ms'])} ms."
             + (f" **Both halves (`explain.json`'s combined where the verdict was agree, "
                f"{s['combined_cells']} of {s['answered']} cells; else the measurement): the "
                f"truth inside in {s['answer_held']} of {s['answered']} (allowing for the "
                f"truth's own 95% error, {s['answer_held_within_truth_error']}); median "
                "half-width "
                f"{s['median_answer_half_width_rel']:.0%} of the truth against "
                f"{s['median_half_width_rel']:.0%} measured alone** (goal: 15% or less, "
                "coverage still 90% or more)." if s.get("answered") else "")
             + (" The truth of a cell under load is the steady-load slopes mixed in the "
                "shares of time each kind of work ran in its link's injection window"
                + (f" ({whole} cells of runs stored before windows were: over their whole run)"
                   if (whole := sum(r.get("whole_run", 0) for r in s["rows"])) else "") + "."
                if any(r.get("mixed") for r in s["rows"]) else ""), "",
             "| transaction | link | truth | mean | run-to-run sd | mean reported se | held |",
             "|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        sd = f"{r['sd']:.3g}" if r["sd"] is not None else "-"
        truths = r.get("truths", [(None, r["truth"], r["truth_se"])])
        truth_text = " / ".join(
            f"{value:.3g}" + (f" ± {se:.2g}" if se else "")
            + (f" (at {at:.2g} ms)" if at is not None else "")
            for at, value, se in truths)
        if r.get("mixed"):  # one per run: mixed in the shares of each run's window
            truth_text = (f"{min(t[1] for t in truths):.3g}-{max(t[1] for t in truths):.3g} "
                          f"(± {max(t[2] for t in truths):.2g}, mixed per run)")
        lines.append(f"| {r['transaction']} | {r['link']} | {truth_text} | {r['mean']:.3g} "
                     f"| {sd} | {r['mean_se']:.3g} | {r['held']}/{r['n']} |")
    pert = s["perturbation"]
    if pert:
        lines += ["", "Perturbation per link measurement (on half-periods against off ones): "
                  "throughput " + ", ".join(f"{p['throughput_change']:+.1%}" for p in pert)
                  + "; mean response " + ", ".join(f"{p['mean_response_change_ms']:+.1f} ms"
                                                    for p in pert) + "."]
    lines += ["", "Thesis Table 4.2 (M = 9 runs): sd 0.02-0.11 at gradients 0.5-2."]
    return "\n".join(lines)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", choices=sorted(PAIRS), default="rubis")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=None,
                        help="requests/s (default: 40 for rubis, 12 for mediawiki, 10 for "
                             "redmine: the rates their truths were measured at)")
    parser.add_argument("--load", action="store_true", help="background load episodes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrent", type=int, default=1, choices=(1, 2),
                        help="both directions at once (half the time; not a precision setting)")
    parser.add_argument("--append", action="store_true",
                        help="add these runs to those of benchmarks/out/coverage-APP-CONDITION"
                             ".json (same app and condition) instead of replacing them")
    parser.add_argument("--rescore", action="store_true",
                        help="no runs: judge the stored ones again against the truth files "
                             "as they are now (a truth measured since, at another delay)")
    args = parser.parse_args()
    args.rate = args.rate or RATES[args.app]
    expected = truth(args.app, args.load)
    name = f"coverage-{args.app}-{'load' if args.load else 'idle'}"
    condition = "under background load" if args.load else "idle"
    if args.rescore:
        runs = json.loads((OUT / f"{name}.json").read_text())["runs"]
        stored = runs[0].get("args", {})  # older files: as given on the command line
        args.rate = stored.get("rate", args.rate)
        args.concurrent = stored.get("concurrent", args.concurrent)
        for run in runs:
            run["cells"] = [judged(with_shares(c, run), expected) for c in run["cells"]]
        report(name, args, condition, runs)
        return
    signal.signal(signal.SIGTERM, _interrupt)  # the testbed and the load come down either way
    root = scratch_root("coverage")
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    runs = []
    try:
        up(topology(args.app), TAG, root)
        experiment = experiment_yaml(args.app, root, args.rate, args.concurrent)
        for i in range(args.runs):
            load = BackgroundLoad(args.seed + i, root) if args.load else None
            if load:
                load.__enter__()
            try:
                result, seconds, status = one_run(experiment, env)
            finally:
                if load:
                    load.__exit__()
            run = {"seconds": seconds, "status": status, "cells": cells(result, expected),
                   "episodes": load.episodes if load else []}
            run["cells"] = [judged(with_shares(c, run), expected) for c in run["cells"]]
            runs.append({**run,
                         "busy_fraction": load.busy_fraction(load.started, time.time())
                         if load else 0.0,
                         "args": {"rate": args.rate, "concurrent": args.concurrent},
                         "plan": result.get("plan"),
                         "calibration": result.get("calibration"),
                         "perturbation": [lk["perturbation"] for lk in result["links"]]})
            print(f"run {i + 1}: {status} in {seconds:.0f} s, held "
                  f"{sum(c['held'] for c in runs[-1]['cells'])}/{len(runs[-1]['cells'])}",
                  flush=True)
    finally:
        down(TAG, root=root)
        shutil.rmtree(root, ignore_errors=True)
    OUT.mkdir(exist_ok=True)
    if args.append and (OUT / f"{name}.json").exists():
        runs = json.loads((OUT / f"{name}.json").read_text())["runs"] + runs
    report(name, args, condition, runs)


def report(name: str, args: argparse.Namespace, condition: str,
           runs: list[dict[str, Any]]) -> None:
    """The runs and their summary to out/NAME.json, RESULTS.md and stdout."""
    s = summary(runs)
    (OUT / f"{name}.json").write_text(json.dumps({"runs": runs, "summary": s}, indent=1))
    update_section(name, to_markdown(args.app, condition, args, s))
    print(to_markdown(args.app, condition, args, s))


if __name__ == "__main__":
    main()

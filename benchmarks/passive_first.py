"""Passive first against the whole graph injected, on the RUBiS-like testbed (issue 30): one
run of each strategy, one after the other on the same testbed, of
experiments/calibration/testbed-all.yaml (every link, every transaction of
testbed/transactions.py), the passive-first one asking one question (move db). For each run:
the time it took, the links it injected, and every (transaction, link) with a known gradient
(testbed/transactions.py's crossing counts) judged by the answer a user reads in its
explain.json — both halves combined where they agree, else the measurement, and for a link
left passive its calibrated passive gradient: the truth inside the 95% interval, and the
interval's half-width. Then the placements of `benchmarks/prediction_accuracy.py` predicted
from each run (`linkgrad predict`, which takes a link left passive from explain.json) and
applied for real on the same testbed (`--validate`): the measured mean inside the prediction's
interval.

The client's link (client<->web) is left out of the judging: the web log's response time
starts after the request's crossing and ends at the reply's last write, so the gradient it
measures there is 0, not the crossing count transactions.py gives.

    linkgrad testbed up && .venv/bin/python -m benchmarks.passive_first

    .venv/bin/python -m benchmarks.passive_first --experiment experiments/testbed-quick.yaml

About 20 minutes for testbed-all: the two runs (10 and 7 minutes) and two validations of four
placements (about 3 minutes each at the default --predict-window-s 30).

Writes benchmarks/out/passive_first-EXPERIMENT.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from scipy import stats

from benchmarks.on_testbed import LINKGRAD, run_and_explain, scratch_root
from benchmarks.prediction_accuracy import PLACEMENTS
from benchmarks.results_md import update_section
from testbed.topology import DEFAULT
from testbed.transactions import transactions_of

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "experiments" / "calibration" / "testbed-all.yaml"
OUT = Path(__file__).with_name("out")
QUESTION = {"move": {"db": "remote"}}
NOW = ROOT / "experiments" / "placement" / "now.yaml"  # prediction_accuracy.py's sites


def run(strategy: str, root: Path, experiment: Path = EXPERIMENT) -> dict[str, Any]:
    spec = yaml.safe_load(experiment.read_text())
    spec["name"] = f"pf-{strategy}"
    spec["parameters"].pop("include", None)  # the whole graph
    # apart: a run beside another would take its rows into its calibration (a user's own
    # runs), and the figure is the shipped calibration's
    spec["output"] = str(root / f"runs-{strategy}")
    if strategy == "passive-first":
        spec["parameters"].update({"strategy": "passive-first", "questions": [QUESTION]})
    path = root / f"{strategy}.yaml"
    path.write_text(yaml.safe_dump(spec))
    status, run_dir, seconds, explained = run_and_explain("passive_first", path, 7200)
    return {"strategy": strategy, "run_dir": str(run_dir), "status": status["status"],
            "seconds": seconds, "links_injected": status["links_done"],
            "calibration": explained["summary"]["calibration"],
            "rows": explained["rows"]}


def answer(row: dict[str, Any]) -> tuple[str, float, tuple[float, float]] | None:
    if row["combined"] is not None:
        return "combined", row["combined"], tuple(row["combined_ci95"])
    if row["gradient"] is not None and row["ci95"] is not None:
        return "measured", row["gradient"], tuple(row["ci95"])
    if row["passive_gradient"] is not None:
        return "passive", row["passive_gradient"], tuple(row["passive_ci95"])
    return None


def judge(result: dict[str, Any]) -> list[dict[str, Any]]:
    truth = {(t.name, link): g for t in transactions_of(DEFAULT)
             for link, g in t.expected.items() if g is not None}
    out = []
    for row in result["rows"]:
        key = (row["transaction"], row["pair"])
        if key not in truth or "client" in row["pair"].split("->"):
            continue
        a = answer(row)
        if a is None:
            continue
        kind, value, (lo, hi) = a
        out.append({"transaction": row["transaction"], "pair": row["pair"], "kind": kind,
                    "verdict": row["verdict"], "truth": truth[key], "value": value,
                    "ci95": [lo, hi], "held": lo <= truth[key] <= hi,
                    "half_width_rel": (hi - lo) / 2 / max(abs(truth[key]), 1.0)})
    return out


def predictions(run_dir: Path, root: Path, window_s: float) -> list[dict[str, Any]]:
    """prediction_accuracy.py's placements predicted from the run and applied for real."""
    argv = [LINKGRAD, "predict", "--gradients", str(run_dir / "gradients.json"),
            "--latencies", str(NOW), "--validate", "--window-s", str(window_s), "--json"]
    for i, move in enumerate(PLACEMENTS.values()):
        path = root / f"placement{i}.yaml"
        path.write_text(json.dumps({"move": move}))
        argv += ["--placement", str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=7200, check=False)
    if done.returncode != 0 or not done.stdout.strip().startswith("{"):
        # said, not fatal: the run it came from is worth keeping (--active RUN_DIR reuses it)
        print(f"passive_first: predict --validate failed on {run_dir}: {done.stderr[-3000:]}",
              file=sys.stderr)
        return []
    rows = []
    for name, p in zip(PLACEMENTS, json.loads(done.stdout)["placements"], strict=True):
        for tx, v in (p.get("validation") or {}).get("transactions", {}).items():
            terms = p["transactions"].get(tx, {}).get("terms", [])
            rows.append({"placement": name, "transaction": tx,
                         "uses_passive": any(t.get("passive") for t in terms), **v})
    return rows


def exact_ci(k: int, n: int) -> tuple[float, float]:
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    return ci.low, ci.high


def predictions_line(r: dict[str, Any]) -> str:
    rows = r.get("predictions") or []
    if not rows:
        return f"{r['strategy']}: not predicted"
    inside = sum(p["inside"] for p in rows)
    lo, hi = exact_ci(inside, len(rows))
    passive = [p for p in rows if p["uses_passive"]]
    errors = [abs(p["error"]) for p in rows if p["error"] is not None]  # None: measured 0
    return (f"{r['strategy']}: {inside} of {len(rows)} inside ({inside / len(rows):.0%}; "
            f"95% CI {lo:.0%}-{hi:.0%}), median |error| "
            f"{f'{statistics.median(errors):.1%}' if errors else 'none'}; "
            f"{len(passive)} used a passive gradient, "
            f"{sum(p['inside'] for p in passive)} of them inside")


def markdown(results: list[dict[str, Any]], experiment: Path) -> str:
    lines = [f"## Passive first against every link injected, {experiment.stem} "
             "(`benchmarks/passive_first.py`)", "",
             f"One run of each strategy on the RUBiS-like testbed, one after the other: "
             f"`{experiment.relative_to(ROOT)}` on its whole graph (its transactions and "
             "wave as written there), passive-first asking one question (move db). "
             "Each (transaction, link) with a known gradient (testbed/transactions.py; the "
             "client's link left out: outside the logged response time) judged by the answer "
             "`explain.json` gives: combined where the halves agree, else the measurement, "
             "and for a link left passive its calibrated passive gradient. Both runs made "
             "after the calibration was shipped (it came from other runs). One run each.", "",
             "| strategy | time | links injected | cells | truth inside 95% | "
             "median half-width | cells answered by |", "|---|---|---|---|---|---|---|"]
    for r in results:
        cells = r["cells"]
        held = sum(c["held"] for c in cells)
        by = ", ".join(f"{k} {sum(c['kind'] == k for c in cells)}"
                       for k in ("combined", "measured", "passive"))
        lines.append(f"| {r['strategy']} | {r['seconds']:.0f} s | {r['links_injected']} | "
                     f"{len(cells)} | {held} ({held / max(len(cells), 1):.0%}) | "
                     f"{statistics.median(c['half_width_rel'] for c in cells):.1%} of the "
                     f"truth (or of 1) | {by} |")
    a, p = results
    lines += ["", f"Passive first took {a['seconds'] / p['seconds']:.1f}× less time "
              f"({p['seconds']:.0f} s against {a['seconds']:.0f} s) and injected "
              f"{p['links_injected']} of {a['links_injected']} links (goal: at least 3× faster "
              "with 90% or more of predictions inside their intervals).",
              f"Calibration used: {p['calibration']}."]
    if any(r.get("predictions") for r in results):
        lines += ["", "Predictions of `benchmarks/prediction_accuracy.py`'s placements "
                  f"({', '.join(PLACEMENTS)}; sites of `experiments/placement/now.yaml`) from "
                  "each run's gradients, every transaction of the run, each placement applied "
                  "for real by `linkgrad predict --validate` on the same testbed right after "
                  "its run; inside = the measured mean within the prediction's 95% interval "
                  "widened by the measurement's own standard error:", "",
                  *[f"- {predictions_line(r)}" for r in results]]
        out = [f"{r['strategy']} {x['placement']} {x['transaction']} "
               f"{x['predicted_ms']:.1f} [{x['ci95'][0]:.1f}, {x['ci95'][1]:.1f}] against "
               f"{x['measured_ms']:.1f}{' (passive)' if x['uses_passive'] else ''}"
               for r in results for x in r.get("predictions") or [] if not x["inside"]]
        if out:
            lines += ["", "Predictions outside: " + "; ".join(out) + "."]
    missed = [c for r in results for c in r["cells"] if not c["held"]]
    if missed:
        lines += ["", "Misses: " + "; ".join(
            f"{r['strategy']} {c['transaction']} {c['pair']} {c['kind']} {c['value']:.2f} "
            f"[{c['ci95'][0]:.2f}, {c['ci95'][1]:.2f}] against {c['truth']:g}"
            for r in results for c in r["cells"] if not c["held"]) + "."]
    return "\n".join(lines)


def explained(strategy: str, run_dir: Path, seconds: float) -> dict[str, Any]:
    """A run made earlier, explained by the code as it is now (`linkgrad explain`, offline)."""
    done = subprocess.run([LINKGRAD, "explain", str(run_dir), "--json"], capture_output=True,
                          text=True, timeout=600, check=True)
    e = json.loads(done.stdout)
    journal = json.loads((run_dir / "run.json").read_text())
    return {"strategy": strategy, "run_dir": str(run_dir), "status": journal["status"],
            "seconds": seconds, "links_injected": journal["links_done"],
            "calibration": e["summary"]["calibration"], "rows": e["rows"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--active", type=Path, metavar="RUN_DIR",
                    help="an active run made before by this script: explained again, not run")
    ap.add_argument("--active-seconds", type=float, default=0.0,
                    help="with --active: the time it took")
    ap.add_argument("--passive-first", type=Path, metavar="RUN_DIR",
                    help="a passive-first run made before by this script: explained again")
    ap.add_argument("--passive-first-seconds", type=float, default=0.0,
                    help="with --passive-first: the time it took")
    ap.add_argument("--predict-window-s", type=float, default=30.0,
                    help="seconds each placement is measured each way by predict --validate")
    ap.add_argument("--no-predict", action="store_true",
                    help="judge the gradients only; do not apply the placements")
    ap.add_argument("--note", default="",
                    help="a paragraph for the section (what the runs were used for)")
    ap.add_argument("--experiment", type=Path, default=EXPERIMENT,
                    help="the testbed experiment both strategies run, on its whole graph "
                    f"(default {EXPERIMENT.relative_to(ROOT)})")
    args = ap.parse_args()
    args.experiment = args.experiment.resolve()
    root = scratch_root("passive_first")
    made = {"active": (args.active, args.active_seconds),
            "passive-first": (args.passive_first, args.passive_first_seconds)}
    results = []
    for strategy in ("active", "passive-first"):
        if made[strategy][0] is not None:
            r = explained(strategy, *made[strategy])
        else:
            r = run(strategy, root, args.experiment)
        r["cells"] = judge(r)
        print(f"{strategy}: {r['seconds']:.0f} s, {r['links_injected']} links, "
              f"{sum(c['held'] for c in r['cells'])}/{len(r['cells'])} held", flush=True)
        if not args.no_predict:  # right after its run: the testbed as the run left it
            r["predictions"] = predictions(Path(r["run_dir"]), root, args.predict_window_s)
            print(predictions_line(r), flush=True)
        results.append(r)
        OUT.mkdir(exist_ok=True)  # each run kept as soon as it is judged
        (OUT / f"passive_first-{args.experiment.stem}.json").write_text(
            json.dumps(results, indent=1))
    OUT.mkdir(exist_ok=True)
    name = args.experiment.stem
    (OUT / f"passive_first-{name}.json").write_text(json.dumps(results, indent=1))
    update_section(f"passive-first-{name}", markdown(results, args.experiment)
                   + (f"\n\n{args.note}" if args.note else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

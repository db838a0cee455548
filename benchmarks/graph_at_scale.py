"""The whole graph of a generated application, passive first, eight links at once (issue 31):
on a running `linkgrad testbed up --services N` testbed, one after the other,
- *one group*: the eight links a question needs (every link of one service: the question
  moves it), measured at once, an active run of those links alone;
- *whole graph*: the same experiment on every link of the graph, passive first, asking that
  question, eight links at once.
Each (transaction, link) the graph gives a truth for (`testbed.service_graph.true_gradients`,
exact; the client's link left out: outside the logged response time) is judged by the answer
a user reads in the run's explain.json — combined where the halves agree, else the
measurement, else the calibrated passive gradient; a cell with no answer counts as a miss.
The goal: the whole graph in at most three times one group's time, with 90% or more of the
true gradients inside their 95% intervals.

    linkgrad testbed up --services 50 --tag g50
    PYTHONPATH=. .venv/bin/python -m benchmarks.graph_at_scale --tag g50 --services 50

Writes benchmarks/out/graph_at_scale-TAG.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from benchmarks.on_testbed import run_and_explain, scratch_root
from benchmarks.passive_first import answer, exact_ci
from benchmarks.results_md import update_section
from testbed.service_graph import generate, true_gradients

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).with_name("out")
GROUP = 8  # links at once, the most a wave carries


def links_of(truth: dict[str, dict[str, float]], service: str) -> list[str]:
    """Every one-way link with `service` at an end, in a stable order."""
    pairs = {pair for per_link in truth.values() for pair in per_link}
    return sorted(p for p in pairs if service in p.split("->"))


def question_service(truth: dict[str, dict[str, float]]) -> str:
    """A service whose links make exactly one group, not the client's, and crossed most:
    the question's links then carry most of what a measurement can show."""
    services = {s for per_link in truth.values() for p in per_link for s in p.split("->")}

    def crossed(service: str) -> float:
        return sum(truth[t][p] for t in truth for p in links_of(truth, service))

    fits = [s for s in sorted(services) if len(links_of(truth, s)) == GROUP
            and not any("client" in p.split("->") for p in links_of(truth, s))]
    if not fits:
        sys.exit(f"graph_at_scale: no service has exactly {GROUP} links; try another --seed")
    return max(fits, key=crossed)


def experiment(args: argparse.Namespace, name: str, output: Path, *,
               include: list[str] | None, passive_first: str | None) -> dict[str, Any]:
    parameters: dict[str, Any] = {
        "training_s": args.training_s, "cycles": args.cycles, "magnitude_ms": 1,
        "max_delay_ms": 1, "adaptive": False, "concurrent": GROUP}
    if include is not None:
        parameters["include"] = [f"^{link}$" for link in include]
    if passive_first is not None:
        parameters.update({"strategy": "passive-first",
                           "questions": [{"move": {passive_first: "remote"}}]})
    return {"name": name, "testbed": args.tag,
            "workload": {"host": "client", "rate_per_s": args.rate},
            "transactions": {f"t{i}": f"^/t{i}" for i in range(args.transactions)},
            "parameters": parameters, "output": str(output)}


def run(spec: dict[str, Any], root: Path) -> dict[str, Any]:
    path = root / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    status, run_dir, seconds, explained = run_and_explain("graph_at_scale", path, 4 * 3600)
    strategy = run_dir / "strategy.json"
    return {"name": spec["name"], "run_dir": str(run_dir), "status": status["status"],
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "seconds": seconds, "links_injected": status["links_done"],
            "rows": explained["rows"],
            "strategy": json.loads(strategy.read_text()) if strategy.exists() else None}


def judge(result: dict[str, Any], truth: dict[str, dict[str, float]],
          links: set[str] | None) -> list[dict[str, Any]]:
    """A cell per (transaction, link) with a truth (of `links` only, if given); a cell the
    run gave no answer for is a miss, with kind "none"."""
    answered = {(r["transaction"], r["pair"]): (r, answer(r)) for r in result["rows"]}
    cells = []
    for tx, per_link in truth.items():
        for pair, g in per_link.items():
            if "client" in pair.split("->") or (links is not None and pair not in links):
                continue
            row, a = answered.get((tx, pair), (None, None))
            if a is None:
                cells.append({"transaction": tx, "pair": pair, "kind": "none", "truth": g,
                              "verdict": row["verdict"] if row else None, "held": False})
                continue
            kind, value, (lo, hi) = a
            cells.append({"transaction": tx, "pair": pair, "kind": kind, "truth": g,
                          "verdict": row["verdict"], "value": value, "ci95": [lo, hi],
                          "held": lo <= g <= hi,
                          "half_width": (hi - lo) / 2})
    return cells


def summary_row(label: str, r: dict[str, Any], cells: list[dict[str, Any]]) -> str:
    held = sum(c["held"] for c in cells)
    lo, hi = exact_ci(held, len(cells)) if cells else (0.0, 0.0)
    crossed = [c for c in cells if c["truth"] > 0]
    crossed_held = sum(c["held"] for c in crossed)
    widths = [c["half_width"] for c in crossed if "half_width" in c]
    ratios = [c["value"] / c["truth"] for c in crossed if "value" in c]
    by = ", ".join(f"{k} {n}" for k, n in Counter(c["kind"] for c in cells).most_common())
    return (f"| {label} | {r['seconds']:.0f} s | {r['links_injected']} | {len(cells)} | "
            f"{held} ({held / max(len(cells), 1):.0%}; {lo:.0%}-{hi:.0%}) | "
            f"{crossed_held} of {len(crossed)} | {_median(widths):.2f} | "
            f"{_median(ratios):.2f} | {by} |")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def markdown(args: argparse.Namespace, service: str, group: dict[str, Any],
             whole: dict[str, Any], links: list[str]) -> str:
    when = group.get("when", "?")
    ratio = whole["seconds"] / group["seconds"]
    held = sum(c["held"] for c in whole["cells"])
    share = held / max(len(whole["cells"]), 1)
    lines = [
        f"## The whole graph of {args.services} generated services, passive first, "
        f"{GROUP} links at once (`benchmarks/graph_at_scale.py`)", "",
        f"{platform.node()} {platform.release()}, 2 cores, {when}: `linkgrad testbed up "
        f"--services {args.services} --seed {args.seed}` ({args.services} hosts and a "
        f"client), {args.rate:g} requests/s, a {args.training_s:g} s passive phase, "
        f"{args.cycles} cycles at 1 ms. *One group*: the {GROUP} links of {service} "
        f"({', '.join(links)}) measured at once, alone. *Whole graph*: every link, passive "
        f"first, asking to move {service}. Every (transaction, link) with the graph's exact "
        "truth judged by explain.json's answer (combined, else measured, else passive); a "
        "cell with no answer is a miss; the client's link left out. One run each.", "",
        "| run | time | links injected | cells | truth inside 95% (CI) | of them crossed "
        "(truth > 0) | median half-width where crossed, crossings | median answer / truth "
        "where crossed | answered by |",
        "|---|---|---|---|---|---|---|---|---|",
        summary_row("one group", group, group["cells"]),
        summary_row("whole graph", whole, whole["cells"]), "",
        f"The whole graph took {ratio:.1f}× one group's time ({whole['seconds']:.0f} s "
        f"against {group['seconds']:.0f} s; goal at most 3×) with {share:.0%} of the true "
        "gradients inside their intervals (goal 90% or more)."]
    if whole.get("strategy"):
        reasons = Counter(reason.split(":")[0] for c in whole["strategy"]["links"]
                          if c["inject"] for reason in c["reasons"])
        injected = sum(c["inject"] for c in whole["strategy"]["links"])
        lines += ["", f"Passive first injected {injected} of "
                  f"{len(whole['strategy']['links'])} links; reasons: "
                  + ", ".join(f"{k} {n}" for k, n in reasons.most_common()) + "."]
    missed = [c for c in whole["cells"] if not c["held"]]
    if missed:
        shown = "; ".join(
            f"{c['transaction']} {c['pair']} {c['kind']} "
            + (f"{c['value']:.2f} [{c['ci95'][0]:.2f}, {c['ci95'][1]:.2f}]" if "value" in c
               else "no answer") + f" against {c['truth']:.3g}" for c in missed[:40])
        lines += ["", f"Misses of the whole graph ({len(missed)}): {shown}"
                  + ("; ..." if len(missed) > 40 else "") + "."]
    lines += ["", "Reproduce (root): `linkgrad testbed up --services "
              f"{args.services} --seed {args.seed} --tag {args.tag} && PYTHONPATH=. "
              f".venv/bin/python -m benchmarks.graph_at_scale --tag {args.tag} --services "
              f"{args.services} --seed {args.seed}`."]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tag", required=True, help="a running generated testbed")
    ap.add_argument("--services", type=int, required=True, help="as the testbed was made")
    ap.add_argument("--seed", type=int, default=1, help="as the testbed was made")
    ap.add_argument("--transactions", type=int, default=4, help="as the testbed was made")
    ap.add_argument("--rate", type=float, default=20.0, help="requests per second")
    ap.add_argument("--training-s", type=float, default=60.0, help="the passive phase")
    ap.add_argument("--cycles", type=int, default=6, help="square-wave cycles per group")
    ap.add_argument("--only", choices=("group", "whole"), help="run one of the two")
    ap.add_argument("--report", action="store_true",
                    help="write the section from the runs kept in benchmarks/out, run nothing")
    args = ap.parse_args()
    truth = true_gradients(generate(args.services, args.seed, args.transactions))
    service = question_service(truth)
    links = links_of(truth, service)
    root = Path("/nonexistent") if args.report else scratch_root("graph_at_scale")
    OUT.mkdir(exist_ok=True)
    out = OUT / f"graph_at_scale-{args.tag}.json"
    kept: dict[str, Any] = (json.loads(out.read_text()) if out.exists()
                            and (args.only or args.report) else {})
    plans = {"group": (links, None, set(links)), "whole": (None, service, None)}
    for label, (include, question, judged) in plans.items():
        if args.report or (args.only and label != args.only):
            continue
        spec = experiment(args, f"scale-{label}", root / f"runs-{label}", include=include,
                          passive_first=question)
        r = run(spec, root)
        r["cells"] = judge(r, truth, judged)
        held = sum(c["held"] for c in r["cells"])
        print(f"{label}: {r['seconds']:.0f} s, {r['links_injected']} links, "
              f"{held}/{len(r['cells'])} held", flush=True)
        kept[label] = r
        out.write_text(json.dumps(kept, indent=1))
    if "group" in kept and "whole" in kept:
        update_section(f"graph-at-scale-{args.services}",
                       markdown(args, service, kept["group"], kept["whole"], links))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The nightly regression's false alarms and misses (issue: "a regression planted on purpose
must be caught ... 10 of 10 nights"): the shipped suite (`experiments/nightly.yaml`) run night
after night, back to back, each a full `linkgrad regress` (testbed up on Mininet, the runs,
testbed down), against the shipped baseline (`experiments/nightly.baseline.json`):
- --clean nights of the application as it is: each should pass (goal: 0 false alarms);
- --planted nights of the application with one more database round trip in PutBid
  (`service.extra_query: [PutBid]`): each should fail naming PutBid on app1<->db.
Nights alternate (clean, planted, clean, ...) so that a drift of the machine over the hours
falls on both kinds alike. Reports each night's verdict, its regressions, its duration, and
the gradients of PutBid measured each night.

    .venv/bin/python -m benchmarks.regress_nights [--clean 10] [--planted 10]
        [--baseline experiments/nightly.baseline.json]   (root, Mininet)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.results_md import update_section

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "experiments" / "nightly.yaml"
OUT = Path(__file__).with_name("out") / "regress_nights"
SECTION = "regress-nights"
LINKGRAD = str(Path(sys.executable).parent / "linkgrad")
PUT_BID = ("PutBid on tcp app1:0 -> db:5432 (experiment db)",
           "PutBid on tcp db:5432 -> app1:0 (experiment db)")


def _suite_copy(out: Path) -> Path:
    """The shipped suite with its output under `out` (paths made absolute)."""
    text = SUITE.read_text()
    text = (text.replace("experiment: nightly/", f"experiment: {SUITE.parent}/nightly/")
            .replace("placement/", f"{SUITE.parent}/placement/")
            .replace("output: ../runs/nightly", f"output: {out / 'nights'}"))
    path = out / "nightly.yaml"
    path.write_text(text)
    return path


def _planted_topology(out: Path) -> Path:
    path = out / "planted.yaml"
    path.write_text((ROOT / "experiments" / "topology-default.yaml").read_text()
                    + "  extra_query: [PutBid]\n")
    return path


def _night(suite: Path, baseline: Path, planted: Path | None) -> dict[str, Any]:
    argv = [LINKGRAD, "regress", str(suite), "--baseline", str(baseline), "--json"]
    if planted is not None:
        argv += ["--topology", str(planted)]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
    elapsed = time.monotonic() - started
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        result = {"status": "no output", "reason": done.stderr[-500:]}
    gradients = {c["link"]: c["current"].get("gradient") for c in result.get("checks", [])
                 if c.get("kind") == "gradient" and c.get("transaction") == "PutBid"}
    p_values = [c["p_value"] for c in result.get("checks", [])
                if c.get("kind") == "gradient" and c.get("p_value") is not None]
    return {"planted": planted is not None, "exit_code": done.returncode, "tests": len(p_values),
            "least_p": min(p_values, default=None), "checks": len(result.get("checks", [])),
            "status": result.get("status"), "reason": result.get("reason"),
            "regressions": result.get("regressions", []), "seconds": round(elapsed, 1),
            "put_bid": gradients, "night": result.get("night")}


def _markdown(nights: list[dict[str, Any]], baseline: Path) -> str:
    clean = [n for n in nights if not n["planted"]]
    planted = [n for n in nights if n["planted"]]
    false_alarms = [n for n in clean if n["exit_code"] != 0]
    caught = [n for n in planted if n["exit_code"] == 1
              and all(r in n["regressions"] for r in PUT_BID)]
    failed = [n for n in nights if n["exit_code"] not in (0, 1)]
    seconds = sorted(n["seconds"] for n in nights if n["exit_code"] in (0, 1))
    shown = baseline.relative_to(ROOT) if baseline.is_relative_to(ROOT) else baseline
    lines = [
        "## Nightly regression: false alarms and a planted regression "
        "(`benchmarks/regress_nights.py`)",
        "",
        f"`linkgrad regress experiments/nightly.yaml` night after night, back to back, "
        f"alternating, against `{shown}`"
        f" (Mininet; {platform.machine()}, {os.cpu_count()} cores; "
        f"{datetime.now(UTC):%Y-%m-%d}). Planted: the testbed application with one more "
        "database round trip in PutBid (`service.extra_query: [PutBid]`, truth 3 → 4 "
        "crossings of app1↔db).",
        "",
        f"- **False alarms: {len(false_alarms)} of {len(clean)} clean nights** (goal 0 of 10)",
        f"- **Planted regression caught: {len(caught)} of {len(planted)} nights**, naming PutBid "
        "on app1->db and db->app1 (goal 10 of 10)",
        f"- Nights that failed to run (exit 3): {len(failed)}",
        f"- A night's duration (testbed up on Mininet, the suite's run, testbed down): median "
        f"{seconds[len(seconds) // 2]:.0f} s, {seconds[0]:.0f}–{seconds[-1]:.0f} s"
        if seconds else "- no night completed",
        "",
        "Least p: the smallest p-value of the night's gradient tests, before Holm's correction "
        "(a regression needs it under 0.01/12 and a change of 0.25 or more). "
        + _calibration(clean),
        "",
        "| # | application | exit | regressions | PutBid app1->db | PutBid db->app1 | least p | "
        "checks | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, n in enumerate(nights, 1):
        g = n["put_bid"]
        fwd, back = (g.get("tcp app1:0 -> db:5432"), g.get("tcp db:5432 -> app1:0"))
        what = "; ".join(n["regressions"]) or n["reason"] or "-"
        lines.append(f"| {i} | {'planted' if n['planted'] else 'as is'} | {n['exit_code']} | "
                     f"{what} | {_g(fwd)} | {_g(back)} | {_p(n['least_p'])} | {n['checks']} | "
                     f"{n['seconds']:.0f} |")
    return "\n".join(lines)


def _calibration(clean: list[dict[str, Any]]) -> str:
    """Whether the intervals are honest: with k independent tests of no change, the least p
    falls under 0.05 in 1 - 0.95^k of the nights."""
    least = [n["least_p"] for n in clean if n["least_p"] is not None]
    if not least:
        return ""
    k = max(1, round(sum(n["tests"] for n in clean) / len(clean)))
    under = sum(p < 0.05 for p in least)
    return (f"Honest intervals: on the clean nights the least of {k} p-values fell under 0.05 "
            f"in {under} of {len(least)} (expected {1 - 0.95 ** k:.0%} of them if the p-values "
            "are uniform, as they are when the intervals hold what they claim).")


def _p(x: float | None) -> str:
    return "-" if x is None else f"{x:.2g}"


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clean", type=int, default=10)
    parser.add_argument("--planted", type=int, default=10)
    parser.add_argument("--baseline", type=Path, default=SUITE.with_name("nightly.baseline.json"))
    parser.add_argument("--report", action="store_true",
                        help="only rewrite the section from the last campaign's nights.json")
    args = parser.parse_args()
    if args.report:
        nights = json.loads((OUT / "nights.json").read_text())
        update_section(SECTION, _markdown(nights, args.baseline.resolve()))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    suite, planted = _suite_copy(OUT), _planted_topology(OUT)
    order = []
    for i in range(max(args.clean, args.planted)):
        order += ([False] if i < args.clean else []) + ([True] if i < args.planted else [])
    nights = []
    for i, plant in enumerate(order, 1):
        night = _night(suite, args.baseline.resolve(), planted if plant else None)
        nights.append(night)
        print(f"night {i}/{len(order)} {'planted' if plant else 'as is'}: exit "
              f"{night['exit_code']} {night['status']} {night['regressions']} "
              f"{night['seconds']:.0f} s", flush=True)
        (OUT / "nights.json").write_text(json.dumps(nights, indent=1))
    update_section(SECTION, _markdown(nights, args.baseline.resolve()))


if __name__ == "__main__":
    main()

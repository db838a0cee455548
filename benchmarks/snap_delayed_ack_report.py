"""The RESULTS.md section of benchmarks/snap_delayed_ack.py, from what it saved (its numbers
all from the run: `--render` redoes it without running again)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from benchmarks.snap_delayed_ack_procs import BUDGET
from linkgrad.snap.classify import SnapThresholds

PAPER_ERROR_100 = 0.006  # §4.2: mean error of the application delayed on 100% of packets
PAPER_ERROR_75 = 0.2  # §4.2: |error| within this over 0.5-10 s for the 75% one
GOAL_ERROR = 0.1  # the goal
CONTROL = "one_way"  # no delayed ACK by design: its relative error says nothing


def error(d_t: float, d_s: float | None) -> float | None:
    """The paper's (d_t − d_s) / d_t; None where it has no meaning (nothing delayed)."""
    return (d_t - d_s) / d_t if d_t and d_s is not None else None


def errors(result: dict[str, Any]) -> dict[str, float | None]:
    d_t = result["truth"]["d_t"]
    return {k: error(d_t, s["d_s"]) for k, s in result["snap"].items()}


def markdown(saved: dict[str, Any]) -> str:
    env, results = saved["meta"], saved["results"]
    args = argparse.Namespace(**env["args"])
    th = SnapThresholds(**env["thresholds"])
    lines = [
        "## SNAP delayed ACK against packet traces (`benchmarks/snap_delayed_ack.py`)",
        "",
        f"Namespace pair on one veth, kernel {env['kernel']} (HZ {env['hz']}), {env['cpus']} "
        f"cores, shared; {args.duration_s:g} s per application, one sniffer per polling setting "
        "all at once (Poisson table reads with the interval pinned; `0.5 budget`: the shipped "
        "budget, which polls a problem connection down to every 50 ms), the client's packets "
        "captured at its interface (scapy, kernel timestamps). Client Nagle on, requests back "
        "to back: `two_writes` writes every 64 B request as two 32 B writes (every request "
        f"delayed, half its segments); `mixed` does so for a seeded {args.mixed_share:g} of "
        "requests, the rest in one write; `one_way` (control) sends a 32 B message every "
        "50–90 ms, no reply: the paper's footnote-9 application. d_t: share of the client's "
        f"data segments acknowledged ≥ {args.threshold_ms:g} ms after they left; d_s = Σ "
        "delayed_acks / Σ data_segs_out from the reports, under the shipped thresholds: "
        f"Table 2's rule with MaxQueuingDelay {th.max_queuing_delay_s * 1e3:g} ms flags an "
        "interval, and only there §4.2 counts (SumRTT − SampleRTT·(min_rtt + "
        f"{th.queuing_delay_s * 1e3:g} ms)) / DelayedACKTimeout "
        f"({th.delayed_ack_timeout_s * 1e3:g} ms), SumRTT ≈ srtt · data_segs_out. Error "
        "(d_t − d_s)/d_t as in Fig. 3. Paper (Windows, 200 ms delayed ACK): "
        f"{PAPER_ERROR_100} on average for its 100% application, within {PAPER_ERROR_75} for "
        f"its 75% one, polling 0.5–10 s. Goal (issue): |error| ≤ {GOAL_ERROR}.",
        "",
        "| application | d_t: segments (of N; per request) | polling s | polls | d_s | "
        "error | paper |",
        "|---|---|---|---|---|---|---|",
    ]
    short = [f"{r['app']} {k} s: {s['polls']} polls" for r in results
             for k, s in r["snap"].items() if s["polls"] < 5]
    short += [f"{r['app']}: {r['client']['requests']} requests" for r in results
              if r["client"]["requests"] < 200]
    if short:
        lines[2] += " Short of ≥ 5 polls and ≥ 200 requests: " + "; ".join(short) + "."
    for r in results:
        t, c = r["truth"], r["client"]
        per_request = f"{t['late'] / c['requests']:.2f}" if c["requests"] else "—"
        paper = {"two_writes": f"{PAPER_ERROR_100} (100% app)",
                 "mixed": f"≤ {PAPER_ERROR_75} (75% app)",
                 CONTROL: "— (control)"}.get(r["app"], "—")
        for k, e in errors(r).items():
            snap = r["snap"][k]
            lines.append(f"| {r['app']} | {t['d_t']:.3f} (of {t['data_segments']}; "
                         f"{per_request}) | {k} | {snap['polls']} | {_f(snap['d_s'])} | "
                         f"**{_f(e)}** | {paper} |")
    return "\n".join([*lines, "", *_diagnosis(results), "", _reading(results, th, env)])


def _pinned(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: s for k, s in r["snap"].items() if k != BUDGET}


def _diagnosis(results: list[dict[str, Any]]) -> list[str]:
    out = [
        "Where the error comes from (d_s, error): the shipped count on the trace's own RTT "
        "sum (one sample per segment, its ACK delay, least delay as min_rtt, the run as one "
        "interval: what an RTT tracer would give) beside srtt · data_segs_out (the reports, "
        "range over the pinned intervals); then both with DelayedACKTimeout matched to the "
        "delayed segments' mean ACK delay (and MaxQueuingDelay "
        f"{results[0]['matched']['max_queuing_delay_s'] * 1e3:g} ms, this path's; srtt: "
        "recomputed from the problem records). Beside them the RTT samples' mean, the kernel's "
        "srtt replayed from them (its time mean is what Poisson polls see), and the srtt the "
        "sniffers read at their polls.",
        "",
        "| application | d_t (threshold 10–36 ms) | trace SumRTT, shipped | srtt, shipped | "
        "trace SumRTT, matched | srtt, matched | RTT sample mean ms | replayed srtt time mean "
        "ms | srtt at polls ms | delayed mean ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        t, rep, pinned = r["truth"], r["truth"]["srtt_replay"], _pinned(r).values()
        polls = [s["srtt_poll_mean_ms"] for s in pinned if s["srtt_poll_mean_ms"]]
        by = t["d_t_by_threshold_ms"]
        out.append(
            f"| {r['app']} | {t['d_t']:.3f} ({by['10']:.3f}–{by['36']:.3f}) | "
            f"{_pair(t['d_t'], t['formula_on_trace'])} | "
            f"{_range(t['d_t'], [s['d_s'] for s in pinned])} | "
            f"{_pair(t['d_t'], t['formula_on_trace_matched'])} | "
            f"{_range(t['d_t'], [s['matched_d_s'] for s in pinned])} | "
            f"{rep['sample_mean_s'] * 1e3:.2f} | {rep['srtt_time_mean_s'] * 1e3:.2f} | "
            f"{_f(float(np.mean(polls)) if polls else None, 2)} | "
            f"{_f(t['late_mean_ms'], 1)} |")
    first = results[0]["truth"]["histogram"]
    out += ["", "ACK delays of the client's data segments (segments per bin, ms):", "",
            "| application | " + " | ".join(_bin(b) for b in first) + " |",
            "|---|" + "---|" * len(first)]
    for r in results:
        out.append(f"| {r['app']} | "
                   + " | ".join(str(b["count"]) for b in r["truth"]["histogram"]) + " |")
    return out


def _reading(results: list[dict[str, Any]], th: SnapThresholds, env: dict[str, Any]) -> str:
    """The reading, its numbers from this run."""
    by_app = {r["app"]: r for r in results}
    delayed = [r for r in results if r["app"] != CONTROL and r["truth"]["d_t"]]
    out = ["Reading."]
    if delayed:
        t = [r["truth"] for r in delayed]
        n = sum(x["data_segments"] for x in t)
        odd = sum(b["count"] for x in t for b in x["histogram"] if 3 <= b["from_ms"] < 36)
        spread = max(abs(v - x["d_t"]) for x in t
                     for k, v in x["d_t_by_threshold_ms"].items() if 10 <= float(k) <= 36)
        early99 = max(x["early_ms"]["p99"] for x in t)
        out.append(
            f"The threshold: the ACK delays fall in two modes, one under {early99:.1f} ms (99th "
            "percentile: the ACK sent at once or on the reply) and one at "
            f"{min(x['late_ms']['p1'] for x in t):.1f}–{max(x['late_ms']['p99'] for x in t):.1f}"
            f" ms (1st–99th percentile, mean {np.mean([x['late_mean_ms'] for x in t]):.1f} ms: "
            f"the delayed-ACK timer, 40 ms at HZ {env['hz']} plus up to a jiffy and timer "
            f"slack); {odd} of {n} segments lie between 3 and 36 ms (most likely the server "
            "application scheduled late on this shared machine), so any threshold from 10 to "
            f"36 ms moves d_t by at most {spread:.4f}; "
            f"{env['args']['threshold_ms']:g} ms sits in the gap.")
        same = all(s["data_segs_out"] == r["truth"]["data_segments"]
                   for r in results for s in r["snap"].values())
        records = max(abs(s["record_delayed_acks"] - s["delayed_acks"])
                      for r in results for s in r["snap"].values())
        out.append("SNAP's data_segs_out " + ("equals" if same else "differs from")
                   + " the trace's count of data segments at every setting (nothing lost by "
                   f"the capture); the problem records reproduce the reports' count to "
                   f"{records:.2g} delayed ACKs.")
        out.append(_decomposition(delayed, th))
        worst = [(abs(e), r["app"], k) for r in delayed for k, e in errors(r).items()
                 if e is not None]
        met = sum(e <= GOAL_ERROR for e, _, _ in worst)
        top = max(worst)
        out.append(
            f"The goal |error| ≤ {GOAL_ERROR} is "
            + (f"met at all {met}" if met == len(worst) else f"met at {met} of {len(worst)}")
            + " polling settings of the delayed applications "
            f"(worst {top[0]:.3f}: {top[1]} at {top[2]} s)"
            + ("." if met == len(worst) else "; it is not met."))
    if CONTROL in by_app:
        t = by_app[CONTROL]["truth"]
        most = max((s["d_s"] or 0.0) for s in by_app[CONTROL]["snap"].values())
        span = _span([t["late_ms"]["min"], t["late_ms"]["max"]], 1) if t["late"] else ""
        late = (f"; its {t['late']} late segment(s), acked after {span} ms, came back before "
                "the 40 ms timer could fire (most likely the server's read, which sends the "
                "ACK, scheduled late on this shared machine), and d_t is "
                f"{t['d_t_by_threshold_ms']['36']:.3f} at 36 ms, so the relative error, 1 where "
                "d_s is 0, means nothing here") if t["late"] else ""
        out.append(
            f"{CONTROL} (control): Linux ACKs a lone small segment at once when the reader "
            "empties the buffer of a connection not in ping-pong mode (tcp_cleanup_rbuf), so the "
            f"paper's 100% application has d_t {t['d_t']:.3f} here{late}; SNAP's d_s is at "
            f"most {most:.3f} at any polling setting: no false delayed ACKs.")
    return " ".join(out)


def _decomposition(delayed: list[dict[str, Any]], th: SnapThresholds) -> str:
    timeout_ms = th.delayed_ack_timeout_s * 1e3
    parts = []
    for r in delayed:
        t, rep = r["truth"], r["truth"]["srtt_replay"]
        low = 100 * (rep["srtt_time_mean_s"] / rep["sample_mean_s"] - 1)
        parts.append(
            f"{r['app']}: the trace's sums err {_f(error(t['d_t'], t['formula_on_trace']))} "
            f"(a delayed ACK adds {t['late_mean_ms']:.1f} ms, not {timeout_ms:g}: 1 − D/T = "
            f"{1 - t['late_mean_ms'] / timeout_ms:+.3f}; with T = D "
            f"{_f(error(t['d_t'], t['formula_on_trace_matched']))}), the srtt stand-in "
            f"{low:+.1f}% under the samples' mean, so the reports err "
            f"{_span([error(t['d_t'], s['d_s']) for s in _pinned(r).values()])} (with T = D "
            f"{_span([error(t['d_t'], s['matched_d_s']) for s in _pinned(r).values()])})")
    return (
        "The error, decomposed: the count is made where the rule flags the interval, and "
        "there charges no queuing, so on exact sums it errs only by the timeout's mismatch; "
        "the kernel's srtt spends its time below the samples' mean, since a delayed sample "
        "raises it only until the piggybacked one a fraction of a millisecond later lowers it "
        "again, which undercounts by about as much; the two offset. "
        + "; ".join(parts) + " over the pinned intervals (in mixed each srtt snapshot depends "
        "on the last few requests' random mix, and a few polls do not average it out).")


def _span(xs: list[float | None], digits: int = 3) -> str:
    vals = [x for x in xs if x is not None]
    if not vals:
        return "—"
    low, high = f"{min(vals):.{digits}f}", f"{max(vals):.{digits}f}"
    return low if low == high else f"{low}…{high}"


def _pair(d_t: float, d_s: float) -> str:
    return f"{d_s:.3f} ({_f(error(d_t, d_s))})"


def _range(d_t: float, values: list[float | None]) -> str:
    xs = [x for x in values if x is not None]
    if not xs:
        return "—"
    return (f"{min(xs):.3f}–{max(xs):.3f} ({_f(error(d_t, max(xs)))}"
            f"…{_f(error(d_t, min(xs)))})")


def _bin(b: dict[str, Any]) -> str:
    return f"{b['from_ms']:g}–{b['to_ms']:g}" if b["to_ms"] is not None else f"≥{b['from_ms']:g}"


def _f(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"

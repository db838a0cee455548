"""`linkgrad gradient` and `linkgrad plan`: their options, and what they do (read inputs,
compute, print).

The computing is in pure modules; this is the thin shell that turns arguments into inputs and
results into a table for a person or JSON for a script.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from common.command import Command
from common.errors import InputError, Problem
from common.protocol.record import InjectionRecord, load_injection_record
from coordinator.core.estimate import (
    TransactionGradient,
    gradient_json,
    log_gradients,
    rounded,
    settings_for_log,
)
from coordinator.core.spectral.binning import sampling_interval_s
from coordinator.core.spectral.planner import probe_noise
from coordinator.core.spectral.training import baseline_spectrum, choose_injection
from coordinator.core.transactions import group_by_transaction, parse_transaction_option
from coordinator.core.weblog import RequestLog, read_log

LOG_HELP = """\
web log formats: nginx (default; give your log_format with --log-format, it needs $request_time
and $msec or $time_local), apache (LogFormat with %D/%T/%{ms}T/%{us}T and %t/%{msec}t/%{usec}t),
csv (start_unix_s,response_ms,url). Files ending in .gz are read as gzip."""


def _add_log_options(p: argparse.ArgumentParser) -> None:
    """The options of `gradient` and `plan` that say which log to read and how to bin it."""
    p.add_argument("--log", required=True, metavar="FILE", help="web server access log")
    p.add_argument("--format", choices=["nginx", "apache", "csv"], default=None,
                   help="log format (default: csv for *.csv, else nginx)")
    p.add_argument("--log-format", metavar="STR", default=None,
                   help="nginx log_format or Apache LogFormat string of the log")
    p.add_argument("--transaction", action="append", default=[], metavar="NAME=REGEX",
                   help="a transaction: requests whose path+query matches REGEX (repeatable; "
                        "default: one transaction per path)")
    p.add_argument("--max-bad-fraction", type=float, default=0.05, metavar="F",
                   help="fail (exit 2) if more than this fraction of lines is malformed "
                        "(default 0.05)")
    p.add_argument("-k", type=int, default=8, help="requests per bin for the sampling interval "
                   "(thesis §3.2 step 1, default 8)")
    p.add_argument("--chunks", type=int, default=9, metavar="M",
                   help="training chunks for the baseline spectrum (default 9)")


def _gradient_arguments(p: argparse.ArgumentParser) -> None:
    _add_log_options(p)
    p.add_argument("--injection", required=True, metavar="INJECTION.json",
                   help="injection record: start, period_s, cycles, magnitude_ms [, n_bins, link]")
    p.add_argument("--n-bins", type=int, default=None, metavar="N",
                   help="bins for the thesis estimate (default: the record's, else from -k)")
    p.add_argument("--concurrent", action="append", default=[], metavar="RECORD.json",
                   help="injection record of a wave on another link during this one "
                        "(repeatable): fitted jointly, as `linkgrad run` does with concurrent: N")
    p.add_argument("--baseline-end", type=float, default=None, metavar="UNIX_S",
                   help="end of the unperturbed training data (default: the record's start; "
                        "a run's is the end of its passive phase, in plan.json 'training')")


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    _add_log_options(p)
    p.add_argument("--before", type=float, default=None, metavar="UNIX_S",
                   help="use requests before this time (default: the whole log)")
    p.add_argument("--n-bins", type=int, default=64, metavar="N",
                   help="bins per measurement window N (default 64)")
    p.add_argument("--scale-d", type=float, default=30.0, metavar="D",
                   help="thesis delay scale factor d (default 30)")
    p.add_argument("--half-width", type=float, default=0.1, metavar="H",
                   help="wanted 95%% CI half-width of the gradient (default 0.1)")
    p.add_argument("--magnitude-ms", type=float, default=None, metavar="MS",
                   help="delay you are willing to inject (default: the thesis's A_d)")


def _positive(value: float | int | None, name: str) -> None:
    if value is not None and not value > 0:
        raise InputError(Problem(f"must be positive, got {value}", field=name))


def _load_log(args: argparse.Namespace) -> tuple[RequestLog, dict[str, np.ndarray]]:
    _positive(args.k, "-k")
    _positive(args.chunks, "--chunks")
    patterns = [parse_transaction_option(t) for t in args.transaction]
    log = read_log(args.log, args.format, args.log_format, args.max_bad_fraction)
    return log, group_by_transaction(log.url, patterns)


def _malformed_json(log: RequestLog) -> dict[str, Any]:
    m = log.malformed
    return {
        "count": m.count, "total": m.total, "fraction": m.fraction,
        "examples": [{"line": line, "reason": reason} for line, reason in m.examples],
    }


def _check_record(record: InjectionRecord, n_bins: int | None, path: str) -> None:
    n = n_bins or record.n_bins
    if n is not None and n <= 2 * record.cycles:
        field = "--n-bins" if n_bins else "n_bins"
        raise InputError(Problem(
            f"{n} bins cannot resolve {record.cycles} cycles: need more than "
            f"{2 * record.cycles} (the Nyquist limit)", path if not n_bins else None, field=field))


def _partners(record: InjectionRecord, paths: list[str]) -> list[InjectionRecord]:
    """Records of waves on other links during this one (a concurrent measurement)."""
    wave, partners = record.square_wave(), []
    for path in paths:
        other = load_injection_record(path)
        w = other.square_wave()
        if w.end_s <= wave.start_s or w.start_s >= wave.end_s:
            raise InputError(Problem(
                f"does not overlap the injection ({w.start_s:.3f}-{w.end_s:.3f} against "
                f"{wave.start_s:.3f}-{wave.end_s:.3f}): not a concurrent partner", path,
                field="--concurrent"))
        partners.append(other)
    return partners


def gradient_command(args: argparse.Namespace) -> int:
    _positive(args.n_bins, "--n-bins")
    record = load_injection_record(args.injection)
    _check_record(record, args.n_bins, args.injection)
    partners = _partners(record, args.concurrent)
    if args.baseline_end is not None and args.baseline_end > record.start:
        raise InputError(Problem(
            f"{args.baseline_end} is after the injection's first edge {record.start}: the "
            "training data would hold injected requests", field="--baseline-end"))
    log, groups = _load_log(args)
    settings = settings_for_log(log.time_resolution_s, args.k, args.chunks, args.n_bins)
    results = log_gradients(log.start_s, log.response_s, groups, record.square_wave(), settings,
                            record.n_bins, baseline_end_s=args.baseline_end,
                            others=tuple(p.square_wave() for p in partners))
    if args.json:
        print(json.dumps({
            "log": {"path": args.log, "requests": len(log), "malformed": _malformed_json(log)},
            "injection": record.model_dump(),
            "concurrent": [p.model_dump() for p in partners],
            "baseline_end": args.baseline_end if args.baseline_end is not None else record.start,
            "transactions": {name: gradient_json(r) for name, r in results.items()},
        }, indent=2))
    else:
        _print_gradients(log, record, results)
    return 0


def _print_gradients(
    log: RequestLog, record: InjectionRecord, results: dict[str, TransactionGradient]
) -> None:
    console = Console()
    console.print(
        f"[bold]{len(log)}[/] requests from {log.source}"
        + (f" ({log.malformed.count} malformed lines skipped)" if log.malformed.count else "")
        + f"; injection: {record.cycles} cycles of {record.period_s:g} s, "
        f"{record.magnitude_ms:g} ms from {record.start:.3f}"
    )
    table = Table("transaction", "requests", "gradient", "95% CI", "thesis eq. 2.6", "notes")
    for name, r in sorted(results.items()):
        e = r.lockin
        table.add_row(
            name, str(r.requests),
            f"{e.gradient:.3f}" if e else "-",
            f"[{e.ci[0]:.3f}, {e.ci[1]:.3f}]" if e else "-",
            f"{r.thesis.gradient:.3f}" if r.thesis else "-",
            "; ".join(r.notes),
        )
    console.print(table)


def _plan_one(t: np.ndarray, y: np.ndarray, end: float, args: argparse.Namespace) -> dict[str, Any]:
    bin_s = sampling_interval_s(t, args.k)
    spectrum = baseline_spectrum(t, y, end, bin_s, args.n_bins, args.chunks)
    choice = choose_injection(spectrum, args.scale_d)
    magnitude_s = args.magnitude_ms / 1e3 if args.magnitude_ms else choice.magnitude_s
    probe = probe_noise(t, y, end, choice.period_s, choice.k_d)
    cycles = probe.cycles_for(args.half_width, magnitude_s)
    return {
        "training": {
            "bin_s": rounded(bin_s), "n_bins": args.n_bins, "chunks": spectrum.chunks,
            "k_d": choice.k_d, "period_s": rounded(choice.period_s, 3),
            "frequency_hz": rounded(1 / choice.period_s, 6),
            "magnitude_ms": rounded(choice.magnitude_s * 1e3, 3),
        },
        "lockin": {
            "period_s": rounded(probe.period_s, 3), "cycles": probe.cycles,
            "se_ms": rounded(probe.se_s * 1e3, 4),
            "sham_rms_ms": rounded(probe.empirical_s * 1e3, 4),
            "shams": probe.shams,
            "magnitude_ms": rounded(magnitude_s * 1e3, 3),
            "half_width_at_magnitude": rounded(probe.half_width(magnitude_s)),
            "magnitude_ms_for_half_width": rounded(probe.magnitude_for(args.half_width) * 1e3, 3),
            "cycles_for_half_width": cycles,
            "duration_s_for_half_width": rounded(cycles * probe.period_s, 1),
        },
    }


def plan_command(args: argparse.Namespace) -> int:
    _positive(args.n_bins, "--n-bins")
    _positive(args.half_width, "--half-width")
    _positive(args.scale_d, "--scale-d")
    _positive(args.magnitude_ms, "--magnitude-ms")
    log, groups = _load_log(args)
    end = args.before if args.before is not None else float(log.start_s.max()) + 1e-6
    plans: dict[str, Any] = {}
    for name, rows in groups.items():
        t, y = log.start_s[rows], log.response_s[rows]
        before = t < end
        try:
            plans[name] = _plan_one(t[before], y[before], end, args)
        except ValueError as e:
            plans[name] = {"error": str(e)}
    if args.json:
        print(json.dumps({"log": {"path": args.log, "requests": len(log)},
                          "half_width": args.half_width, "transactions": plans}, indent=2))
    else:
        _print_plans(plans, args.half_width)
    return 0


def _print_plans(plans: dict[str, Any], half_width: float) -> None:
    table = Table("transaction", "bin s", "k_d", "period s", "thesis A_d ms",
                  f"ms for ±{half_width:g}", "cycles at A_d", "duration s")
    for name, p in sorted(plans.items()):
        if "error" in p:
            table.add_row(name, "-", "-", "-", "-", "-", "-", p["error"])
            continue
        tr, lk = p["training"], p["lockin"]
        table.add_row(name, f"{tr['bin_s']:.3g}", str(tr["k_d"]), f"{tr['period_s']:.1f}",
                      f"{tr['magnitude_ms']:.2f}", f"{lk['magnitude_ms_for_half_width']:.2f}",
                      str(lk["cycles_for_half_width"]), f"{lk['duration_s_for_half_width']:.0f}")
    Console().print(table)


COMMANDS = (
    Command("gradient", "link gradient per transaction from a web log and an injection record",
            "Estimate each transaction's link gradient from a web log recorded during a "
            "square-wave injection. Requests before the record's start are the training data. "
            "Prints our estimate with its 95% CI and the thesis's eq. 2.6.",
            _gradient_arguments, gradient_command, epilog=LOG_HELP),
    Command("plan", "plan an injection from training data: frequency, delay, duration",
            "From unperturbed requests alone: the thesis's training phase (bin size, quietest "
            "frequency, delay A_d = d·σ(FFT⁰)) and, for our estimator, the delay or the number "
            "of cycles a wanted CI half-width needs.",
            _plan_arguments, plan_command, epilog=LOG_HELP),
)

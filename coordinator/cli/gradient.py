"""`linkgrad gradient`: its options, and what it does (read inputs, compute, print); the log
options and checks `linkgrad plan` shares.

The computing is in pure modules; this is the thin shell that turns arguments into inputs and
results into a table for a person or JSON for a script.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from rich.markup import escape

from coordinator.cli.answer import Answer, absent_when_none
from coordinator.cli.catalog import LOG_HELP
from coordinator.cli.command import Command
from coordinator.cli.options import add_log_reading
from coordinator.cli.terminal import names_table, terminal
from coordinator.cli.times import local_time, time_value
from coordinator.config.bounds import FIRST_LOG_S, LAST_LOG_S
from coordinator.config.experiment import MAX_K
from coordinator.config.run_records import BaselineFile
from linkgrad.errors import InputError, Problem
from linkgrad.protocol.record import InjectionRecord, load_injection_record
from linkgrad.spectral.binning import MAX_BINS
from linkgrad.spectral.estimate import (
    MAX_CHUNKS,
    TransactionGradient,
    log_gradients,
    settings_for_log,
)
from linkgrad.spectral.result import GradientResult
from linkgrad.square_wave import SquareWave
from linkgrad.transactions import group_by_transaction, parse_transaction_option
from linkgrad.watch import response_baselines
from linkgrad.weblog import RequestLog, read_log


def add_log_options(p: argparse.ArgumentParser) -> None:
    """The options of `gradient` and `plan` that say which log to read and how to bin it."""
    p.add_argument("--log", required=True, metavar="FILE", help="web server access log")
    add_log_reading(p)
    p.add_argument("--max-bad-fraction", type=float, default=0.05, metavar="F",
                   help="fail (exit 2) if more than this fraction of lines is malformed "
                        "(default 0.05)")
    p.add_argument("-k", type=int, default=8, help="requests per bin for the sampling interval "
                   "(thesis §3.2 step 1, default 8)")
    p.add_argument("--chunks", type=int, default=9, metavar="M",
                   help="training chunks for the baseline spectrum (default 9)")


def _gradient_arguments(p: argparse.ArgumentParser) -> None:
    add_log_options(p)
    p.add_argument("--injection", required=True, metavar="INJECTION.json",
                   help="injection record: start, period_s, cycles, magnitude_ms [, n_bins, link]")
    p.add_argument("--n-bins", type=int, default=None, metavar="N",
                   help="bins for the thesis estimate (default: the record's, else from -k)")
    p.add_argument("--concurrent", action="append", default=[], metavar="RECORD.json",
                   help="injection record of a wave on another link during this one "
                        "(repeatable): fitted jointly, as `linkgrad run` does with concurrent: N")
    p.add_argument("--baseline-end", type=time_value, default=None, metavar="TIME",
                   help="end of the unperturbed training data, unix seconds or ISO 8601 "
                        "(default: the record's start; a run's is the end of its passive "
                        "phase, in plan.json 'training')")


def check_positive(value: float | int | None, name: str, at_most: float = math.inf,
              why: str = "") -> None:
    if value is not None and not 0 < value <= at_most:
        limit = f" and at most {at_most:g}{why}" if at_most < math.inf else ""
        raise InputError(Problem(f"must be positive{limit}, got {value}", field=name))


AS_FILE = " (as in an experiment file)"


def check_log_time(value: float | None, name: str) -> None:
    """A unix time compared with a web log's: one no log line can hold is a mistake (ms for s,
    a date typed wrong), and 1e300 would put billions of bins between it and the requests."""
    if value is not None and not FIRST_LOG_S <= value <= LAST_LOG_S:
        raise InputError(Problem(f"must be a unix time from {FIRST_LOG_S:.0f} (1970) to "
                                 f"{LAST_LOG_S:.0f} (9999), as a web log's, got {value}",
                                 field=name))


def load_log(args: argparse.Namespace) -> tuple[RequestLog, dict[str, np.ndarray]]:
    check_positive(args.k, "-k", MAX_K, AS_FILE)
    check_positive(args.chunks, "--chunks", MAX_CHUNKS)
    patterns = [parse_transaction_option(t) for t in args.transaction]
    log = read_log(args.log, args.format, args.log_format, args.max_bad_fraction)
    return log, group_by_transaction(log.url, patterns)


class BadLine(Answer):
    line: int
    reason: str


class Malformed(Answer):
    """The log's lines that are no request: how many, why, the first few."""

    count: int
    total: int
    fraction: float
    by_reason: dict[str, int]
    examples: list[BadLine]

    @classmethod
    def of(cls, log: RequestLog) -> Malformed:
        m = log.malformed
        return cls(count=m.count, total=m.total, fraction=m.fraction,
                   by_reason=dict(m.by_reason),
                   examples=[BadLine(line=line, reason=reason) for line, reason in m.examples])


class LogRead(Answer):
    """The log a command read, and what of it was used."""

    path: str
    requests: int
    training_requests: int | None = absent_when_none()  # linkgrad plan: before --before
    malformed: Malformed
    unused: dict[str, int] | None = absent_when_none()  # linkgrad gradient: by reason


class GradientAnswer(Answer):
    log: LogRead
    injection: InjectionRecord
    concurrent: list[InjectionRecord]  # waves on other links meanwhile, fitted with it
    baseline_end: float  # the training data ends here (unix s)
    transactions: dict[str, GradientResult]
    # each transaction's response times before baseline_end (a run's baseline.json): the
    # current means `predict`, `place` and `route` start from when given this answer
    baseline: BaselineFile


def _check_record(record: InjectionRecord, n_bins: int | None, path: str) -> None:
    n = n_bins or record.n_bins
    field = "--n-bins" if n_bins else "n_bins"
    where = path if not n_bins else None
    if n is not None and n <= 2 * record.cycles:
        raise InputError(Problem(
            f"{n} bins cannot resolve {record.cycles} cycles: need more than "
            f"{2 * record.cycles} (the Nyquist limit)", where, field=field))
    if n is not None and n > MAX_BINS:
        raise InputError(Problem(f"{n} bins is over the limit of {MAX_BINS}", where, field=field))


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
    check_positive(args.n_bins, "--n-bins")
    check_log_time(args.baseline_end, "--baseline-end")
    record = load_injection_record(args.injection)
    _check_record(record, args.n_bins, args.injection)
    partners = _partners(record, args.concurrent)
    if args.baseline_end is not None and args.baseline_end > record.start:
        raise InputError(Problem(
            f"{args.baseline_end} is after the injection's first edge {record.start}: the "
            "training data would hold injected requests", field="--baseline-end"))
    log, groups = load_log(args)
    wave = record.square_wave()
    settings = settings_for_log(log.time_resolution_s, args.k, args.chunks, args.n_bins)
    results = log_gradients(log.start_s, log.response_s, groups, wave, settings,
                            record.n_bins, baseline_end_s=args.baseline_end,
                            others=tuple(p.square_wave() for p in partners))
    baseline_end = args.baseline_end if args.baseline_end is not None else record.start
    unused = unused_requests(log.start_s, groups, wave, baseline_end, bool(args.transaction))
    _refuse_without_estimates(log, wave, results, args.injection)
    if args.json:
        print(GradientAnswer(
            log=LogRead(path=args.log, requests=len(log), malformed=Malformed.of(log),
                        unused=unused),
            injection=record, concurrent=partners, baseline_end=baseline_end,
            transactions={name: GradientResult.of(r) for name, r in results.items()},
            baseline=_baseline(log, groups, baseline_end),
        ).json_text(note=False))
    else:
        _print_gradients(log, record, results, unused)
    return 0


def _baseline(log: RequestLog, groups: dict[str, np.ndarray], end: float) -> BaselineFile:
    """Each transaction's requests that started before `end`: their mean response time."""
    before = log.start_s < end
    first = float(log.start_s[before].min()) if before.any() else end
    return BaselineFile.of(response_baselines({
        name: (log.start_s[rows][before[rows]], log.response_s[rows][before[rows]])
        for name, rows in groups.items()}), first, end)


def unused_requests(
    t: np.ndarray, groups: dict[str, np.ndarray], wave: SquareWave, baseline_end: float,
    by_pattern: bool,
) -> dict[str, int]:
    """Requests that parsed but no estimate uses, counted by reason (nonzero counts only).

    Used are: the training data (before `baseline_end`) and the window (the off half before
    the first edge to the end of the last cycle), of the requests in some transaction.
    """
    in_some = np.zeros(len(t), dtype=bool)
    for rows in groups.values():
        in_some[rows] = True
    after = t >= wave.end_s
    between = (t >= baseline_end) & (t < wave.start_s - wave.half_s)
    counts = {
        "in no transaction": int(np.sum(~in_some)) if by_pattern else 0,
        "after the injection": int(np.sum(in_some & after)),
        "between the training data and the injection": int(np.sum(in_some & between)),
    }
    return {reason: n for reason, n in counts.items() if n}


def _refuse_without_estimates(
    log: RequestLog, wave: SquareWave, results: dict[str, TransactionGradient], injection: str
) -> None:
    """Exit 2 when no transaction has an estimate: the log cannot answer for this injection
    (the wrong log or record, a log that ends early...). Some without one get a note."""
    if any(r.lockin is not None or r.thesis is not None for r in results.values()):
        return
    when = f"{local_time(wave.start_s)} to {local_time(wave.end_s)}"
    if len(log) and not np.any((log.start_s >= wave.start_s) & (log.start_s < wave.end_s)):
        span = f"{local_time(float(log.start_s.min()))} to {local_time(float(log.start_s.max()))}"
        message = (f"no request started during the injection of {injection} ({when}); the "
                   f"log's requests start from {span}: the log or the record is not this "
                   "run's")
    else:
        reasons = "; ".join(f"{name}: {', '.join(r.notes)}" for name, r in
                            sorted(results.items())[:5]) or "no transaction"
        message = (f"no transaction has an estimate for the injection of {injection} "
                   f"({when}): {reasons}")
    raise InputError(Problem(message, file=log.source))


def _print_gradients(
    log: RequestLog, record: InjectionRecord, results: dict[str, TransactionGradient],
    unused: dict[str, int],
) -> None:
    console = terminal()
    console.print(
        f"[bold]{len(log)}[/] requests from {escape(log.source)}; injection: "
        f"{record.cycles} cycles of {record.period_s:g} s, {record.magnitude_ms:g} ms from "
        f"{local_time(record.start)}",
        highlight=False, soft_wrap=True,
    )
    for line in _not_used_lines(log, unused):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    table = names_table("transaction", results, "requests", "gradient", "95% CI",
                        "thesis eq. 2.6", "notes")
    notes: list[str] = []  # under the table, numbered: a column of prose is 12 wide
    for name, r in sorted(results.items()):
        e = r.lockin
        marks = []
        for note in r.notes:
            if note not in notes:
                notes.append(note)
            marks.append(f"[{notes.index(note) + 1}]")
        table.add_row(
            escape(name), str(r.requests),
            f"{e.gradient:.3f}" if e else "-",
            f"[{e.ci[0]:.3f}, {e.ci[1]:.3f}]" if e else "-",
            f"{r.thesis.gradient:.3f}" if r.thesis else "-",
            escape(" ".join(marks)),
        )
    console.print(table)
    for i, note in enumerate(notes, start=1):
        console.print(escape(f"[{i}] {note}"), highlight=False)


def _not_used_lines(log: RequestLog, unused: dict[str, int]) -> list[str]:
    """What the estimates leave out, so a partial answer never looks complete."""
    m = log.malformed
    lines = []
    if m.count:
        reasons = ", ".join(f"{n} {reason}" for reason, n in m.by_reason)
        first = ", ".join(str(line) for line, _ in m.examples)
        lines.append(f"{m.count} of {m.total} lines malformed, not used ({reasons}; first: "
                     f"lines {first})")
    if unused:
        lines.append("requests not used: " + ", ".join(f"{n} {r}" for r, n in unused.items()))
    return lines


EXAMPLE = ("linkgrad gradient --log experiments/example/access.log.gz --log-format "
           '"$(cat experiments/example/log_format.txt)" '
           "--injection experiments/example/injection.json")

COMMANDS = (
    Command("gradient", "link gradient per transaction from a web log and an injection record",
            "Estimate each transaction's link gradient from a web log recorded during a "
            "square-wave injection. Requests before the record's start are the training data. "
            "Prints our estimate with its 95% CI and the thesis's eq. 2.6.",
            _gradient_arguments, gradient_command, epilog=LOG_HELP,
            example=EXAMPLE),
)

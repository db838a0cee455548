"""`linkgrad plan`: the square wave a run would plan from a log's unperturbed requests.

One code with the run: the options become an experiment's `parameters` (validated alike), the
log's training requests go through `wave_plan.plan_wave`, and the answer is what the run
writes to `plan.json`.
"""

from __future__ import annotations

import argparse
import math
import re

from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from coordinator.cli.answer import Answer
from coordinator.cli.command import Command
from coordinator.cli.gradient import (
    AS_FILE,
    LOG_HELP,
    LogRead,
    Malformed,
    add_log_options,
    check_log_time,
    check_positive,
)
from coordinator.cli.terminal import terminal
from coordinator.cli.times import local_time, time_value
from coordinator.config.experiment import (
    MAX_DELAY_MS,
    MAX_HALF_WIDTH,
    MAX_K,
    MAX_SCALE_D,
    Parameters,
)
from coordinator.config.run_records import PlanFile
from linkgrad.errors import InputError, Problem
from linkgrad.spectral.binning import MAX_BINS
from linkgrad.spectral.estimate import MAX_CHUNKS
from linkgrad.spectral.wave_plan import PlanBeyondCap, Precision, plan_wave
from linkgrad.transactions import parse_transaction_option
from linkgrad.watch import failed_fraction, training_requests
from linkgrad.weblog import read_log

# option -> the experiment's parameter it sets
OPTIONS = {"k": "-k", "chunks": "--chunks", "n_bins": "--n-bins", "scale_d": "--scale-d",
           "half_width": "--half-width", "magnitude_ms": "--magnitude-ms",
           "cycles": "--cycles", "period_s": "--period-s",
           "max_duration_s": "--max-duration-s"}


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    add_log_options(p)
    p.add_argument("--before", type=time_value, default=None, metavar="TIME",
                   help="plan from the requests before this time, unix seconds or ISO 8601 "
                   "(default: the whole log)")
    p.add_argument("--half-width", default="10%", metavar="H",
                   help="wanted 95%% CI half-width of a gradient: '10%%' of it (the default; "
                        "±0.1 below 1) or a number in gradient units")
    p.add_argument("--n-bins", type=int, default=None, metavar="N",
                   help="bins per window for the period's choice (default: a run's, 32)")
    p.add_argument("--scale-d", type=float, default=None, metavar="D",
                   help="the thesis's delay scale factor d (default: a run's, 30)")
    p.add_argument("--magnitude-ms", type=float, default=None, metavar="MS",
                   help="fix the delay (default: adaptive, 1 ms first, as a run)")
    p.add_argument("--cycles", type=int, default=None, metavar="N",
                   help="fix the cycles (default: as many as the half-width needs)")
    p.add_argument("--period-s", type=float, default=None, metavar="S",
                   help="fix the period (default: the quietest frequency of the spectrum)")
    p.add_argument("--max-duration-s", type=float, default=None, metavar="S",
                   help="cap on one link's measurement (default: a run's, 900)")


def _half_width(text: str) -> Precision:
    """'10%' or a number in gradient units, as an experiment's `half_width`."""
    try:
        if text.strip().endswith("%"):
            return Precision.parse(text)
        value = float(text)
    except ValueError as e:
        raise InputError(Problem(f"expected a percentage like '10%' or a positive number: {e}",
                                 field="--half-width")) from e
    check_positive(value, "--half-width", MAX_HALF_WIDTH, AS_FILE)
    return Precision(value, relative=False)


def parameters(args: argparse.Namespace) -> Parameters:
    """The options as a run's parameters: the same bounds, named by option."""
    check_positive(args.k, "-k", MAX_K, AS_FILE)
    check_positive(args.chunks, "--chunks", MAX_CHUNKS)
    check_positive(args.n_bins, "--n-bins", MAX_BINS)
    check_positive(args.scale_d, "--scale-d", MAX_SCALE_D, AS_FILE)
    check_positive(args.magnitude_ms, "--magnitude-ms", MAX_DELAY_MS, AS_FILE)
    given = {"k": args.k, "chunks": args.chunks, "n_bins": args.n_bins,
             "scale_d": args.scale_d, "half_width": _half_width(args.half_width),
             "magnitude_ms": args.magnitude_ms, "cycles": args.cycles,
             "period_s": args.period_s, "max_duration_s": args.max_duration_s}
    try:
        return Parameters(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as e:
        raise InputError([Problem(err["msg"].removeprefix("Value error, "),
                                  field=_option(err["loc"], err["msg"]))
                          for err in e.errors()]) from e


def _option(loc: tuple[int | str, ...], message: str) -> str | None:
    """The option a parameter's error is about: its own field's, or (a check across fields,
    such as the delay against max_delay_ms) the first option its message names."""
    if loc:
        return OPTIONS.get(str(loc[0]), str(loc[0]))
    named = [o for f, o in OPTIONS.items() if re.search(rf"\b{f}\b", message)]
    return named[0] if named else None


def plan_command(args: argparse.Namespace) -> int:
    check_log_time(args.before, "--before")
    p = parameters(args)
    patterns = [parse_transaction_option(t) for t in args.transaction]
    log = read_log(args.log, args.format, args.log_format, args.max_bad_fraction)
    end = args.before if args.before is not None else float(log.start_s.max()) + 1e-6
    before = log.start_s < end
    # the run's own reading of its passive phase: every request before the end
    by_tx = training_requests(log, patterns, float(log.start_s.min()), end)
    training = int(before.sum())
    try:
        wave = plan_wave(by_tx, end, p)
    except ArithmeticError as e:  # e.g. --half-width 1e-300: cycles beyond any number
        raise InputError(Problem(f"the options give numbers out of range ({e})",
                                 field="--half-width")) from e
    except PlanBeyondCap as e:
        raise InputError(Problem(str(e), field="--max-duration-s")) from e
    except ValueError as e:  # too few requests
        raise InputError(Problem(
            f"no transaction can be planned from the {training} requests before "
            f"{'--before ' if args.before is not None else 'the end of the log '}"
            f"{local_time(end)} ({e})", str(args.log),
            field="--before" if args.before is not None else None)) from e
    start = float(log.start_s[before].min())
    plan = PlanFile.of(wave, p.half_width, (start, end),
                       training / (end - start) if end > start else None,
                       failed_fraction(log, start, end))
    if args.json:
        print(PlanAnswer(log=LogRead(path=args.log, requests=len(log),
                                     training_requests=training, malformed=Malformed.of(log)),
                         plan=plan).json_text(note=False))
    else:
        _print_plan(plan, {name: len(t) for name, (t, _) in by_tx.items()}, p)
    return 0


class PlanAnswer(Answer):
    log: LogRead
    plan: PlanFile  # as the run writes plan.json


def _print_plan(plan: PlanFile, requests: dict[str, int], p: Parameters) -> None:
    console = terminal()
    adaptive = p.magnitude_ms is None
    delay = (f"first delay {plan.magnitude_ms:g} ms, grown until a rough gradient sizes it"
             if adaptive else f"delay {plan.magnitude_ms:g} ms")
    console.print(f"period {plan.period_s:.1f} s, {plan.cycles} cycles "
                  f"({plan.period_s * plan.cycles:.0f} s a link), {delay}")
    for note in plan.notes:
        console.print(f"  {escape(note)}")
    relative = p.half_width.relative
    wanted = (f"effect ms for ±{p.half_width}" if relative
              else f"delay ms for ±{p.half_width}")
    table = Table("transaction", "requests", "effect noise ms (95%)", "effect cap ms", wanted)
    for name in sorted(requests):
        noise = plan.effect_noise_ms.get(name)
        cap = plan.effect_cap_ms.get(name)
        need = None if noise is None else noise / p.half_width.value
        table.add_row(escape(name), str(requests[name]), _ms(noise), _ms(cap), _ms(need))
    console.print(table)
    console.print("a gradient g shows as an effect g × delay: the run sizes each link's delay "
                  "from a rough gradient, keeping every effect under its cap")


def _ms(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.3g}"


EXAMPLE = ("linkgrad plan --log experiments/example/access.log.gz --log-format "
           '"$(cat experiments/example/log_format.txt)"')

COMMANDS = (
    Command("plan", "the square wave a run would plan from a log: period, cycles, delay",
            "From unperturbed requests alone, the plan `linkgrad run` makes at the end of its "
            "passive phase: the period (the quietest frequency of the spectrum), the cycles a "
            "wanted CI half-width needs with each transaction's effect under its own spread, "
            "and the delay (adaptive from 1 ms, or fixed). --json gives the run's plan.json "
            "as `plan`.",
            _plan_arguments, plan_command, epilog=LOG_HELP, example=EXAMPLE),
)

"""The `linkgrad` command line: parses arguments, calls the pure pieces, prints text or JSON.

Exit codes (DESIGN.md): 0 success, 2 bad input (file, line, field named), 1 runtime failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from common.errors import InputError, LinkgradError, Problem
from coordinator.cli.gradient import gradient_command, plan_command
from coordinator.cli.latency import add_latency_parser
from coordinator.cli.place import add_place_parser
from coordinator.cli.predict import add_predict_parser
from coordinator.cli.route import add_route_parser
from coordinator.cli.run import add_run_parser
from injector.cli import add_inject_parser
from testbed.cli import add_testbed_parser

DESCRIPTION = """\
linkgrad measures how much each transaction's mean response time depends on the latency of
each network link (the link gradient), by injecting small square-wave delays and reading the
response times the web server already logs."""

LOG_HELP = """\
web log formats: nginx (default; give your log_format with --log-format, it needs $request_time
and $msec or $time_local), apache (LogFormat with %D/%T/%{ms}T/%{us}T and %t/%{msec}t/%{usec}t),
csv (start_unix_s,response_ms,url). Files ending in .gz are read as gzip."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as InputError (exit 2, one message format)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(Problem(message))


def _add_log_options(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="linkgrad", description=DESCRIPTION, epilog=LOG_HELP,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=summary, description=description, epilog=LOG_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        _add_log_options(p)
        return p

    g = command(
        "gradient", "link gradient per transaction from a web log and an injection record",
        "Estimate each transaction's link gradient from a web log recorded during a "
        "square-wave injection. Requests before the record's start are the training data. "
        "Prints our estimate with its 95% CI and the thesis's eq. 2.6.")
    g.add_argument("--injection", required=True, metavar="INJECTION.json",
                   help="injection record: start, period_s, cycles, magnitude_ms [, n_bins, link]")
    g.add_argument("--n-bins", type=int, default=None, metavar="N",
                   help="bins for the thesis estimate (default: the record's, else from -k)")
    g.add_argument("--concurrent", action="append", default=[], metavar="RECORD.json",
                   help="injection record of a wave on another link during this one "
                        "(repeatable): fitted jointly, as `linkgrad run` does with concurrent: N")
    g.add_argument("--baseline-end", type=float, default=None, metavar="UNIX_S",
                   help="end of the unperturbed training data (default: the record's start; "
                        "a run's is the end of its passive phase, in plan.json 'training')")
    g.set_defaults(run=gradient_command)

    p = command(
        "plan", "plan an injection from training data: frequency, delay, duration",
        "From unperturbed requests alone: the thesis's training phase (bin size, quietest "
        "frequency, delay A_d = d·σ(FFT⁰)) and, for our estimator, the delay or the number "
        "of cycles a wanted CI half-width needs.")
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
    p.set_defaults(run=plan_command)
    add_inject_parser(sub)
    add_testbed_parser(sub)
    add_run_parser(sub)
    add_predict_parser(sub)
    add_latency_parser(sub)
    add_place_parser(sub)
    add_route_parser(sub)
    return parser


def _print_error(error: LinkgradError, as_json: bool) -> None:
    kind = "input" if isinstance(error, InputError) else "runtime"
    if as_json:
        print(json.dumps({"error": {"kind": kind, "message": str(error)}}))
    print(f"linkgrad: error: {error}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
        run: Callable[[argparse.Namespace], int] = args.run
        return run(args)
    except LinkgradError as e:
        _print_error(e, as_json)
        return e.exit_code
    except KeyboardInterrupt:
        print("linkgrad: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

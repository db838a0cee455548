"""`linkgrad paths EXPERIMENT.yaml --duration 60 [--output-trace FILE] [--json]` (passive: every
host's TCP messages captured while the experiment's workload runs) and `linkgrad paths
--trace FILE [--web-log LOG]` (offline, on a saved trace): WAP5's causal paths, their
patterns, per-hop node and network delays, and each link's crossings on the critical path."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from coordinator.cli.command import EXITS, Command
from coordinator.cli.options import add_log_reading, add_output, old_spelling
from coordinator.cli.paths_text import pattern_lines
from coordinator.cli.profile import check_between
from coordinator.cli.terminal import terminal
from coordinator.cli.traces_out import otlp_dry_run, send_request_traces
from coordinator.config.experiment_file import load_experiment
from coordinator.config.pcap_trace import (
    AmbiguousAddress,
    PcapRead,
    PcapSource,
    parse_pcap_option,
    read_pcap,
)
from coordinator.config.run_dir import RunDir
from coordinator.config.strict_json import dumps
from coordinator.config.trace_file import read_trace, write_trace
from coordinator.export.otlp import check_endpoint
from coordinator.live.paths_evidence import host_traces, web_log_now
from coordinator.live.session import Session, check_local_files, observe
from linkgrad.errors import InputError, Problem
from linkgrad.paths.analysis import DEFAULT_BUDGET, LINKERS
from linkgrad.paths.budget import linking_lines, progress_line
from linkgrad.paths.candidates import TraceTooLong
from linkgrad.paths.from_hosts import link_hosts, paths_of
from linkgrad.paths.reconcile import HostTrace
from linkgrad.paths.result import PathsResult
from linkgrad.protocol.trace import TraceRequest
from linkgrad.transactions import parse_transaction_option
from linkgrad.weblog import read_log

MAX_DURATION_S = 86400.0
MAX_TRANSACTIONS_SHOWN = 10


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", type=Path, nargs="?",
                   help="experiment YAML: its hosts, ssh settings, workload, and web log (its "
                   "requests grouped by transaction); not with --trace or --pcap")
    p.add_argument("--trace", type=Path, metavar="FILE",
                   help="analyse a trace saved by --output-trace instead of capturing one")
    p.add_argument("--pcap", action="append", default=[], metavar="HOST=FILE",
                   help="analyse packet captures taken on the hosts (tcpdump -i any -w FILE, "
                   "or Wireshark's pcap/pcapng), one per host, instead of capturing "
                   "(repeatable); nodes are the hosts: a capture has no processes. "
                   "HOST@ADDRESS[,ADDRESS]=FILE names the host's own addresses where the "
                   "packets cannot (a host that talked to one peer only)")
    p.add_argument("--exclude-port", type=int, action="append", default=None, metavar="PORT",
                   help="with --pcap: leave out this port's TCP traffic (repeatable; default "
                   "22: ssh, as a capture by linkgrad leaves out its own)")
    p.add_argument("--web-log", type=Path, metavar="LOG",
                   help="with --trace or --pcap: the front end's access log over the capture, "
                   "to group the requests by transaction as a live capture does")
    add_log_reading(p, "--web-log")
    p.add_argument("--duration", type=float, default=60.0, metavar="S",
                   help="seconds to capture (default 60; Ctrl-C ends it early and keeps what "
                   "was seen)")
    p.add_argument("--report-interval", type=float, default=1.0, metavar="S",
                   help="seconds between each host's batches of messages (default 1)")
    p.add_argument("--linker", choices=sorted(LINKERS), default="context",
                   help="context: WAP5's timing within each node's open requests (default); "
                   "wap5: the paper's §5.1 as it is; fcfs: each call to the oldest open request")
    p.add_argument("--window-s", type=float, default=2.0, metavar="S",
                   help="the longest delay between a message and the one it causes (WAP5's x, "
                   "an experiment's paths.window_s; default 2)")
    old_spelling(p, "--window", "--window-s", "window_s", type=float)
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET, metavar="F",
                   help="linking takes at most this fraction of the capture's duration "
                   f"(default {DEFAULT_BUDGET:g}: 6 s for a minute); a node over its share is "
                   "linked greedily, then by §5.1, and the output says so")
    p.add_argument("--output-trace", type=Path, metavar="FILE",
                   help="also write the trace (captured, or read from --pcap captures: JSON "
                   "lines) for --trace later (the web log is not in it: give --web-log then)")
    old_spelling(p, "--save-trace", "--output-trace", "output_trace", type=Path)
    add_output(p, "write the analysis as JSON", old="--save")
    p.add_argument("--otlp", metavar="URL",
                   help="also send every request's tree as an OpenTelemetry trace over OTLP/HTTP "
                   "to this base endpoint (http://COLLECTOR:4318; /v1/traces is appended); "
                   "the OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates) apply")
    p.add_argument("--dry-run", action="store_true",
                   help="with --otlp: print the traces as OTLP/JSON on stdout, send nothing")


def _check(args: argparse.Namespace) -> None:
    if sum((args.trace is not None, args.experiment is not None, bool(args.pcap))) != 1:
        raise InputError(Problem("give an experiment to capture from, --trace FILE to analyse "
                                 "a saved trace, or --pcap HOST=FILE for captures (one of "
                                 "them)", field="experiment"))
    if args.exclude_port is not None and not args.pcap:
        raise InputError(Problem("only with --pcap", field="--exclude-port"))
    for port in args.exclude_port or ():
        check_between(port, 1, 65535, "--exclude-port", unit="")
    check_between(args.duration, 1.0, MAX_DURATION_S, "--duration")
    check_between(args.report_interval, 0.1, 3600, "--report-interval")
    check_between(args.window_s, 0.001, 3600, "--window-s")
    check_between(args.budget, 0.001, 100, "--budget")
    if args.web_log is not None and args.experiment is not None:
        raise InputError(Problem("only with --trace or --pcap (a capture reads its "
                                 "experiment's web log)", field="--web-log"))
    for option, given in (("--format", args.format is not None),
                          ("--log-format", args.log_format is not None),
                          ("--transaction", bool(args.transaction))):
        if given and args.web_log is None:
            raise InputError(Problem("only with --web-log LOG", field=option))
    if args.dry_run and args.otlp is None:
        raise InputError(Problem("only with --otlp URL", field="--dry-run"))
    if args.otlp is not None:  # before a capture, not after it
        args.otlp_traces_url = check_endpoint(args.otlp, "--otlp")


def paths_command(args: argparse.Namespace) -> int:
    _check(args)
    console = terminal(stderr=True)
    problems: list[str] = []
    session = None
    log, transactions = None, None
    if args.experiment is None:
        hosts = list(read_trace(args.trace)) if args.trace is not None else \
            _read_pcaps(args, console)
        if args.web_log is not None:
            patterns = [parse_transaction_option(t) for t in args.transaction]
            log = read_log(args.web_log, args.format, args.log_format)
            transactions = {t.name: t.regex.pattern for t in patterns}
    else:
        hosts, problems, session = _capture(args, console)
    if args.output_trace:  # (of captures too: a trace to link again without reading them)
        write_trace(args.output_trace, hosts)
    # progress on stderr, where --json leaves it silent
    progress = None if args.json else lambda g: console.print(escape(progress_line(g)))
    # the requests the web log saw during the capture, by transaction (none offline)
    if session is not None:
        log, transactions = web_log_now(session), session.experiment.transactions
    try:
        linked = link_hosts(hosts, args.linker, args.window_s, args.budget, log, transactions,
                            progress=progress)
    except TraceTooLong as e:
        given = args.trace or ", ".join(args.pcap) or args.experiment
        raise InputError(Problem(str(e), str(given))) from e
    result = replace(paths_of(linked, args.linker, args.window_s), problems=tuple(problems),
                     at=time.time())
    if args.output:
        RunDir(args.output.parent).write(args.output.name, result.as_json())
    if args.otlp is not None and args.dry_run:
        print(dumps(otlp_dry_run(linked), indent=None, note=False))  # a body for curl -d
        return 0 if not problems else 1
    if args.json:
        print(dumps(result.as_json()))
    else:
        _print(console, result)
    if args.otlp is not None:  # after the answer: a collector that is down loses no analysis
        said = send_request_traces(args.otlp_traces_url, linked)
        if args.json:
            console.print(escape(said))
        else:
            print(said)
    return 0 if not problems else 1


def _read_pcaps(args: argparse.Namespace, console: Console) -> list[HostTrace]:
    captures = [parse_pcap_option(text) for text in args.pcap]
    names = [c.host for c in captures]
    twice = sorted({h for h in names if names.count(h) > 1})
    if twice:
        raise InputError(Problem(f"one capture per host: {', '.join(twice)} given more than "
                                 "once", field="--pcap"))
    exclude = args.exclude_port if args.exclude_port is not None else [22]
    reads: dict[str, PcapRead] = {}
    tied: list[tuple[PcapSource, AmbiguousAddress]] = []
    for c in captures:
        try:
            reads[c.host] = read_pcap(c.host, c.path, exclude, c.addresses)
        except AmbiguousAddress as e:
            tied.append((c, e))
    for c, e in tied:  # read again knowing the other captures' hosts' addresses
        others = frozenset().union(*(r.trace.addresses for r in reads.values()))
        if not others & set(e.candidates):
            raise e
        reads[c.host] = read_pcap(c.host, c.path, exclude, others=others)
    hosts, read = [], []
    for c in captures:
        got = reads[c.host]
        hosts.append(got.trace)
        read.append((c.path, got.packets, got.skipped))
        if not args.json:
            left = "; left out: " + ", ".join(f"{n} {why}" for why, n in got.skipped.items()) \
                if got.skipped else ""
            console.print(escape(f"{c.host}: {got.segments} TCP segments of {got.packets} "
                                 f"packets in {c.path}, {len(got.trace.records)} messages, "
                                 f"addresses {', '.join(sorted(got.trace.addresses))}{left}"),
                          soft_wrap=True)
    if not any(h.records for h in hosts):
        raise InputError(Problem("no TCP message in any capture: " + "; ".join(
            f"{path}: {n} packets, " + (", ".join(f"{k} {why}" for why, k in left.items())
                                        or "none left out")
            for path, n, left in read), field="--pcap"))
    return hosts


def _capture(args: argparse.Namespace, console: Console
             ) -> tuple[list[HostTrace], list[str], Session]:
    experiment = load_experiment(args.experiment)
    endpoints = check_local_files(experiment)
    session = Session(experiment, endpoints=endpoints)
    # the coordinator's own SSH channels carry the daemons' lines: not the application's
    request = TraceRequest(report_interval_s=min(args.report_interval, args.duration),
                           exclude_ports=tuple(sorted({e.port for e in endpoints.values()})))

    def start() -> list[str]:
        if experiment.web_log is not None:
            session.follow_log()
        return session.start_tracing(request)

    problems = observe(session, start, session.stop_tracing, args.duration, console.print,
                       lambda note: console.print(f"[yellow]{escape(note)}"), "tracing")
    hosts, failed = host_traces(session)
    return hosts, problems + failed, session


def _print(console: Console, result: PathsResult) -> None:
    print(f"{result.messages} messages ({result.nil_send} without a send time, "
          f"{result.nil_receive} without a receive time), {result.roots} paths")
    for line in linking_lines(result):
        print(line)
    for host, clock in result.hosts.items():
        if clock.clock_offset_s is not None and clock.clock_reference != host:
            print(f"  clock of {host}: {1e3 * clock.clock_offset_s:+.3f} ms against "
                  f"{clock.clock_reference}")
    counts = result.transaction_requests
    if counts:  # each transaction's likeliest pattern (the busiest ones), then the rest
        busiest = sorted(counts, key=lambda n: -counts[n])[:MAX_TRANSACTIONS_SHOWN]
        for name in busiest:
            print(f"\n{name}: {counts[name]} requests found, its likeliest path:")
            print("\n".join(pattern_lines(result.transactions[name][0])))
        if len(counts) > len(busiest):
            print(f"\n({len(counts) - len(busiest)} more transactions in --json)")
        print("\nAll requests:")
    for p in result.patterns[:10]:
        print()
        print("\n".join(pattern_lines(p)))
    for problem in result.problems or ():
        console.print(f"[red]{escape(problem)}")


COMMANDS = (Command(
    "paths", "WAP5's causal paths from every host's TCP messages, no injection",
    "Capture the TCP messages of the experiment's hosts for a while (with its workload "
    "running, if it has one), or read a saved trace or packet captures, and link them into "
    "causal paths: which "
    "message caused which, aggregated into patterns (clients as CLIENT, ephemeral ports left "
    "out), with each hop's node delay and network delay (the hosts' clock offsets taken out) "
    "and each link's crossings on the critical path.",
    _arguments, paths_command,
    example="linkgrad paths experiments/testbed-quick.yaml --duration 30",
    exits=(EXITS[0], (1, "a host could not be traced (named; the others' messages are "
                         "linked), or a runtime failure"), *EXITS[2:])),)

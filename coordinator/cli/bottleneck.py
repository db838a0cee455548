"""`linkgrad bottleneck EXPERIMENT.yaml --from HOST:PATH --to HOST:PATH [--size BYTES]`: a
disk-to-disk transfer of linkgrad's own between two hosts, and which of its resources limits
it (Kissel et al. §IV.C). `--summaries FILE` tests a transfer's saved lines instead.

The transfer (`sniffer.transfer`) summarises each resource per interval; the lowest
instantaneous throughput is the candidate, and one-sided t-tests against each other tested
resource name it the bottleneck or say which are statistically similar (`linkgrad.bottleneck`).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rich.markup import escape

from coordinator.cli.bottleneck_answer import BottleneckAnswer, answer_of, describe
from coordinator.cli.command import Command
from coordinator.cli.options import add_output
from coordinator.cli.profile import check_between
from coordinator.cli.terminal import terminal
from coordinator.config.experiment import Experiment
from coordinator.config.experiment_file import load_experiment
from coordinator.live.session import check_local_files, sigterm_interrupts
from coordinator.live.ssh import Connection, Endpoint
from coordinator.live.transfer_run import HostPath, TransferPlan, parse_host_path, run_transfer
from coordinator.regress.files import write_error, write_whole
from linkgrad.bottleneck import ALPHA
from linkgrad.errors import InputError, Problem
from linkgrad.protocol.transfer import TransferInterval, read_lines
from linkgrad.reading import read_text

DEFAULT_SIZE = 2 << 30  # 17 s at 1 Gb/s (the paper's D2D ran at 850 Mb/s); seconds on a testbed
MAX_SIZE = 1 << 50
_SIZE = re.compile(r"(\d+)([KMGT]?)(i?B)?", re.IGNORECASE)

def parse_size(text: str) -> int:
    """Bytes: `1073741824`, `512M`, `2G`, `2GiB` (powers of 1024)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of bytes, e.g. "
                                         "268435456, 256M or 2G")
    size = int(m[1]) << (10 * " KMGT".index(m[2].upper() or " "))
    if not 1 <= size <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 1 byte to 1 PiB")
    return size


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", type=Path, nargs="?",
                   help="experiment YAML: its hosts and ssh settings (not with --summaries)")
    p.add_argument("--from", dest="source", metavar="HOST:PATH",
                   help="the file to send: sent if it exists, else made (--size bytes)")
    p.add_argument("--to", dest="destination", metavar="HOST:PATH",
                   help="where the receiver writes it: a path that does not exist")
    p.add_argument("--size", type=parse_size, metavar="BYTES",
                   help=f"make the file to send, of this size (256M, 2G; default "
                   f"{DEFAULT_SIZE >> 30} GiB when --from does not exist); a file at --from "
                   "is then refused, not sent")
    p.add_argument("--interval", type=float, default=0.5, metavar="S",
                   help="seconds each summary covers: the t-tests' samples (default 0.5)")
    p.add_argument("--keep", action="store_true",
                   help="keep the files linkgrad made on the hosts (default: removed)")
    add_output(p, "write both sides' lines, for --summaries later", old="--save")
    p.add_argument("--summaries", type=Path, metavar="FILE",
                   help="test a transfer's saved lines (--output): no hosts, no experiment")
    p.add_argument("--alpha", type=float, default=ALPHA,
                   help=f"the tests' level, split over the candidate's choice (default {ALPHA})")


def bottleneck_command(args: argparse.Namespace) -> int:
    check_between(args.alpha, 1e-6, 0.5, "--alpha", unit="")
    lines: list[str] = []
    if args.summaries is not None:
        _only_summaries(args)
        text = read_text(args.summaries, "a transfer's saved lines")
        answer = answer_of(read_lines(text, str(args.summaries)), str(args.summaries), None,
                         args.alpha)
    else:
        answer, lines = _live(args)
    if args.json:
        print(answer.json_text())
    else:
        print(describe(answer))
    if args.output is not None:  # after the answer: a transfer's answer is never lost to it
        _save(args.output, lines)
    return 0


def _save(path: Path, lines: list[str]) -> None:
    """Both sides' lines written whole (no temporary file left if it fails): InputError for
    a path the user can fix, RuntimeFailure for the machine's failure."""
    try:
        write_whole(path, "".join(line + "\n" for line in lines))
    except OSError as e:
        raise write_error(e, path, "--output") from e


def _only_summaries(args: argparse.Namespace) -> None:
    given = [option for option, value in (("EXPERIMENT", args.experiment),
                                          ("--from", args.source), ("--to", args.destination),
                                          ("--size", args.size), ("--output", args.output))
             if value is not None]
    if given:
        raise InputError(Problem(f"--summaries tests saved lines: give no {', '.join(given)}",
                                 field="--summaries"))


def _live(args: argparse.Namespace) -> tuple[BottleneckAnswer, list[str]]:
    """The transfer, after every check that needs no host; its answer and its lines."""
    missing = [name for name, value in (("EXPERIMENT", args.experiment),
                                        ("--from", args.source), ("--to", args.destination))
               if value is None]
    if missing:
        raise InputError(Problem(f"give {', '.join(missing)} (or --summaries FILE)"))
    check_between(args.interval, 0.01, 3600, "--interval")
    source = parse_host_path(args.source, "--from")
    destination = parse_host_path(args.destination, "--to")
    if source.path == destination.path:
        raise InputError(Problem(
            f"--from and --to name the same path {source.path}: hosts that share a file system "
            "(a testbed's do) would write over the file being sent; give the copy another name",
            field="--to"))
    if args.output is not None and not args.output.parent.is_dir():
        raise InputError(Problem(f"no directory {args.output.parent} to write into",
                                 str(args.output), field="--output"))
    experiment = load_experiment(args.experiment)
    _check_hosts(experiment, args.experiment, source, destination)
    endpoints = check_local_files(experiment)
    assert experiment.ssh is not None
    plan = TransferPlan(source, destination, args.size or DEFAULT_SIZE, args.size is not None,
                        args.interval, args.keep, experiment.ssh.python)
    lines = _transfer(experiment, endpoints, plan)
    intervals = [TransferInterval.model_validate_json(line) for line in lines]
    return answer_of(intervals, str(source), str(destination), args.alpha), lines


def _check_hosts(experiment: Experiment, path: Path, *ends: HostPath) -> None:
    """Each end names one of the experiment's hosts: InputError listing those it has."""
    names = [h.name for h in experiment.hosts]
    problems = [Problem(f"no host {end.host!r} in {path} (its hosts: {', '.join(names)})",
                        field=option)
                for option, end in zip(("--from", "--to"), ends, strict=True)
                if end.host not in names]
    if problems:
        raise InputError(problems)


def _transfer(experiment: Experiment, endpoints: dict[str, Endpoint], plan: TransferPlan
              ) -> list[str]:
    assert experiment.ssh is not None
    console = terminal(stderr=True)
    timeout_s = experiment.ssh.connect_timeout_s
    connections: list[Connection] = []
    try:
        with sigterm_interrupts():  # Ctrl-C, SIGTERM: every side's lease ends, its files go
            for name in (plan.source.host, plan.destination.host):
                connections.append(Connection(endpoints[name], timeout_s))
            source, destination = connections
            return run_transfer(source, destination, endpoints[plan.destination.host].hostname,
                                plan, lambda text: console.print(escape(text), soft_wrap=True))
    finally:
        for connection in connections:
            connection.close()


COMMANDS = (Command(
    "bottleneck", "which resource limits a disk-to-disk transfer between two hosts",
    "Run a disk-to-disk transfer of linkgrad's own over TCP from one host of the experiment "
    "to another (as the paper's instrumented GridFTP), with calipers on the disk read, the "
    "network send and receive, the disk write and each side's CPU, summarised every "
    "--interval. The resource with the lowest instantaneous throughput (bytes over the time "
    "it spent moving them) is the candidate; one-sided t-tests against every other resource "
    "name it the bottleneck, or say which are statistically similar (Kissel et al. §IV.C). "
    "The disks are read and written with O_DIRECT, so the disk is measured, not the page "
    "cache. --summaries FILE tests the lines a transfer saved with --output.",
    _arguments, bottleneck_command,
    epilog="examples:\n"
           "  linkgrad bottleneck exp.yaml --from client:/var/tmp/lg.bin "
           "--to web:/var/tmp/lg.copy\n"
           "  linkgrad bottleneck exp.yaml --from db:/data/dump.sql "
           "--to app1:/var/tmp/dump.copy --output t.jsonl\n"
           "  linkgrad bottleneck --summaries t.jsonl --json"),)

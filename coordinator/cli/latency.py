"""`linkgrad latency EXPERIMENT.yaml`: one-way latency between every two hosts of an
experiment, as the mean TCP connect RTT over two (thesis §5.3), written as the latencies file
`linkgrad predict` reads. Probes go from each host to every host's SSH port (always listening,
since the coordinator reaches it), its own included: two components that end up on one host
talk over its own stack.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

from pydantic import ValidationError
from rich.table import Table

from coordinator.cli.command import Command
from coordinator.cli.options import add_output
from coordinator.cli.terminal import terminal
from coordinator.config.experiment import Experiment
from coordinator.config.experiment_file import load_experiment
from coordinator.config.strict_json import dumps
from coordinator.live.fanout import each_host
from coordinator.live.session import check_local_files
from coordinator.live.ssh import Connection, Endpoint
from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.prediction import Estimate
from linkgrad.protocol.sniffer import RttAnswer
from linkgrad.reading import problems_of


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", type=Path)
    p.add_argument("--count", type=int, default=100, help="connects per pair (default 100)")
    add_output(p, "write the latencies file", old="--out", metavar="NOW.yaml")


def one_way_ms(rtts_s: list[float]) -> Estimate:
    """Mean RTT / 2 and its standard error, in ms."""
    if len(rtts_s) < 2:
        raise ValueError(f"{len(rtts_s)} round trips: need 2 or more")
    return Estimate(statistics.fmean(rtts_s) * 500,
                    statistics.stdev(rtts_s) * 500 / math.sqrt(len(rtts_s)))


def latencies_yaml(one_way: dict[tuple[str, str], Estimate], source: str) -> str:
    """The latencies file: every host its own site, "a<->b" per unordered pair."""
    lines = [f"# {source}: one-way = mean TCP connect RTT / 2; se = its standard error",
             "latency_ms:"]
    lines += [f"  {a}<->{b}: {{mean: {e.mean:.4f}, se: {e.se:.4f}}}"
              for (a, b), e in sorted(one_way.items())]
    return "\n".join(lines) + "\n"


def _probe(experiment: Experiment, src: Endpoint, targets: dict[str, tuple[str, int]],
           count: int) -> dict[tuple[str, str], Estimate]:
    assert experiment.ssh is not None
    conn = Connection(src, experiment.ssh.connect_timeout_s)
    try:
        out = {}
        for dst, (addr, port) in targets.items():
            reply = _rtt_reply(conn.run([experiment.ssh.python, "-m", "sniffer.rtt", addr,
                                         str(port), "--count", str(count)],
                                        timeout_s=30 + count * 2.1), f"{src.name} -> {dst}")
            try:
                out[(src.name, dst)] = one_way_ms(list(reply.rtt_s))
            except ValueError as e:
                raise RuntimeFailure(f"{src.name} -> {dst} ({addr}:{port}): {e}; "
                                     f"{reply.failed} connects failed") from e
        return out
    finally:
        conn.close()


def _rtt_reply(text: str, what: str) -> RttAnswer:
    """`sniffer.rtt`'s answer, checked: finite round trips of 0 s or more."""
    try:
        return RttAnswer.model_validate_json(text)
    except ValidationError as e:
        raise RuntimeFailure(f"{what}: sniffer.rtt answered no list of round trips: "
                             f"{text[:200]!r} ({problems_of(e, 'sniffer.rtt')[0]})") from e


def latency_command(args: argparse.Namespace) -> int:
    if not 2 <= args.count <= 100_000:
        raise InputError(Problem(f"must be 2 to 100000, got {args.count}", field="--count"))
    if args.output is not None and not args.output.parent.is_dir():
        raise InputError(Problem(f"no directory {args.output.parent} to write into",
                                 str(args.output), field="--output"))
    experiment = load_experiment(args.experiment)
    ends = check_local_files(experiment)
    targets = {name: (end.hostname, end.port) for name, end in ends.items()}
    names = sorted(targets)
    started = time.time()
    assert experiment.ssh is not None
    probed = each_host(names, lambda src: _probe(experiment, ends[src],
                                                 {d: targets[d] for d in names if d >= src},
                                                 args.count), experiment.ssh.parallel)
    probed.raise_failed("latency")
    measured = {k: v for found in probed.succeeded.values() for k, v in found.items()}
    text = latencies_yaml(measured, f"linkgrad latency {args.experiment} at "
                          f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}, "
                          f"{args.count} connects per pair")
    if args.output:
        try:
            args.output.write_text(text)
        except OSError as e:
            raise InputError(Problem(f"cannot write: {e.strerror or e}", str(args.output),
                                     field="--output")) from e
    if args.json:
        print(dumps({f"{a}<->{b}": {"mean_ms": e.mean, "se_ms": e.se}
                     for (a, b), e in sorted(measured.items())}))
    else:
        table = Table("hosts", "one-way ms", "se ms")
        for (a, b), e in sorted(measured.items()):
            table.add_row(f"{a} <-> {b}", f"{e.mean:.4f}", f"{e.se:.4f}")
        terminal().print(table)
    return 0


COMMANDS = (
    Command("latency", "measure one-way latency between an experiment's hosts",
            "From every host of the experiment to every host (itself included): COUNT TCP "
            "connects to its SSH port; one-way latency = mean RTT / 2, with its standard error. "
            "Writes the latencies file `linkgrad predict` reads.",
            _arguments, latency_command,
            example="linkgrad latency experiments/testbed-quick.yaml --output now.yaml"),
)

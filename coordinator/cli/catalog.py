"""Every subcommand's name, module and one-line summary, in the order `linkgrad --help` lists
them: what `linkgrad --help` and the choice of a command need, without importing any command's
module (their numpy, scipy, matplotlib and pydantic models cost seconds). The modules'
`COMMANDS` are the truth; tests/test_cli.py keeps this table in step with them."""

from __future__ import annotations

import importlib
from typing import NamedTuple

from coordinator.cli.command import Command, CommandGroup


class Entry(NamedTuple):
    name: str
    module: str  # its COMMANDS hold the command of this name
    summary: str


CATALOG: tuple[Entry, ...] = (
    Entry("gradient", "coordinator.cli.gradient",
          "link gradient per transaction from a web log and an injection record"),
    Entry("plan", "coordinator.cli.plan",
          "the square wave a run would plan from a log: period, cycles, delay"),
    Entry("inject", "coordinator.cli.inject",
          "delay one link's packets now (foreground; stats on exit)"),
    Entry("testbed", "coordinator.cli.testbed",
          "a real multi-tier application on local namespaces"),
    Entry("run", "coordinator.cli.run", "measure the link gradient graph of a live application"),
    Entry("report", "coordinator.cli.run", "(re)write RUN_DIR/report.html from a run's files"),
    Entry("explain", "coordinator.cli.explain",
          "each gradient beside its causal paths, with a verdict and its cause"),
    Entry("predict", "coordinator.cli.predict",
          "predict response times after components move (what-if)"),
    Entry("latency", "coordinator.cli.latency",
          "measure one-way latency between an experiment's hosts"),
    Entry("deploy", "coordinator.cli.deploy", "put linkgrad on every host of an experiment"),
    Entry("place", "coordinator.cli.place",
          "rank placements of components over sites (one or several applications)"),
    Entry("route", "coordinator.cli.route",
          "per-transaction routing between two copies of a tier"),
    Entry("profile", "coordinator.cli.profile",
          "SNAP alone: classify every TCP connection's limits, no injection"),
    Entry("paths", "coordinator.cli.paths",
          "WAP5's causal paths from every host's TCP messages, no injection"),
    Entry("regress", "coordinator.cli.regress",
          "nightly regression: run a suite on a fresh testbed, compare with the baseline"),
    Entry("export", "coordinator.cli.export",
          "export a run to Prometheus, perfSONAR or OpenTelemetry"),
    Entry("bottleneck", "coordinator.cli.bottleneck",
          "which resource limits a disk-to-disk transfer between two hosts"),
)

LOG_HELP = """\
web log formats: nginx (default; give your log_format with --log-format, it needs $request_time
and $msec or $time_local), apache (LogFormat with %D/%T/%{ms}T/%{us}T and %t/%{msec}t/%{usec}t),
csv (start_unix_s,response_ms,url). Gzip files are read as such; a corrupt or truncated one is
an error. A line that is not a request (it does not match, holds bytes that are not UTF-8, puts
the start outside the years 1970-9999, has a response time that is negative or over 30 days)
is counted under its reason and reported; more than --max-bad-fraction of them is an error."""


def load_command(entry: Entry) -> Command | CommandGroup:
    """The command itself, its module imported now."""
    module = importlib.import_module(entry.module)
    return next(c for c in module.COMMANDS if c.name == entry.name)


def all_commands() -> tuple[Command | CommandGroup, ...]:
    """Every command, every module imported (for tests and docs, not for a command line)."""
    return tuple(load_command(e) for e in CATALOG)

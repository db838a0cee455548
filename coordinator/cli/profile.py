"""`linkgrad profile EXPERIMENT.yaml --duration 60 [--output FILE] [--json]`: SNAP alone, no
injection: every host's TCP connections profiled, classified (Table 2) and correlated (ACC)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from coordinator.cli import snap_report
from coordinator.cli.answer import Answer
from coordinator.cli.command import EXITS, Command
from coordinator.cli.options import add_output
from coordinator.cli.snap_report import ResourceRow
from coordinator.cli.terminal import terminal
from coordinator.config.experiment_file import load_experiment
from coordinator.config.run_dir import RunDir
from coordinator.config.snap_file import SnapFile
from coordinator.live.passive import snap_file
from coordinator.live.session import Session, check_local_files, observe
from linkgrad.errors import InputError, Problem
from linkgrad.protocol.snap import Profile, Profiling
from linkgrad.snap.evidence import links_seen

MAX_DURATION_S = 7 * 86400.0


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", type=Path, help="experiment YAML: its hosts and ssh settings")
    p.add_argument("--duration", type=float, default=60.0, metavar="S",
                   help="seconds to profile (default 60; Ctrl-C ends it early and keeps what "
                   "was seen)")
    p.add_argument("--report-interval", type=float, default=5.0, metavar="S",
                   help="seconds between each host's reports (default 5)")
    p.add_argument("--cpu-upper", type=float, default=5.0, metavar="PCT",
                   help="the profiler's CPU budget on each host, percent of one core (SNAP "
                   "§7; default 5; the lower bound is 40%% of it)")
    add_output(p, "write what was seen as a snap.json (as a run's)", old="--save")


def check_between(value: float, lo: float, hi: float, option: str, unit: str = " s") -> None:
    """An option's number within [lo, hi] (NaN is not), else an InputError naming it."""
    if not lo <= value <= hi:
        raise InputError(Problem(f"{value:g}{unit}: expected {lo:g} to {hi:g}", field=option))


def _check(args: argparse.Namespace) -> None:
    check_between(args.duration, 1.0, MAX_DURATION_S, "--duration")
    check_between(args.report_interval, 0.1, 3600, "--report-interval")
    check_between(args.cpu_upper, 0.1, 100, "--cpu-upper", unit="")


def profile_command(args: argparse.Namespace) -> int:
    _check(args)
    experiment = load_experiment(args.experiment)
    console = terminal(stderr=True)
    session = Session(experiment, endpoints=check_local_files(experiment))
    request = Profile(report_interval_s=min(args.report_interval, args.duration),
                      cpu_upper_pct=args.cpu_upper, cpu_lower_pct=0.4 * args.cpu_upper)
    problems = observe(session, lambda: session.start_profiling(request),
                       session.stop_profiling, args.duration, console.print,
                       lambda note: console.print(f"[yellow]{escape(note)}"), "profiling")
    for lost in session.loss_warnings():  # the profile stands, short of what they say
        console.print(f"[yellow]{escape(lost)}")
    hosts = {**session.addresses, **session.ipv6_addresses}
    snap = snap_file(session.profiling, session.snap_reports, hosts)
    if args.output:
        RunDir(args.output.parent).write(args.output.name, snap.model_dump(mode="json",
                                                                       by_alias=True))
    summary = _summary(snap, problems)
    if args.json:
        print(summary.json_text())
    else:
        _print(console, summary, args.experiment, args.duration)
    return 0 if not problems else 1


class SeenLink(Answer):
    """A sending direction the hosts' reports saw, its connections summed."""

    link: str  # `app1:0 -> db:5432`: a port in its host's ephemeral range written 0
    connections: int
    bytes_acked: float
    seconds: dict[str, float]  # Table 2 class -> seconds


class ProfileAnswer(Answer):
    hosts: dict[str, Profiling]  # what each host's profiler could give
    links: list[SeenLink]
    resources: list[ResourceRow]
    reports: int
    at: float  # unix seconds
    problems: list[str]


def _summary(snap: SnapFile, problems: list[str]) -> ProfileAnswer:
    ephemeral = {h: p.ephemeral_range for h, p in snap.hosts.items() if p.ephemeral_range}
    links = links_seen(snap.reports, snap.addresses, ephemeral)
    return ProfileAnswer(
        hosts=snap.hosts,
        links=[SeenLink(link=label, connections=seen.connections,
                        bytes_acked=seen.bytes_acked, seconds=seen.seconds)
               for label, seen in sorted(links.items())],
        resources=_resources(snap), reports=len(snap.reports), at=time.time(),
        problems=problems)


def _resources(snap: SnapFile) -> list[ResourceRow]:
    try:
        return snap_report.resource_rows(snap_report.ranked(snap))
    except ValueError as e:  # too many connections for the window's 2 s bins: the rest stands
        return [ResourceRow(resource=f"not ranked: {e}", acc=None, above_alpha=False,
                            connections=0, problems_s={})]


SHOWN = 10  # links and shared resources on the terminal; --json and --output hold them all


def profile_text(summary: ProfileAnswer, experiment: Path, duration_s: float) -> str:
    """The answer for a person, worst first: which links spent time limited by something
    other than their application, which resources share problems, and what to do next."""
    connections = sum(link.connections for link in summary.links)
    lines = [f"SNAP over {len(summary.hosts)} host(s) for {duration_s:g} s: "
             f"{len(summary.links)} link(s), {connections} connection(s)"]

    def problem_s(seconds: dict[str, float]) -> float:
        return sum(v for k, v in seconds.items() if k != "app_limited")

    limited = sorted((link for link in summary.links if problem_s(link.seconds) > 0),
                     key=lambda link: -problem_s(link.seconds))
    if limited:
        lines.append("limited by more than their application (connection-seconds):")
        for link in limited[:SHOWN]:
            seconds = {k: v for k, v in link.seconds.items() if v > 0}
            lines.append(f"  {link.link}  ({link.connections} conn): "
                         f"{snap_report.classes_text(seconds)}")
        if len(limited) > SHOWN:
            lines.append(f"  and {len(limited) - SHOWN} more link(s)")
    lines.append(f"{len(summary.links) - len(limited)} link(s) limited by their application "
                 "only" if limited else "every link was limited by its application only")
    shared = [r for r in summary.resources if r.above_alpha]
    if shared:
        lines.append("problems shared (ACC above 0.4):")
        lines += [f"  {r.resource}: ACC {r.acc:.2f}  {snap_report.classes_text(r.problems_s)}"
                  for r in shared[:SHOWN]]
        if len(shared) > SHOWN:
            lines.append(f"  and {len(shared) - SHOWN} more")
    lines += [*(f"not ranked: {r.resource.removeprefix('not ranked: ')}"
                for r in summary.resources if r.acc is None),
              "every link and resource: --json, or --output FILE",
              f"next: linkgrad run {experiment} (the gradients say whether these links "
              "matter to the response times)"]
    return "\n".join(lines)


def _print(console: Console, summary: ProfileAnswer, experiment: Path,
           duration_s: float) -> None:
    print(profile_text(summary, experiment, duration_s))
    for problem in summary.problems:
        console.print(f"[red]{escape(problem)}")


COMMANDS = (Command(
    "profile", "SNAP alone: classify every TCP connection's limits, no injection",
    "Profile every TCP connection of the experiment's hosts for a while (with its workload "
    "running, if it has one), without injecting anything: SNAP's per-socket classes (send "
    "buffer, fast retransmit, timeout, delayed ACK, receiver window, else application "
    "limited) per link, and the hosts (sending from, into), paths and processes whose "
    "connections share their problems (average correlation above 0.4).",
    _arguments, profile_command,
    example="linkgrad profile experiments/testbed-quick.yaml --duration 60",
    exits=(EXITS[0], (1, "a host could not be profiled (named; the others' profiles are "
                         "kept), or a runtime failure"), *EXITS[2:])),)

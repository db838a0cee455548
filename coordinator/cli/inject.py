"""`linkgrad inject`: the injector in the foreground for a person at a terminal.

Runs one link's schedule until the duration ends, Ctrl-C or SIGTERM, then removes its rules and
prints the delay it actually applied (calipers per phase).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import threading
import time

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from coordinator.cli.command import Command
from injector.engine import Engine
from injector.link import Endpoint, Link, parse_endpoint
from injector.netem import NetemDelay, NetemStats, NetemUnavailable
from injector.schedule import Caps, Schedule, build_schedule
from linkgrad.errors import InputError, Problem
from linkgrad.protocol.base import validation_problems
from linkgrad.protocol.injector import SCHEDULE, LinkStats, ScheduleSpec

EPILOG = """\
examples:
  linkgrad inject --dst 10.0.0.5:5432 --constant 20 --duration 60
  linkgrad inject --src 10.0.0.4 --dst 10.0.0.5:5432 --square 30:15 --cycles 8
  linkgrad inject --proto icmp --dst 10.0.0.5 --constant 5 --duration 10 --json
  linkgrad inject --dst [fd00::5]:5432 --constant 20 --duration 60     # IPv6: ip6tables"""


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dst", metavar="IP[:PORT]",
                   help="destination address (and port); IPv6 as [ADDRESS]:PORT")
    p.add_argument("--src", metavar="IP[:PORT]",
                   help="source address (and port); IPv6 as [ADDRESS]:PORT")
    p.add_argument("--proto", choices=["tcp", "udp", "icmp"], default="tcp")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--constant", type=float, metavar="MS", help="a constant delay")
    how.add_argument("--square", metavar="PERIOD_S:MS", help="a square wave, on first")
    p.add_argument("--cycles", type=int, help="square-wave cycles (default: fill --duration)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument("--loss", type=float, default=0.0, metavar="F",
                   help="also drop this fraction of the link's packets while on")
    p.add_argument("--backend", choices=["nfqueue", "netem"], default="nfqueue",
                   help="nfqueue (per link, measures every packet) or netem (everything "
                        "leaving --dev; falls back to nfqueue where the kernel has no netem)")
    p.add_argument("--dev", metavar="IFACE", help="interface for the netem backend")
    p.add_argument("--queue", type=int, default=4100, help="base NFQUEUE number (default 4100)")
    p.add_argument("--max-magnitude-ms", type=float, default=Caps.max_magnitude_ms)
    p.add_argument("--max-duration-s", type=float, default=Caps.max_duration_s)


def schedule_request(args: argparse.Namespace, caps: Caps) -> tuple[ScheduleSpec, float]:
    """The schedule the daemon would get, and how long to run."""
    where = "--square" if args.square else "--constant"
    try:
        if args.constant is not None:
            duration = args.duration or caps.max_duration_s
            return SCHEDULE.validate_python(dict(
                kind="constant", magnitude_ms=args.constant, duration_s=duration,
                loss_fraction=args.loss or 0.0)), duration
        period_text, _, ms_text = args.square.partition(":")
        try:
            period, ms = float(period_text), float(ms_text)
        except ValueError as e:
            raise InputError(Problem(f"expected PERIOD_S:MS, got {args.square!r}",
                                     field="--square")) from e
        if not (math.isfinite(period) and period > 0 and math.isfinite(ms) and ms >= 0):
            raise InputError(Problem(f"expected a period over 0 s and a delay of 0 ms or more, "
                                     f"both finite, got {args.square!r}", field="--square"))
        limit = args.duration or caps.max_duration_s
        cycles = args.cycles or max(1, int(limit // period))
        return SCHEDULE.validate_python(dict(
            kind="square", period_s=period, magnitude_ms=ms, cycles=cycles,
            loss_fraction=args.loss or 0.0)), min(limit, cycles * period)
    except ValidationError as e:  # through the union, as the daemon reads it: fields named alike
        raise InputError(validation_problems(e, where)) from e


def inject_command(args: argparse.Namespace) -> int:
    if args.backend == "netem":
        if not args.dev:
            raise InputError(Problem("the netem backend needs an interface", field="--dev"))
        try:
            return _netem(args)
        except NetemUnavailable as e:
            Console(stderr=True).print(f"{e}: falling back to the nfqueue backend")
    if not args.dst and not args.src:
        raise InputError(Problem("give --dst or --src", field="--dst"))
    src = parse_endpoint(args.src, "--src") if args.src else None
    dst = parse_endpoint(args.dst, "--dst") if args.dst else None
    link = Link(args.proto, src or Endpoint(), dst or Endpoint())
    schedule, duration = _schedule(args)
    with Engine(queue_base=args.queue) as engine:
        link_id = engine.add_link(link, schedule)
        if not args.json:
            Console(stderr=True).print(f"delaying {link} for {duration:g} s (Ctrl-C stops)")
        _wait(duration)
        stats = engine.remove_link(link_id)
    _print_stats(stats, args.json)
    return 0


def _netem(args: argparse.Namespace) -> int:
    schedule, duration = _schedule(args)
    with NetemDelay(args.dev, schedule) as netem:
        _wait(duration)
        stats = netem.stats()
    if args.json:
        print(json.dumps(stats.model_dump(), indent=2))
    else:
        print(netem_text(stats))
    return 0


def netem_text(stats: NetemStats) -> str:
    """What netem did, for a person: it cannot say each packet's delay (the NFQUEUE backend
    can), only how late its qdisc changes came against the schedule's edges."""
    late = stats.edge_lateness
    if not late.count or late.mean_ms is None:
        return f"netem on {stats.dev}: no delay change was made (the schedule had no edge)"
    return (f"netem on {stats.dev}: {late.count} delay change(s), late against the schedule "
            f"by {late.mean_ms:.2f} ms on average ({late.min_ms:.2f} to {late.max_ms:.2f} "
            f"ms); the phase at the end: {stats.phase_now}")


def _schedule(args: argparse.Namespace) -> tuple[Schedule, float]:
    """The validated, capped schedule the options ask for, and how long to run."""
    caps = Caps(args.max_magnitude_ms, args.max_duration_s)
    spec, duration = schedule_request(args, caps)
    where = "--square" if args.square else "--constant"
    return build_schedule(spec, time.time(), caps, where=where), duration


def _wait(duration_s: float) -> None:
    """Until the duration ends, Ctrl-C or SIGTERM; the caller's `with` then undoes it all."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait(duration_s)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_stats(stats: LinkStats, as_json: bool) -> None:
    if as_json:
        print(stats.model_dump_json(indent=2))
        return
    table = Table("phase", "packets", "mean ms", "std ms", "min ms", "max ms", "mean error ms",
                  title=f"delay actually applied: {stats.link}")
    for phases in stats.schedules.values():
        for phase, s in phases.items():
            a = s.actual
            if a.count:
                table.add_row(phase, str(a.count), f"{a.mean_ms:.3f}", f"{a.std_ms:.3f}",
                              f"{a.min_ms:.3f}", f"{a.max_ms:.3f}", f"{s.error.mean_ms:+.3f}")
    Console().print(table)
    if stats.dropped:
        Console().print(f"dropped (loss mode): {stats.dropped}")


COMMANDS = (
    Command("inject", "delay one link's packets now (foreground; stats on exit)",
            "Delay the packets of one link through NFQUEUE (needs root and iptables). A port of "
            "0 or none matches any port. On exit prints the delay actually applied per phase.",
            _arguments, inject_command, epilog=EPILOG,
            json_help="print the statistics as JSON"),
)

"""`linkgrad testbed up|down|status|load`."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from coordinator.cli.command import Command, CommandGroup
from coordinator.cli.options import add_output
from coordinator.config.topology_file import load_topology
from linkgrad.errors import InputError, Problem, RuntimeFailure
from testbed import nginx
from testbed.cgroups import join_then_exec
from testbed.description import DescribedTestbed, RemovalReport
from testbed.lifecycle import down, status, up
from testbed.netns import TAG
from testbed.state import default_root
from testbed.topology import BUILT_IN, MAX_HOSTS, Topology, services_topology, with_extra_query

if TYPE_CHECKING:  # the load generator imports httpx: loaded when `load` runs
    from testbed.loadgen import ClosedLoopSummary, OpenLoopSummary


def _tag_arguments(p: argparse.ArgumentParser) -> None:
    """Which testbed: every testbed subcommand takes these."""
    p.add_argument("--tag", default="tb", help="testbed name, 1-4 letters/digits (default tb)")
    # where testbeds live (default $LINKGRAD_TESTBED_ROOT or /var/tmp): root's alone, checked
    p.add_argument("--root", type=Path, default=None, help=argparse.SUPPRESS)


def _up_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topology", nargs="?", type=Path, help="topology YAML (default: the "
                   "built-in one of --app)")
    p.add_argument("--app", choices=sorted(BUILT_IN), help="the application: rubis (default; "
                   "client, web, app1, app2, db, cache: nginx, Python app servers, PostgreSQL, "
                   "memcached), mediawiki (client, web, db: Debian's MediaWiki 1.39 on Apache "
                   "+ mod_php, MariaDB) or redmine (client, web, db: Debian's Redmine 5.0 on "
                   "Apache + Passenger, PostgreSQL); their web log is Apache's. With a "
                   "topology file, its "
                   "`app:` decides and --app must agree")
    p.add_argument("--mininet", action="store_true", help="build the network with Mininet "
                   "(Debian's mininet; LinuxBridge switch, no controller) instead of plain "
                   "namespaces; the application and SSH are the same")
    p.add_argument("--services", type=int, metavar="N",
                   help="a generated microservice application instead: N services (2-63) on "
                   "N hosts s0 (the front, behind nginx) to s<N-1>, calling each other by a "
                   "call graph drawn from --seed; every transaction's true gradient is known "
                   "from the graph (`linkgrad testbed status --json`)")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="with --services: the call graph's seed (default 1)")
    p.add_argument("--extra-query", action="append", metavar="TRANSACTION",
                   help="a planted regression, to check `linkgrad regress` catches it: "
                   "TRANSACTION (ViewItem, PutBid, single, ...) makes one more database round "
                   "trip (repeatable; the topology's service.extra_query otherwise)")
    _tag_arguments(p)


def _load_arguments(p: argparse.ArgumentParser) -> None:
    loop = p.add_mutually_exclusive_group()
    loop.add_argument("--rate", type=float, default=None,
                      help="open loop: Poisson arrivals, requests/s (default 20)")
    loop.add_argument("--clients", type=int, default=None,
                      help="closed loop: N clients, each sending its next request after the "
                           "previous one answered and a think time")
    p.add_argument("--think-s", type=float, default=0.5,
                   help="closed loop: mean exponential think time in s (default 0.5)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds (default 30)")
    p.add_argument("--mix", help="/PATH=WEIGHT,... (default: every transaction, equal weight)")
    add_output(p, "CSV of the client-side latencies", old="--out")
    _tag_arguments(p)


def _routes_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", type=Path, help="nginx snippet")
    p.add_argument("--default", action="store_true")
    _tag_arguments(p)


def testbed_command(args: argparse.Namespace) -> int:
    if not TAG.match(args.tag):
        raise InputError(Problem("1-4 lowercase letters or digits", field="--tag"))
    args.root = args.root or default_root()
    console = Console()
    if args.testbed_command == "up":
        info = up(_topology(args), args.tag, args.root, mininet=args.mininet)
        if args.json:
            print(json.dumps(info.model_dump(mode="json"), indent=2))
        else:
            _print_testbed(console, info)
    elif args.testbed_command == "status":
        report = status(args.tag, args.root)
        if args.json:
            print(report.json_text())
        elif report.info is not None:
            _print_testbed(console, report.info, report.services)
        elif report.services is None:
            console.print(f"no testbed {args.tag} (in {args.root}); next: linkgrad testbed up"
                          + ("" if args.tag == "tb" else f" --tag {args.tag}"), markup=False,
                          soft_wrap=True)
        else:  # `up` has not finished making it
            running = sum(report.services.values())
            console.print(f"testbed {args.tag} is not finished: {running} of "
                          f"{len(report.services)} services running; its `up` is still at work, "
                          f"or was cut short: then linkgrad testbed down --tag {args.tag}",
                          markup=False, soft_wrap=True)
    elif args.testbed_command == "down":
        removal = down(args.tag, root=args.root)
        if args.json:
            print(json.dumps(removal.model_dump(mode="json"), indent=2))
        else:
            _print_removal(console, removal)
    elif args.testbed_command == "routes":
        routes = _routes(args)
        if args.json:
            print(json.dumps(routes, indent=2))
        else:
            console.print(f"testbed {args.tag}: nginx reloaded with these routes:\n"
                          f"{routes['routes'].rstrip()}", markup=False, soft_wrap=True)
    else:
        load = _load(args)
        if args.json:
            print(json.dumps(load.model_dump(), indent=2))
        else:
            console.print(load_text(load), markup=False, soft_wrap=True)
    return 0


def _topology(args: argparse.Namespace) -> Topology:
    if args.services is None and args.seed is not None:
        raise InputError(Problem("seeds a generated application: give --services N too",
                                 field="--seed"))
    if args.services is not None:
        for given, option in ((args.topology, "a topology file"), (args.app, "--app"),
                              (args.extra_query, "--extra-query")):
            if given:
                raise InputError(Problem(f"--services makes its own topology: not with "
                                         f"{option}", field="--services"))
        if not 2 <= args.services <= MAX_HOSTS - 1:
            raise InputError(Problem(f"{args.services}: expected 2 to {MAX_HOSTS - 1}",
                                     field="--services"))
        if args.seed is not None and not 0 <= args.seed <= 2**31:
            raise InputError(Problem(f"{args.seed}: expected 0 to {2**31}", field="--seed"))
        return services_topology(args.services, 1 if args.seed is None else args.seed)
    topology = load_topology(args.topology, args.app)
    if args.app is not None and topology.app != args.app:
        raise InputError(Problem(f"--app {args.app} but the topology file says app: "
                                 f"{topology.app}", str(args.topology), field="app"))
    if args.extra_query:
        return with_extra_query(topology, tuple(args.extra_query))
    return topology


def _up_testbed(args: argparse.Namespace) -> DescribedTestbed:
    """The description of the testbed --tag, which must be up."""
    state = status(args.tag, args.root)
    if not state.up or state.info is None:
        raise RuntimeFailure(f"testbed {args.tag!r} is not up: linkgrad testbed up")
    return state.info


def _load(args: argparse.Namespace) -> OpenLoopSummary | ClosedLoopSummary:
    info = _up_testbed(args)
    mix = args.mix or ",".join(f"{t.path}=1" for t in info.transactions)
    client = info.with_role("client")[0]
    # in the client host's cgroup, as everything of that host is: its probe counts the load
    argv = join_then_exec(client.cgroups, [
        "ip", "netns", "exec", client.namespace, sys.executable, "-m", "testbed.loadgen",
        f"--url={info.frontend_url}", f"--mix={mix}", f"--duration={args.duration}", "--json"])
    if args.clients is not None:
        if args.clients < 1 or args.think_s < 0:
            raise InputError(Problem("at least 1 client and a think time of 0 s or more",
                                     field="--clients/--think-s"))
        argv += ["--clients", str(args.clients), "--think-s", str(args.think_s)]
    else:
        argv += ["--rate", str(args.rate if args.rate is not None else 20.0)]
    if args.output:
        argv += [f"--out={args.output.resolve()}"]  # `=`: a value may start with `-`
    done = subprocess.run(argv, capture_output=True, text=True, timeout=args.duration + 120,
                          check=False)
    if done.returncode != 0:
        raise RuntimeFailure(f"load generator failed: {done.stderr.strip()}")
    from testbed.loadgen import LOAD_SUMMARY

    try:
        return LOAD_SUMMARY.validate_json(done.stdout)
    except ValidationError as e:
        raise RuntimeFailure(f"the load generator answered no summary: {done.stdout[:200]!r} "
                             f"({e.error_count()} problems)") from e


def _routes(args: argparse.Namespace) -> dict[str, str]:
    """Install the routes; what `routes` prints: the tag and the routes installed."""
    if (args.file is None) == (not args.default):
        raise InputError(Problem("give a routes FILE or --default", field="routes"))
    info = _up_testbed(args)
    if info.app != "rubis":
        raise InputError(Problem(f"testbed {args.tag!r} runs {info.app}: routes are for the "
                                 "default application's nginx front end", field="--tag"))
    if args.default:
        text, source = nginx.DEFAULT_ROUTES, "--default"
    else:
        try:
            text, source = args.file.read_text(), str(args.file)
        except OSError as e:
            raise InputError(Problem(f"cannot read: {e.strerror}", str(args.file))) from e
    web = info.with_role("web")[0]
    nginx.install_routes(info.directory, web.namespace, text, source)
    return {"tag": args.tag, "routes": text}


def _print_removal(console: Console, removal: RemovalReport) -> None:
    if removal.failures:
        console.print(f"testbed {removal.tag}: not everything could be removed:", markup=False)
        for failure in removal.failures:
            console.print(f"  {failure}", markup=False, soft_wrap=True)
        console.print(f"next: fix the above, then linkgrad testbed down --tag {removal.tag} "
                      "again (safe twice)", markup=False, soft_wrap=True)
    elif removal.removed:
        console.print(f"testbed {removal.tag} removed: its namespaces, processes, cgroups and "
                      "files are gone", markup=False, soft_wrap=True)
    else:
        console.print(f"no testbed {removal.tag}: nothing to remove", markup=False)


def load_text(load: OpenLoopSummary | ClosedLoopSummary) -> str:
    """`testbed load`'s answer for a person: what was sent, what came back, per URL."""
    from testbed.loadgen import ClosedLoopSummary, OpenLoopSummary  # the load's own imports

    if isinstance(load, OpenLoopSummary):
        how = f"open loop at {load.offered_per_s:g} requests/s"
    else:
        think = f", {load.think_s:g} s think time" if load.think_s is not None else ""
        how = f"closed loop of {load.clients} client(s){think}"
    lines = [f"{how} for {load.duration_s:g} s: {load.requests} requests "
             f"({load.achieved_per_s:.1f}/s), {load.errors} failed"]
    if isinstance(load, ClosedLoopSummary) and load.littles_law_per_s is not None:
        lines.append(f"Little's law expects {load.littles_law_per_s:.1f}/s for these clients")
    lag = load.issue_lag_ms
    if lag.p99 is not None and lag.p99 > 10:
        lines.append(f"the client sent late (p99 {lag.p99:.0f} ms behind schedule): the load "
                     "generator itself was short of CPU")
    if load.response_ms:
        width = max(len(u) for u in load.response_ms)
        lines.append(f"{'url':<{width}}  answered  mean ms  median ms")
        lines += [f"{u:<{width}}  {r.count:>8}  {r.mean:>7.1f}  {r.median:>9.1f}"
                  for u, r in sorted(load.response_ms.items())]
    return "\n".join(lines)


def _print_testbed(console: Console, info: DescribedTestbed,
                   services: dict[str, bool] | None = None) -> None:
    """`up`'s and `status`'s table of hosts, where to reach them (with each host's cgroup
    where the terminal is wide enough), why the hosts have no cgroups if they have none
    and, for `status`, whether every service runs."""
    table = _hosts_table(info, any(h.cgroups for h in info.hosts))
    if Measurement.get(console, console.options, table).maximum > console.width:
        table = _hosts_table(info, False)  # `--json` has them
    console.print(table)
    console.print(f"front end: {info.frontend_url}  web log: {info.web_log.path}"
                  f"\nssh: ssh -F {info.ssh_config} <host>")
    if info.cgroups_note is not None:
        console.print(f"[yellow]cgroups: {escape(info.cgroups_note)}")
    if services is not None:
        down_ = [k for k, ok in services.items() if not ok]
        console.print("all services running" if not down_ else
                      f"not running: {', '.join(down_)}", markup=False, soft_wrap=True)


def _hosts_table(info: DescribedTestbed, cgroup: bool) -> Table:
    table = Table("host", "namespace", "address", "roles", *(["cgroup"] if cgroup else []),
                  title=f"testbed {info.tag}")
    for h in info.hosts:
        table.add_row(h.name, h.namespace, h.address, ", ".join(h.roles),
                      *([_cgroup_name(h.cgroups)] if cgroup else []))
    return table


def _cgroup_name(dirs: dict[str, Path]) -> str:
    """The host's cgroup below each hierarchy's root, as /proc/PID/cgroup names it: the same
    `/linkgrad-TAG/HOST` in every v1 controller; "-": none."""
    return next((f"/{d.parent.name}/{d.name}" for d in dirs.values()), "-")


COMMANDS = (
    CommandGroup(
        "testbed", "a real multi-tier application on local namespaces",
        "Hosts as network namespaces on a bridge, each with sshd; nginx, app servers (uvicorn), "
        "PostgreSQL and memcached started in them, or with --app mediawiki Apache + mod_php "
        "running MediaWiki and MariaDB, or with --app redmine Apache + Passenger running "
        "Redmine and PostgreSQL. Needs root.",
        (Command("up", "build the hosts and start the application",
                 "Build the testbed's hosts (network namespaces on a bridge, or Mininet with "
                 "--mininet) and start the application in them.",
                 _up_arguments, testbed_command,
                 example="linkgrad testbed up --services 10 --tag g10"),
         Command("down", "remove everything the testbed made (safe twice)",
                 "Remove everything the testbed TAG made (safe twice).",
                 _tag_arguments, testbed_command, example="linkgrad testbed down --tag g10"),
         Command("status", "what is up",
                 "What is up: the hosts with their namespaces, addresses and roles, the front "
                 "end, the web log, the SSH config and whether every service runs.",
                 _tag_arguments, testbed_command, example="linkgrad testbed status"),
         Command("load", "load from the client host (open or closed loop)",
                 "Load from the client host to the front end for --duration s, mixed by --mix: "
                 "open-loop Poisson arrivals at --rate requests/s, or a closed loop of "
                 "--clients users who each think --think-s on average between a response and "
                 "their next request (throughput then falls when responses slow, as with real "
                 "users); --output keeps the client-side latencies.",
                 _load_arguments, testbed_command,
                 example="linkgrad testbed load --clients 8 --duration 60"),
         Command("routes", "install a routing policy in the front end (nginx)",
                 "Replace nginx's routes.conf (which must define $linkgrad_upstream: a map or "
                 "split_clients naming app hosts, e.g. `linkgrad route --nginx app1 app2`'s "
                 "output) and reload gracefully. `--default` puts back the first app server for "
                 "everything.",
                 _routes_arguments, testbed_command,
                 example="linkgrad testbed routes --default"))),
)

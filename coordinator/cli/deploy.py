"""`linkgrad deploy EXPERIMENT.yaml [--dry-run]`: linkgrad put on every host of an experiment
that lacks it or has another one, into the venv `ssh.python` names, from a wheelhouse built
here (`coordinator.deploy`). Ends with one table and what to do next."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from rich.table import Table

from coordinator.cli.command import EXITS, Command
from coordinator.cli.terminal import terminal
from coordinator.config.experiment import Experiment
from coordinator.config.experiment_file import load_experiment
from coordinator.config.experiment_files import field_problem
from coordinator.config.strict_json import dumps
from coordinator.deploy.deploy_hosts import Deployment, deploy
from coordinator.deploy.host_facts import FEATURES, feature_state
from coordinator.deploy.plan import HostOutcome, venv_of
from coordinator.live.session import check_local_files
from linkgrad.errors import InputError

MARK = {"yes": "yes", "no": "NO", "unknown": "?"}
SHORT = {"nfqueue": "nfq", "sock_diag": "diag", "tracing": "trace", "netem": "netem",
         "cgroups": "cgrp"}


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", type=Path, help="experiment YAML: its hosts and ssh settings")
    p.add_argument("--dry-run", action="store_true",
                   help="probe every host and say what would be done; change nothing")


def target_venv(experiment: Experiment) -> str:
    """The venv deploy installs into: the one `ssh.python` runs from. InputError at that
    field when it names no venv of linkgrad's own."""
    assert experiment.ssh is not None
    python = experiment.ssh.python
    venv = venv_of(python)
    if venv is None:
        raise InputError(field_problem(
            experiment, ("ssh", "python"),
            f"{python!r} is no venv's interpreter: deploy installs linkgrad into a venv of its "
            "own on each host and the daemons run from it; give its python, e.g. "
            ".linkgrad/venv/bin/python (a relative path is in the SSH user's home)"))
    if Path(venv).resolve() == Path(sys.prefix).resolve():
        raise InputError(field_problem(
            experiment, ("ssh", "python"),
            f"{python} is this linkgrad's own venv: the hosts share this machine's files (a "
            "testbed's do), so there is nothing to deploy"))
    return venv


def _row(o: HostOutcome) -> list[str]:
    f = o.facts
    python = ".".join(map(str, f.python)) if f and f.python else ("none" if f else "")
    marks = [MARK[feature_state(f, n)[0]] if f else "" for n in FEATURES]
    result = o.result
    if o.seconds is not None and o.result == "installed":
        result += f" {o.seconds:.0f}s"
    if o.plan is not None and o.result in ("present", "installed", "would install") \
            and not o.plan.injector:
        result += ", no injector"
    return [o.name, python, *marks, result]


def _notes(deployment: Deployment) -> list[str]:
    """Each reason once, with the hosts it is about (fifty hosts, one line)."""
    hosts_of: dict[str, list[str]] = defaultdict(list)
    for o in deployment.outcomes:
        if o.result in ("cannot", "failed") or (o.detail and o.result == "would install"):
            hosts_of[f"{o.result}: {o.detail}"].append(o.name)
        for w in o.warnings:
            hosts_of[w].append(o.name)
    return [f"{', '.join(names)}: {message}" for message, names in hosts_of.items()]


def _summary(d: Deployment, dry_run: bool) -> str:
    n = len(d.outcomes)
    ready = sum(o.ready for o in d.outcomes)
    if dry_run:
        would = sum(o.result == "would install" for o in d.outcomes)
        blocked = sum(o.result in ("cannot", "failed") for o in d.outcomes)
        return (f"dry run: would install on {would} of {n} host(s); {n - would - blocked} "
                f"have this linkgrad; {blocked} cannot be deployed to")
    return f"{ready} of {n} host(s) ready: linkgrad {d.version} (source {d.digest}) in {d.venv}"


def deploy_command(args: argparse.Namespace) -> int:
    experiment = load_experiment(args.experiment)
    venv = target_venv(experiment)
    ends = check_local_files(experiment)
    err = terminal(stderr=True)
    d = deploy(experiment, ends, venv, args.dry_run,
               lambda m: err.print(f"deploy: {m}", markup=False, soft_wrap=True))
    ok = args.dry_run or all(o.ready for o in d.outcomes)
    if args.json:
        print(dumps({"venv": d.venv, "linkgrad": d.version, "source": d.digest,
                     "dry_run": args.dry_run, "hosts": [{
                         "name": o.name, "result": o.result, "detail": o.detail,
                         "seconds": o.seconds, "ready": o.ready,
                         "python": ".".join(map(str, o.facts.python))
                         if o.facts and o.facts.python else None,
                         "features": {n: feature_state(o.facts, n)[0] for n in FEATURES}
                         if o.facts else None,
                         "warnings": o.warnings} for o in d.outcomes]}))
        return 0 if ok else 1
    out = terminal()
    out.print(_summary(d, args.dry_run), markup=False, soft_wrap=True)
    table = Table("host", "python", *(SHORT[n] for n in FEATURES), "linkgrad")
    for o in d.outcomes:
        table.add_row(*_row(o))
    out.print(table)
    for note in _notes(d):
        out.print(f"- {note}", markup=False, soft_wrap=True)
    if args.dry_run:
        out.print(f"next: linkgrad deploy {args.experiment}", markup=False)
    elif ok:
        out.print(f"next: linkgrad profile {args.experiment} --duration 60", markup=False)
    else:
        out.print(f"next: mend what is said above, then linkgrad deploy {args.experiment} "
                  "again (hosts already done are skipped)", markup=False, soft_wrap=True)
    return 0 if ok else 1


COMMANDS = (
    Command("deploy", "put linkgrad on every host of an experiment",
            "Probes every host (python3, a C compiler and libnetfilter-queue for the injector, "
            "the kernel's NFQUEUE, sock_diag, tracing, netem and cgroups), then installs "
            "linkgrad where it is missing or another one: a wheelhouse built here (pip "
            "download, at the versions installed here) is copied over SSH and installed with "
            "pip --no-index into the venv ssh.python names. Hosts already current are left "
            "alone; --dry-run changes nothing. Exit status 1 unless every host ends ready.",
            _arguments, deploy_command,
            epilog="Kernel features: yes, NO, or ? (not known: no kernel configuration to "
            "read). See docs/hosts.md, 'Deploying'.",
            example="linkgrad deploy experiments/testbed-quick.yaml --dry-run",
            exits=((0, "every host ready (or --dry-run: what it would do, said)"),
                   (1, "a host not ready: each named with what it lacks"), *EXITS[2:])),
)

"""Options spelled the same in every command, and the old spellings they replace."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_gradients", "add_log_reading", "add_output", "old_spelling"]


class _OldSpelling(argparse.Action):
    """An option's former spelling: it works for this release, with a note on stderr."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"linkgrad: {option_string} is now {self.new} (the old spelling goes after this "
              "release)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def old_spelling(p: argparse.ArgumentParser, old: str, new: str, dest: str,
                 **kwargs: Any) -> None:
    """`old` as a hidden alias of the option `new` (stored in `dest`)."""
    p.add_argument(old, dest=dest, action=_OldSpelling, new=new, help=argparse.SUPPRESS,
                   default=argparse.SUPPRESS, **kwargs)


def add_output(p: argparse.ArgumentParser, what: str, old: str | None = None,
               metavar: str = "FILE") -> None:
    """`--output FILE` (args.output): the one spelling of a command's output file."""
    p.add_argument("--output", type=Path, metavar=metavar, help=what)
    if old is not None:
        old_spelling(p, old, "--output", "output", type=Path, metavar=metavar)


def add_gradients(p: argparse.ArgumentParser) -> None:
    """`--gradients` (args.gradients, a list) and `--link`: the one spelling of the gradients
    a what-if command starts from, a run's or what `gradient --json` printed."""
    p.add_argument("--gradients", required=True, type=Path, action="append",
                   metavar="RUN/gradients.json",
                   help="a run's gradients (its directory also gives graph and baseline), or "
                   "what `linkgrad gradient --json` printed (repeatable: one per link)")
    p.add_argument("--link", metavar="SRC->DST",
                   help="the hosts of the link a `gradient --json` answer measured, where its "
                   "injection record does not name them")


def add_log_reading(p: argparse.ArgumentParser, given_with: str | None = None) -> None:
    """`--format`, `--log-format`, `--transaction`: how a web log is read and its requests
    grouped, the same in every command that reads one (`given_with`: the option that gives
    the log, where it is optional)."""
    said = f"with {given_with}: " if given_with else ""
    p.add_argument("--format", choices=["nginx", "apache", "csv"], default=None,
                   help=f"{said}the log's format (default: csv for *.csv, else nginx)")
    p.add_argument("--log-format", metavar="STR", default=None,
                   help=f"{said}the nginx log_format or Apache LogFormat it was written with")
    p.add_argument("--transaction", action="append", default=[], metavar="NAME=REGEX",
                   help=f"{said}a transaction, the requests whose path+query matches REGEX "
                   "(repeatable; default: one per path)")

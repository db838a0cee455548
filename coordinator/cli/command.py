"""A subcommand of the `linkgrad` command line, described as data.

Each command module exports the commands it implements as `COMMANDS`; coordinator/cli/main.py
lists those in one place and one builder turns them into argparse subparsers, adding what every
subcommand has: `--json`, the help layout, and usage errors reported as InputError (exit 2).

Only the description lives here: this module imports no argparse (the presentation is the
coordinator's), so the callables are typed loosely. `add_arguments` receives the subcommand's
`argparse.ArgumentParser`, `run` the parsed `argparse.Namespace` and returns the exit code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    """One subcommand: `summary` is its line in the parent's --help; `description` and
    `epilog` head and close its own --help; `add_arguments` adds every option but `--json`,
    which every command gets (with `json_help` as its help)."""

    name: str
    summary: str
    description: str
    add_arguments: Callable[[Any], None]
    run: Callable[[Any], int]
    epilog: str | None = None
    json_help: str = "print machine-readable JSON"


@dataclass(frozen=True)
class CommandGroup:
    """A subcommand that only chooses one of its own (`linkgrad testbed up`). The chosen name is
    stored as `dest`; each member is a Command, with its own `--json` and `run`."""

    name: str
    summary: str
    description: str
    commands: tuple[Command, ...]
    epilog: str | None = None

    @property
    def dest(self) -> str:
        return f"{self.name}_command"

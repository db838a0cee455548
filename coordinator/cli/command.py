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

# what every command's exit status means, unless it says more (`Command.exits`)
EXITS: tuple[tuple[int, str], ...] = (
    (0, "done"),
    (1, "a runtime failure: a host, a daemon or the network (a bug says it is one)"),
    (2, "bad input: the file, line and field are named"),
    (130, "interrupted (Ctrl-C): nothing left behind, what was measured kept"),
)


@dataclass(frozen=True)
class Command:
    """One subcommand: `summary` is its line in the parent's --help; `description` and
    `epilog` head and close its own --help, with `example` (a command line that runs as
    written, where the README's main job has been run) and `exits` after them; `add_arguments`
    adds every option but `--json`, which every command gets (with `json_help` as its help)."""

    name: str
    summary: str
    description: str
    add_arguments: Callable[[Any], None]
    run: Callable[[Any], int]
    epilog: str | None = None
    json_help: str = "print machine-readable JSON"
    example: str | None = None  # None: the epilog has its own examples
    exits: tuple[tuple[int, str], ...] = EXITS

    @property
    def help_epilog(self) -> str:
        """The epilog, the example and the exit codes, as --help ends."""
        parts = [self.epilog] if self.epilog else []
        if self.example:
            parts.append(f"example:\n  {self.example}")
        parts.append("exit codes:\n" + "\n".join(f"  {code:<4} {meaning}"
                                                 for code, meaning in self.exits))
        return "\n\n".join(parts)


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

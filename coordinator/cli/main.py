"""The `linkgrad` command line: every subcommand listed in one place, one parser built from
them, the chosen one run, and errors turned into exit codes and messages (text or JSON).

Each command module exports its subcommands as `COMMANDS` (coordinator.cli.command describes them);
`add_commands` gives every one the same `--json`, help layout and usage-error handling.

Exit codes: 0 success, 2 bad input (file, line, field named), 1 runtime failure.
"""

from __future__ import annotations

import argparse
import errno
import importlib.metadata
import os
import re
import select
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.cli.catalog import CATALOG, LOG_HELP, load_command
from coordinator.cli.command import Command, CommandGroup
from coordinator.cli.internal_error import internal_error_details
from coordinator.config.strict_json import dumps
from linkgrad.errors import InputError, LinkgradError, Problem

DESCRIPTION = """\
linkgrad measures how much each transaction's mean response time depends on the latency of
each network link (the link gradient), by injecting small square-wave delays and reading the
response times the web server already logs."""

class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as InputError (exit 2, one message format)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(Problem(message))


class _Help(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written where a paragraph has indented lines (examples);
    other paragraphs are prose, wrapped to the terminal."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(self._fill_paragraph(p, width, indent) for p in text.split("\n\n"))

    def _fill_paragraph(self, text: str, width: int, indent: str) -> str:
        if re.search(r"^[ \t]", text, re.MULTILINE):
            return super()._fill_text(text, width, indent)
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent,
                             subsequent_indent=indent)


def add_commands(sub: Any, commands: Sequence[Command | CommandGroup]) -> None:
    """One subparser per command on `sub` (an argparse subparsers action), each with --json."""
    for c in commands:
        p = sub.add_parser(c.name, help=c.summary, description=c.description,
                           epilog=c.help_epilog if isinstance(c, Command) else c.epilog,
                           formatter_class=_Help)
        if isinstance(c, CommandGroup):
            add_commands(p.add_subparsers(dest=c.dest, required=True), c.commands)
        else:
            c.add_arguments(p)
            p.add_argument("--json", action="store_true", help=c.json_help)
            p.set_defaults(run=c.run)


def version() -> str:
    try:
        return importlib.metadata.version("linkgrad")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "unknown (not installed)"


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The whole command line; only the command `argv` chooses is built in full (its module
    imported), the others are their help lines: `linkgrad --help` imports no command."""
    parser = _Parser(prog="linkgrad", description=DESCRIPTION, epilog=LOG_HELP,
                     formatter_class=_Help)
    parser.add_argument("--version", action="version", version=f"linkgrad {version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    chosen = next((a for a in argv if not a.startswith("-")), None)  # no top option takes
    for entry in CATALOG:  # a value, so the first word is the command
        if entry.name == chosen:
            add_commands(sub, [load_command(entry)])
        else:
            sub.add_parser(entry.name, help=entry.summary)
    return parser


def _print_error(error: LinkgradError, as_json: bool) -> None:
    kind = "input" if isinstance(error, InputError) else "runtime"
    print(f"linkgrad: error: {error}", file=sys.stderr)
    if as_json:  # after the message: a reader that left must not silence it
        print(dumps({"error": {"kind": kind, "message": str(error)}}, indent=None))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _run(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()  # a reader that left is found here, not at the interpreter's exit
        return code
    except BrokenPipeError:  # `linkgrad ... | head`: the reader left; no traceback for it
        _stdout_to_devnull()
        return 1  # as rich's console does when its output's reader leaves


def _run(argv: list[str]) -> int:
    as_json = "--json" in argv
    try:
        if not argv:  # what there is to do, rather than a usage error
            build_parser().print_help()
            return 0
        args = build_parser(argv).parse_args(argv)
        command: Callable[[argparse.Namespace], int] = args.run
        return command(args)
    except LinkgradError as e:
        _print_error(e, as_json)
        return e.exit_code
    except KeyboardInterrupt:
        print("linkgrad: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as e:
        if _reader_left():
            raise  # main's
        return _internal_error(e, as_json)  # another pipe than stdout: a bug
    except OSError as e:
        if e.errno != errno.ENAMETOOLONG:
            return _internal_error(e, as_json)
        # a name given (a path, or one made from an experiment's name) longer than the file
        # system takes: wherever it is looked at (Path.exists() raises it), it is bad input
        name = os.fsdecode(e.filename) if e.filename is not None else "a path given"
        _print_error(InputError(Problem(
            f"a name in it is longer than the file system allows ({e.strerror})",
            name if len(name) <= 120 else f"{name[:100]}...{name[-16:]}")), as_json)
        return InputError.exit_code
    except Exception as e:  # the last resort: not a LinkgradError, so a bug
        return _internal_error(e, as_json)


def _reader_left() -> bool:
    """Whether stdout is a pipe whose reader has gone (the kernel flags it POLLERR)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError):
        return False


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


INTERNAL_ERROR = "linkgrad: internal error (a bug, please report it)"


def _internal_error(error: Exception, as_json: bool) -> int:
    """An exception that is not a LinkgradError is a bug: one sentence on stderr (which the
    fuzz campaign counts as a failure), the traceback in a file of its own, exit 1."""
    summary, where = internal_error_details(error)
    print(f"{INTERNAL_ERROR}: {summary}; details in {where}", file=sys.stderr)
    if as_json:  # after the sentence: a reader that left must not silence it
        print(dumps({"error": {"kind": "internal", "message": summary, "details": where}},
                    indent=None))
    return 1


if __name__ == "__main__":
    sys.exit(main())

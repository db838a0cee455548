"""The one exception tree of linkgrad.

`InputError` is bad input from the user (exit code 2): it names the file, line and field.
`RuntimeFailure` is everything else that stops a command (exit code 1).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["InputError", "LinkgradError", "Problem", "RuntimeFailure"]


class LinkgradError(Exception):
    """Base of every error linkgrad raises on purpose."""

    exit_code = 1


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where it is and what was expected."""

    message: str
    file: str | None = None
    line: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = ":".join(str(p) for p in (self.file, self.line) if p is not None)
        field = f" field {self.field!r}" if self.field else ""
        prefix = f"{where}:{field}" if where else (field.strip() + ":" if field else "")
        return f"{prefix} {self.message}".strip()


class InputError(LinkgradError):
    """The user's input is wrong; carries every problem found, not just the first."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | Problem | str) -> None:
        if isinstance(problems, str):
            problems = [Problem(problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class RuntimeFailure(LinkgradError):
    """A command could not finish for a reason other than bad input."""

    exit_code = 1

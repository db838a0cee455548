"""The one way the CLI makes a rich console."""

from __future__ import annotations

from rich.console import Console


def terminal(stderr: bool = False) -> Console:
    """A console that prints text as given: rich's highlighter (numbers, paths, URLs in
    colour) is quadratic in a long unbroken word, and errors quote the user's values (a
    100,000-character host address took minutes to print)."""
    return Console(stderr=stderr, highlight=False)

"""The one way the CLI makes a rich console."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.table import Table


def terminal(stderr: bool = False) -> Console:
    """A console that prints text as given: rich's highlighter (numbers, paths, URLs in
    colour) is quadratic in a long unbroken word, and errors quote the user's values (a
    100,000-character host address took minutes to print)."""
    return Console(stderr=stderr, highlight=False)


MAX_NAME_WIDTH = 32  # a name column may take this much of 80 before it wraps


def names_table(name_header: str, names: Iterable[str], *headers: str,
                title: str | None = None) -> Table:
    """A table whose first column holds names (transactions, links): as wide as its longest
    name up to MAX_NAME_WIDTH, and a longer one folded onto more lines, never cut to a
    prefix two names share (`/sequentia…` for /sequential2 and /sequential6)."""
    longest = max((len(n) for n in names), default=len(name_header))
    table = Table(title=title)
    table.add_column(name_header, overflow="fold",
                     min_width=min(max(longest, len(name_header)), MAX_NAME_WIDTH))
    for header in headers:
        table.add_column(header, overflow="fold")
    return table

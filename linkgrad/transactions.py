"""Transactions: classes of requests named by the user (NAME=REGEX) or one per URL path."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from linkgrad.errors import InputError, Problem

__all__ = [
    "TransactionPattern",
    "factorize",
    "group_by_transaction",
    "parse_transaction_option",
    "patterns_from",
]


@dataclass(frozen=True)
class TransactionPattern:
    name: str
    regex: re.Pattern[str]


def parse_transaction_option(text: str) -> TransactionPattern:
    """`NAME=REGEX` from `--transaction`; the regex is searched in the URL path + query."""
    name, sep, pattern = text.partition("=")
    if not sep or not name.strip() or not pattern:
        raise InputError(Problem(f"expected NAME=REGEX, got {text!r}", field="--transaction"))
    try:
        regex = re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as e:  # a count or nesting too large
        raise InputError(
            Problem(f"bad regular expression {pattern[:80]!r}{'...' if len(pattern) > 80 else ''}"
                    f": {e}", field="--transaction")
        ) from e
    return TransactionPattern(name.strip(), regex)


def patterns_from(transactions: dict[str, str]) -> list[TransactionPattern]:
    """Patterns from an already validated name -> regex mapping (an experiment's)."""
    return [TransactionPattern(name, re.compile(regex)) for name, regex in transactions.items()]


def group_by_transaction(
    urls: np.ndarray, patterns: list[TransactionPattern]
) -> dict[str, np.ndarray]:
    """Row indices of each transaction.

    With patterns, a request belongs to every transaction whose regex matches (classes may
    overlap, e.g. `all=.` beside `bid=/bid`). Without, each URL path is a transaction, in
    sorted order.
    """
    distinct, code_of_row = factorize(urls)
    if patterns:
        groups = {}
        for p in patterns:
            hit = np.array([p.regex.search(u) is not None for u in distinct], dtype=bool)
            groups[p.name] = np.flatnonzero(hit[code_of_row])
        return groups
    paths, path_of_distinct = factorize([u.split("?", 1)[0] for u in distinct])
    rows = _rows_by_code(path_of_distinct[code_of_row], len(paths))
    return {paths[i]: rows[i] for i in sorted(range(len(paths)), key=paths.__getitem__)}


def factorize(values: Iterable[str]) -> tuple[list[str], np.ndarray]:
    """(distinct values in first-seen order, code of each value) through a dict.

    Memory is the distinct strings plus one integer per row. `np.unique` over `astype(str)`
    made a fixed-width array as wide as the longest URL for every row: one 8 KB URL in a 58k
    line log took 5.5 GB.
    """
    codes: dict[str, int] = {}
    code = codes.setdefault
    of_row = np.fromiter((code(v, len(codes)) for v in values), dtype=np.intp)
    return list(codes), of_row


def _rows_by_code(code_of_row: np.ndarray, n_codes: int) -> list[np.ndarray]:
    """Ascending row indices of each code: one sort, not one pass over the rows per code."""
    order = np.argsort(code_of_row, kind="stable")
    ends = np.cumsum(np.bincount(code_of_row, minlength=n_codes))
    return np.split(order, ends[:-1])

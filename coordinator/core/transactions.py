"""Transactions: classes of requests named by the user (NAME=REGEX) or one per URL path."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from common.errors import InputError, Problem


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
    except re.error as e:
        raise InputError(
            Problem(f"bad regular expression {pattern!r}: {e}", field="--transaction")
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
    overlap, e.g. `all=.` beside `bid=/bid`). Without, each URL path is a transaction.
    """
    unique, inverse = np.unique(urls.astype(str), return_inverse=True)
    if patterns:
        groups = {}
        for p in patterns:
            hit = np.array([p.regex.search(u) is not None for u in unique], dtype=bool)
            groups[p.name] = np.flatnonzero(hit[inverse])
        return groups
    paths = np.array([u.split("?", 1)[0] for u in unique], dtype=object)
    path_names, path_of_unique = np.unique(paths.astype(str), return_inverse=True)
    path_of_row = path_of_unique[inverse]
    return {str(name): np.flatnonzero(path_of_row == i) for i, name in enumerate(path_names)}

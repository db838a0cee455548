import numpy as np
import pytest

from linkgrad.errors import InputError
from linkgrad.transactions import group_by_transaction, parse_transaction_option

URLS = np.array(["/item?id=1", "/bid", "/item?id=2", "/bid?x=1", "/"], dtype=object)


def test_default_is_one_transaction_per_path():
    groups = group_by_transaction(URLS, [])
    assert {k: v.tolist() for k, v in groups.items()} == {
        "/": [4], "/bid": [1, 3], "/item": [0, 2]}


def test_patterns_may_overlap():
    patterns = [parse_transaction_option("item=^/item"), parse_transaction_option("all=.")]
    groups = group_by_transaction(URLS, patterns)
    assert groups["item"].tolist() == [0, 2]
    assert groups["all"].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("text", ["noequals", "=^/x", "bad=(unclosed"])
def test_bad_transaction_options_name_the_option(text):
    with pytest.raises(InputError, match="--transaction"):
        parse_transaction_option(text)


def test_grouping_memory_does_not_grow_with_the_longest_url():
    """One 1 MB URL among 20,000 rows: fixed-width strings would take 80 GB; a dict of the
    distinct URLs takes a few MB."""
    import tracemalloc

    urls = np.empty(20_000, dtype=object)
    urls[:] = ["/bid", "/item?id=1"] * 10_000
    urls[7] = "/search?q=" + "x" * 1_000_000
    tracemalloc.start()
    try:
        groups = group_by_transaction(urls, [])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20e6
    assert [len(groups[p]) for p in ("/bid", "/item", "/search")] == [10_000, 9_999, 1]

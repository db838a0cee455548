import numpy as np
import pytest

from common.errors import InputError
from coordinator.core.transactions import group_by_transaction, parse_transaction_option

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

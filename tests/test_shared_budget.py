"""SNAP's CPU budget split among the hosts that share a kernel (pure)."""

import pytest

from linkgrad.snap.shared_budget import shared_budgets


def test_hosts_of_one_kernel_share_the_budget_and_it_is_said():
    kernels = {f"s{i}": "boot-a" for i in range(50)} | {"db": "boot-b", "far": None}
    budgets, said = shared_budgets(kernels, 2.0, 5.0)
    assert budgets["s7"].sharing == 50
    assert budgets["s7"].cpu_lower_pct == pytest.approx(0.04)
    assert budgets["s7"].cpu_upper_pct == pytest.approx(0.1)
    assert (budgets["db"].cpu_lower_pct, budgets["db"].cpu_upper_pct) == (2.0, 5.0)
    assert (budgets["far"].cpu_upper_pct, budgets["far"].sharing) == (5.0, 1)  # unknown: whole
    assert said == ("SNAP's CPU budget (2-5% of a core) is a machine's: up to 50 hosts share "
                    "one kernel, so each polls within 0.04-0.1% (slower table reads where its "
                    "own cost is above that)")


def test_hosts_of_their_own_keep_the_budget_whole_and_nothing_is_said():
    budgets, said = shared_budgets({"a": "1", "b": "2", "c": None}, 2.0, 5.0)
    assert said is None
    assert {b.cpu_upper_pct for b in budgets.values()} == {5.0}
    assert shared_budgets({}, 2.0, 5.0) == ({}, None)

"""Linking within a time budget: a busy server's calls past its share are linked greedily,
then by §5.1, and paths.json says so; the clock is injected, so nothing here is timed."""

from __future__ import annotations

import itertools
from dataclasses import replace

from linkgrad.paths.analysis import analyse
from linkgrad.paths.budget import Budget, linking_lines, progress_line
from linkgrad.paths.structural import context_probabilities
from linkgrad.paths.wap5 import LinkingSettings, wap5_probabilities
from testbed.synthetic_paths import busy_server, generate

SETTINGS = LinkingSettings(window_s=2.0)


def _ticking(step_s: float):
    """A clock that moves `step_s` each time it is read: work costs time by how often it
    looks at the clock, so a test can run out of budget deterministically."""
    ticks = itertools.count()
    return lambda: next(ticks) * step_s


def test_a_busy_server_over_its_budget_falls_back_and_says_so():
    # an event loop: its thread says nothing, every call's context is a choice
    s = generate(replace(busy_server(20, 20), threaded=frozenset()), 20, 8, seed=3)
    budget = Budget(1.0, clock=_ticking(0.02), node_names=s.trace.nodes)
    probs = context_probabilities(s.trace, SETTINGS, budget=budget)
    # narrower, then one hypothesis, then §5.1 (the clock's steps may skip the first)
    assert {f.node for f in budget.fallbacks} == {"web"}
    assert [f.linker for f in budget.fallbacks] in (["narrow", "greedy", "wap5"],
                                                    ["greedy", "wap5"])
    assert budget.passes_cut == 3  # the fitting passes would not fit in their share
    # every message still has §5.1's candidates or a decided parent: nothing is dropped
    wap5 = wap5_probabilities(s.trace, SETTINGS)
    assert len(probs.p_spontaneous) == len(wap5.p_spontaneous)
    linked = probs.links.start[1:] > probs.links.start[:-1]
    assert linked.sum() >= (wap5.links.start[1:] > wap5.links.start[:-1]).sum() * 0.99


def test_without_a_budget_nothing_falls_back():
    s = generate(busy_server(3, 10), 10, 4, seed=1)
    budget = Budget(None, clock=_ticking(0.02), node_names=s.trace.nodes)
    context_probabilities(s.trace, SETTINGS, budget=budget)
    assert budget.fallbacks == []
    assert budget.passes_cut == 0


def test_paths_json_keeps_the_budget_and_the_fallbacks():
    s = generate(busy_server(3, 10), 10, 4, seed=1)
    seen = []
    result = analyse(s.trace, "context", SETTINGS, budget=1e-9, progress=seen.append)
    assert result.budget.fraction == 1e-9
    assert result.budget.seconds < 1e-8
    assert {f.node for f in result.fallbacks} == {"web"}
    assert {f.linker for f in result.fallbacks} <= {"narrow", "greedy", "wap5"}
    lines = linking_lines(result)
    assert lines[0].startswith("linked by context in ")
    assert any(line.startswith("  web: §5.1 for the rest") for line in lines)
    assert all(len(line) <= 80 for line in lines), lines
    unlimited = analyse(s.trace, "context", SETTINGS, budget=None)
    assert unlimited.fallbacks == ()
    assert unlimited.budget.seconds is None


def test_progress_lines_fit_80_columns():
    budget = Budget(6.0, progress=(heard := []).append, clock=lambda: 0.0)
    budget.tell(100_000, 9_876_543, 5, 5, 0.5)  # within the first second: not said
    budget.tell(123_456, 9_876_543, 5, 5, 1.0)
    budget.tell(200_000, 9_876_543, 5, 5, 1.5)  # within a second of the last: not said
    budget.tell(300_000, 9_876_543, 5, 5, 2.0)
    assert [h.linked for h in heard] == [123_456, 300_000]
    line = progress_line(heard[0])
    assert line == "linking: pass 5/5, 123,456 of 9,876,543 events, 1.0 s of 6.0 s"

"""The off/on alternation of `predict --validate`: its schedule and which requests count."""

from __future__ import annotations

import numpy as np
import pytest

from injector.schedule import Caps, build_schedule
from linkgrad.alternation import NEITHER, OFF, ON, Alternation
from linkgrad.protocol.injector import SquareSchedule

ALT = Alternation.for_window(1000.0, 30.0, cycles=3, guard_s=2.0)  # sub-windows of 14 s


def test_each_side_is_measured_for_the_window_in_all():
    assert ALT.half_s == 14.0
    assert ALT.usable_s == 10.0
    assert ALT.end_s == 1000.0 + 7 * 14.0  # off, on, off, on, off, on, off


def test_the_injector_schedule_is_on_exactly_in_the_odd_sub_windows():
    schedule = build_schedule(SquareSchedule.of(ALT.wave(10.0)), now_s=990.0, caps=Caps())
    mids = ALT.start_s + ALT.half_s * (np.arange(7) + 0.5)
    assert [schedule.delay_s(t) for t in mids] == [0.0, 0.01] * 3 + [0.0]
    assert schedule.delay_s(ALT.start_s - 1) == 0.0
    assert schedule.delay_s(ALT.end_s) == 0.0


def test_requests_near_an_edge_or_outside_count_for_neither_side():
    starts = np.array([999.0, 1000.5, 1002.0, 1011.9, 1012.0, 1016.5, 1098.0, 1097.9])
    side, _ = ALT.sides(starts)
    assert side.tolist() == [NEITHER, NEITHER, OFF, OFF, NEITHER, ON, NEITHER, NEITHER]


def test_measured_time_lays_each_sides_sub_windows_end_to_end():
    # the second off sub-window (k=2) begins at 1028; its first measured instant is 1030
    starts = np.array([1002.0, 1030.0, 1016.0, 1044.0, 1056.0 + 2 + 9.5])
    side, measured = ALT.sides(starts)
    assert side.tolist() == [OFF, OFF, ON, ON, OFF]
    assert measured.tolist() == pytest.approx([0.0, 10.0, 0.0, 10.0, 29.5])


def test_a_linear_drift_moves_both_sides_alike():
    """What interleaving is for: a load that rises steadily over the whole alternation shifts
    the off and on means by the same amount (an off sub-window at each end)."""
    starts = np.linspace(ALT.start_s, ALT.end_s, 20001)[:-1]
    side, _ = ALT.sides(starts)
    drift = 0.05 * (starts - ALT.start_s)  # ms, rising
    assert drift[side == ON].mean() == pytest.approx(drift[side == OFF].mean(), abs=1e-3)


def test_bad_plans_are_refused():
    with pytest.raises(ValueError, match=r"window_s=0\.0"):
        Alternation.for_window(0.0, 0.0, cycles=3, guard_s=2.0)
    with pytest.raises(ValueError, match="cycles=0"):
        Alternation.for_window(0.0, 30.0, cycles=0, guard_s=2.0)

"""benchmarks/idle_slopes.py: which side of the delay each logged request was on."""

import numpy as np
import pytest

from benchmarks.idle_slopes import block_sides
from benchmarks.slopes import slope
from linkgrad.alternation import NEITHER, OFF, ON

BLOCKS = [(OFF, 10.0, 12.0), (ON, 12.5, 14.0), (OFF, 14.5, 16.0)]


def test_each_request_takes_the_side_of_the_block_it_started_in() -> None:
    start_s = np.array([10.0, 11.9, 12.6, 13.99, 15.0])
    assert block_sides(start_s, BLOCKS).tolist() == [OFF, OFF, ON, ON, OFF]


def test_a_request_between_or_outside_the_blocks_is_on_neither_side() -> None:
    start_s = np.array([9.0, 12.2, 14.0, 16.0, 20.0])
    assert block_sides(start_s, BLOCKS).tolist() == [NEITHER] * 5


def test_a_start_stamp_truncated_to_the_millisecond_still_counts() -> None:
    start_s = np.array([12.5 - 0.001, 12.5 - 0.003])
    assert block_sides(start_s, BLOCKS).tolist() == [ON, NEITHER]
    assert block_sides(start_s, BLOCKS, slack_s=0.005).tolist() == [ON, ON]


def test_the_slope_is_the_difference_of_means_over_the_applied_delay() -> None:
    on_s, off_s = np.array([0.110, 0.130]), np.array([0.050, 0.070])
    result = slope(on_s, off_s, applied_ms=2.0)
    assert result["slope"] == pytest.approx(30.0)  # (120 - 60) ms / 2 ms
    assert result["se"] == pytest.approx(np.sqrt(200 / 2 + 200 / 2) / 2.0)  # Welch's

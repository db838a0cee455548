"""The delay a link is measured at: wanted precision, rough gradients, growth from a small
start, the effect cap (pure)."""

import numpy as np
import pytest

from coordinator.config.experiment import Parameters
from linkgrad.spectral.wave_plan import (
    FIRST_DELAY_S,
    Precision,
    RoughGradient,
    WavePlan,
    next_delay,
    plan_wave,
    precision_shortfall,
    training_needed_s,
)

PLAN = WavePlan(period_s=10.0, cycles=6, magnitude_s=FIRST_DELAY_S, n_bins=32,
                noise_s={"a": 0.002}, effect_cap_s={"a": 0.05})
TEN_PERCENT = Precision(0.1, relative=True)


def test_precision_reads_a_percentage_or_gradient_units_and_says_which():
    assert Precision.parse("10%") == TEN_PERCENT
    assert Precision.parse(" 0.2 ") == Precision(0.2, relative=False)
    assert str(Precision.parse("5%")) == "5%"
    assert str(Precision.parse("0.2")) == "0.2"
    assert TEN_PERCENT.at(40.0) == pytest.approx(4.0)
    assert TEN_PERCENT.at(0.3) == pytest.approx(0.1)  # below 1: as if 1 (a 0 is measurable)
    assert Precision(0.2, relative=False).at(40.0) == 0.2
    for bad in ("150%", "-1", "0", "abc", "nan%"):
        with pytest.raises(ValueError, match=r"percentage|positive|below 100%"):
            Precision.parse(bad)


def test_experiment_half_width_defaults_to_ten_percent_and_round_trips_through_json():
    assert Parameters().half_width == TEN_PERCENT
    p = Parameters(half_width="5%")
    assert p.model_dump(mode="json")["half_width"] == "5%"
    assert Parameters(**p.model_dump(mode="json")).half_width == Precision(0.05)
    assert Parameters(half_width=0.2).half_width == Precision(0.2, relative=False)
    with pytest.raises(ValueError, match="percentage"):
        Parameters(half_width=True)


def test_a_large_gradient_is_measured_at_the_delay_its_relative_precision_needs():
    # 40 ± 4 at 1 ms: ±10% of 40 needs A = 2 ms / 4 = 0.5 ms (effect 20 ms, under the 50 ms cap)
    choice = next_delay({"a": RoughGradient(40.0, 4.0)}, FIRST_DELAY_S, PLAN, TEN_PERCENT, 0.1)
    assert choice.final
    assert choice.delay_s == pytest.approx(0.0005)


def test_an_unknown_gradient_grows_the_delay_by_four_until_a_gradient_of_1_would_do():
    rough = {"a": RoughGradient(0.5, 3.0)}
    first = next_delay(rough, FIRST_DELAY_S, PLAN, TEN_PERCENT, 0.1)
    assert not first.final
    assert first.delay_s == pytest.approx(0.004)
    assert "not yet known" in first.reason
    # at 16 ms, 64 ms would pass the 20 ms a gradient of 1 needs: measure, held under the cap
    # by the rough gradient's upper end (50 ms / 3.5)
    last = next_delay(rough, 0.016, PLAN, TEN_PERCENT, 0.1)
    assert last.final
    assert last.delay_s == pytest.approx(0.05 / 3.5)


def test_a_wide_rough_gradient_grows_no_delay_its_estimate_would_push_past_the_cap():
    # 25 ± 22 at 1 ms: unresolved, but 4 ms would be an effect of 100 ms against a 50 ms cap
    choice = next_delay({"a": RoughGradient(25.0, 22.0)}, FIRST_DELAY_S, PLAN, TEN_PERCENT, 0.1)
    assert choice.final
    assert choice.delay_s * 25.0 <= 0.05


def test_an_absolute_half_width_sets_the_delay_whatever_the_gradient_under_the_cap():
    absolute = Precision(0.2, relative=False)
    choice = next_delay({"a": RoughGradient(2.0, 0.2)}, FIRST_DELAY_S, PLAN, absolute, 0.1)
    assert choice.delay_s == pytest.approx(0.01)  # 2 ms / 0.2
    capped = next_delay({"a": RoughGradient(8.0, 0.5)}, FIRST_DELAY_S, PLAN, absolute, 0.1)
    assert capped.delay_s == pytest.approx(0.05 / 8.5)
    assert next_delay({"a": RoughGradient(0.0, 0.1)}, 0.001, PLAN, absolute, 0.004).delay_s \
        == pytest.approx(0.004)  # max_delay_ms


def test_rough_gradients_of_successive_cycles_combine_by_inverse_variance():
    both = RoughGradient(1.0, 2.0).combined(RoughGradient(3.0, 2.0))
    assert both.gradient == pytest.approx(2.0)
    assert both.half_width == pytest.approx(2 ** 0.5)
    assert RoughGradient(40.0, 15.0).resolved
    assert not RoughGradient(0.2, 0.6).resolved


def _training(rate_per_s: float, seconds: float, seed: int = 1):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0.0, seconds, int(rate_per_s * seconds)))
    return {"a": (t, 0.09 + 0.02 * rng.standard_normal(len(t)))}


def test_the_plan_starts_small_even_when_training_is_too_short_for_the_spectrum():
    p = Parameters(max_delay_ms=100)
    short = plan_wave(_training(4.0, 60.0), 60.0, p)
    assert short.magnitude_s == FIRST_DELAY_S  # never the cap
    assert any("too short" in n for n in short.notes)
    full = plan_wave(_training(12.0, 400.0), 400.0, p)
    assert full.magnitude_s == FIRST_DELAY_S
    assert "a" in full.noise_s
    assert full.effect_cap_s["a"] == pytest.approx(0.02, rel=0.1)
    assert any("needs an effect of" in n for n in full.notes)


def test_training_needed_grows_as_the_request_rate_falls():
    slow = training_needed_s(_training(4.0, 60.0), k=8)
    fast = training_needed_s(_training(40.0, 60.0), k=8)
    assert slow is not None
    assert fast is not None
    assert slow > 5 * fast
    assert training_needed_s({"a": (np.zeros(3), np.zeros(3))}, k=8) is None


def test_automatic_cycles_reach_the_precision_within_max_duration():
    quiet = plan_wave(_training(12.0, 400.0), 400.0, Parameters())
    assert quiet.cycles >= 6
    assert any(f"{quiet.cycles} cycles (" in n for n in quiet.notes)
    short = plan_wave(_training(12.0, 400.0), 400.0, Parameters(half_width="2%",
                                                                max_duration_s=90))
    assert short.cycles == max(6, int(90 // short.period_s) - 3)
    assert any("beyond max_duration_s=90" in n for n in short.notes)
    fixed = plan_wave(_training(12.0, 400.0), 400.0, Parameters(cycles=4))
    assert fixed.cycles == 4
    # the noise a delay is sized by is the noise of the cycles chosen: more cycles, less noise
    assert quiet.noise_s["a"] < fixed.noise_s["a"] * (4 / quiet.cycles) ** 0.5 * 1.5


def test_the_period_is_long_against_the_slowest_transactions_responses():
    fast = plan_wave(_training(40.0, 300.0), 300.0, Parameters())
    assert fast.period_s >= 4.0  # MIN_PERIOD_S, though 40/s make bins of a fraction of a second
    t, y = _training(40.0, 300.0)["a"]
    slow = plan_wave({"a": (t, y), "b": (t[::4], 0.5 + 0.0 * t[::4])}, 300.0, Parameters())
    assert slow.period_s >= 10.0  # 20 × the 0.5 s responses of b


def test_automatic_cycles_keep_every_concurrent_wave_under_the_duration_cap():
    """A default MediaWiki run chose 79 cycles of 11.3 s (896 s) and its 22.6 s partner wave
    came to 907 s, which the injector refused (cap 900 s)."""
    from coordinator.live.measure import group_waves

    p = Parameters(half_width="1%", max_duration_s=900)
    plan = plan_wave(_training(12.0, 400.0), 400.0, p)
    assert any("beyond max_duration_s" in n for n in plan.notes)
    for count in (1, 2, 3, 4):
        for wave in group_waves(plan, count, 0.0, [0.001] * count):
            assert wave.duration_s <= p.max_duration_s, (count, wave)


def test_an_interval_much_wider_than_wanted_is_said() -> None:
    ten = Precision(0.1, relative=True)
    assert precision_shortfall(40.0, [36.5, 43.5], ten) is None  # ±3.5 against ±4
    note = precision_shortfall(40.0, [-5.0, 85.0], ten)
    assert note is not None
    assert "±45 against ±4" in note
    assert precision_shortfall(0.0, [-0.1, 0.1], ten) is None  # ±0.1: 10% of 1
    assert precision_shortfall(0.0, [-0.2, 0.2], ten) is not None
    assert precision_shortfall(None, None, ten) is None
    assert precision_shortfall(2.0, [1.0, 3.0], Precision(0.5, relative=False)) is not None


def test_a_wave_beyond_the_duration_cap_is_refused_at_planning_with_the_remedy():
    """A 50-service run at 10 requests a second planned 6 cycles of 379 s; the injector
    refused the first link's wave 7 minutes in."""
    from linkgrad.spectral.wave_plan import PlanBeyondCap

    with pytest.raises(PlanBeyondCap, match=r"6 cycles of 60\.0 s \(given\) take 360 s a link, "
                       r"beyond max_duration_s=300 .*max_duration_s of 400 or more"):
        plan_wave(_training(12.0, 400.0), 400.0,
                  Parameters(period_s=60, cycles=6, magnitude_ms=1, max_duration_s=300))
    slow = _training(0.05, 4000.0)  # a request every 20 s: the period follows the rate
    with pytest.raises(PlanBeyondCap, match=r"four bins of 8 requests at the request rate"):
        plan_wave(slow, 4000.0, Parameters(magnitude_ms=1, max_duration_s=300))

"""The gradient against the delay (linkgrad.linearity): the weighted line, when it is said to be
linear, and where it lands in gradients.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coordinator.config.run_dir import RunDir
from coordinator.config.run_records import LinkMeasurement
from linkgrad.linearity import Z95, DelayPoint, fit, linearity
from linkgrad.spectral.result import GradientResult


def test_two_points_give_the_difference_and_its_propagated_interval() -> None:
    x = fit("a->b", "T", [DelayPoint(8.0, 2.4, 0.1, "measurement"),
                          DelayPoint(1.0, 2.0, 0.2, "measurement")])
    assert x is not None
    assert [p.delay_ms for p in x.points] == [1.0, 8.0]
    assert x.difference == pytest.approx(0.4)
    assert x.change_per_ms == pytest.approx(0.4 / 7)
    assert x.difference_half_width == pytest.approx(np.hypot(0.1, 0.2))
    assert not x.linear  # 0.4 against ±0.22
    assert x.relative_difference == pytest.approx(0.2)
    assert "NOT linear" in x.describe()


def test_a_constant_gradient_is_linear_and_its_fit_is_the_weighted_line() -> None:
    rng = np.random.default_rng(3)
    delays = np.array([0.5, 1.0, 2.0, 4.0, 8.0])
    half = np.array([0.4, 0.2, 0.1, 0.05, 0.03])
    gradients = 2.0 + 0.03 * delays + rng.normal(0, half / Z95)
    x = fit("a->b", "T", [DelayPoint(d, g, h, "measurement")
                          for d, g, h in zip(delays, gradients, half, strict=True)])
    assert x is not None
    # numpy's weighted polyfit (weights are 1/sigma) gives the same line
    slope, _ = np.polyfit(delays, gradients, 1, w=Z95 / half)
    assert x.change_per_ms == pytest.approx(slope)
    assert abs(x.change_per_ms - 0.03) < 3 * x.change_per_ms_half_width / Z95


def test_no_fit_from_delays_too_close_or_points_without_an_interval() -> None:
    assert fit("l", "T", [DelayPoint(1.0, 2, 0.1, "adaptive"),
                          DelayPoint(1.4, 2, 0.1, "measurement")]) is None
    assert fit("l", "T", [DelayPoint(1.0, 2, 0.0, "adaptive"),
                          DelayPoint(4.0, 2, 0.1, "measurement")]) is None
    assert fit("l", "T", [DelayPoint(1.0, 2, 0.1, "measurement")]) is None


def test_linearity_groups_by_link_and_transaction_and_skips_missing_gradients() -> None:
    def t(g: float | None) -> GradientResult:
        return GradientResult(gradient=g, ci95=None if g is None else (g - 0.1, g + 0.1))

    out = linearity([("a->b", 1.0, "measurement", {"X": t(1.0), "Y": t(None)}),
                     ("a->b", 4.0, "measurement", {"X": t(1.05), "Y": t(3.0)}),
                     ("b->a", 1.0, "adaptive", {"X": t(2.0)}),
                     ("b->a", 4.0, "measurement", {"X": t(2.0)})])
    assert [(x.link, x.transaction) for x in out] == [("a->b", "X"), ("b->a", "X")]
    assert all(x.linear for x in out)
    assert out[1].points[0].source == "adaptive"


def _measurement(label: str, delay_ms: float, gradient: float, adaptive: tuple | None = None
                 ) -> LinkMeasurement:
    def estimate(ms: float, g: float) -> dict:
        return {"record": {"start": 1.0, "period_s": 4.0, "cycles": 6, "magnitude_ms": ms},
                "requested_ms": ms, "packets_delayed": 10,
                "perturbation": {"throughput_per_s": 10.0, "throughput_change": 0.0,
                                 "mean_response_ms": 50.0, "mean_response_change_ms": 0.0},
                "transactions": {"T": {"gradient": g, "ci95": [g - 0.1, g + 0.1],
                                       "notes": []}}}
    data = {**estimate(delay_ms, gradient),
            "link": {"label": label, "src_host": "a", "dst_host": "b"}}
    if adaptive:
        data["adaptive"] = estimate(*adaptive)
    return LinkMeasurement.model_validate(data)


def test_gradients_json_carries_the_linearity_of_each_link(tmp_path) -> None:
    run = RunDir(tmp_path)
    run.write_measurements("e", [_measurement("a->b", 1.0, 2.0),
                                 _measurement("a->b", 8.0, 2.6),
                                 _measurement("b->a", 0.6, 1.0, adaptive=(4.0, 1.02))])
    data = json.loads((tmp_path / "gradients.json").read_text())
    cells = {(x["link"], x["transaction"]): x for x in data["linearity"]}
    assert set(cells) == {("a->b", "T"), ("b->a", "T")}
    assert cells[("a->b", "T")]["linear"] is False
    assert cells[("a->b", "T")]["difference"] == pytest.approx(0.6)
    assert cells[("b->a", "T")]["linear"] is True
    assert [p["source"] for p in cells[("b->a", "T")]["points"]] == ["measurement", "adaptive"]
    assert len(run.measurements()) == 3  # the reader still reads the links

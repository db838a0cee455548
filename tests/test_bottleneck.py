"""The bottleneck test (Kissel et al. §IV.C) on series with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from linkgrad.bottleneck import UNTESTED, bottleneck

RNG = np.random.default_rng(7)


def _series(mean: float, n: int = 60, sd: float = 0.05) -> list[float]:
    return list(RNG.normal(mean, sd * mean, n))


def test_a_clearly_slower_resource_is_named():
    v = bottleneck({"disk.read": _series(0.9e9), "network": _series(9.4e9),
                    "disk.write": _series(4.8e9)})
    assert v.candidate == "disk.read"
    assert v.bottleneck == "disk.read"
    assert v.describe() == "disk.read is the bottleneck"
    assert all(c.lower and c.p < 1e-10 for c in v.comparisons)


def test_two_within_noise_are_statistically_similar():
    v = bottleneck({"network": _series(1.0e9, sd=0.2), "disk.write": _series(1.01e9, sd=0.2),
                    "disk.read": _series(5e9)})
    assert v.bottleneck is None
    assert set((v.candidate, *v.similar)) == {"network", "disk.write"}
    assert v.describe().startswith("statistically similar: ")
    assert "disk.read" not in v.similar


def test_two_alike_resources_are_told_apart_about_alpha_of_the_time():
    named = sum(bottleneck({"a": _series(1e9, n=20), "b": _series(1e9, n=20)}).bottleneck
                is not None for _ in range(1000))
    assert 25 <= named <= 80  # 50 expected at alpha 0.05 (binomial 99.9%: 29 to 75)


def test_what_cannot_be_tested_is_said():
    with pytest.raises(ValueError, match="two or more"):
        bottleneck({"network": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"fewer than two intervals .* for disk\.read"):
        bottleneck({"network": [1.0, 2.0], "disk.read": [1.0, float("nan")]})
    v = bottleneck({"a": [1.0, 1.0], "b": [2.0, 2.0]})  # constant series: no variance
    assert v.bottleneck == "a"


def test_network_send_is_shown_but_left_out_of_the_tests_by_default():
    """A send as slow as the disk write after it: without UNTESTED they would be similar."""
    write = _series(0.4e9)
    send = list(write)  # alike: the tests could never tell them apart
    v = bottleneck({"disk.write": write, "network.send": send, "network.receive": _series(1e9)})
    assert v.bottleneck == "disk.write"
    assert v.untested == {"network.send": UNTESTED["network.send"]}
    assert v.means["network.send"] == pytest.approx(np.mean(send))
    assert "network.send" not in {c.other for c in v.comparisons}
    everything = bottleneck({"disk.write": write, "network.send": send}, untested={})
    assert {everything.candidate, *everything.similar} == {"disk.write", "network.send"}

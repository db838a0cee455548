"""SNAP §2.3 correlation (linkgrad.snap.correlate): performance vectors, ACC, ranking."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import stats as scipy_stats

from linkgrad.snap import (
    PROBLEMS,
    IntervalStats,
    average_correlation,
    classify,
    performance_vectors,
    rank_resources,
    shared_resources,
)
from linkgrad.snap.correlate import MAX_CELLS

FAST, TIMEOUT = PROBLEMS.index("fast_retransmit"), PROBLEMS.index("timeout")


def flagged(problem_rows: list[dict[str, float]]) -> IntervalStats:
    """Intervals with only retransmission counters known: {} is healthy."""
    keys = ("start_s", "end_s", "retrans", "rto")
    return IntervalStats.from_columns(
        {k: [r.get(k, 0.0) for r in problem_rows] for k in keys})


def test_an_interval_adds_its_overlap_to_every_bin_it_spans() -> None:
    stats = flagged([{"start_s": 0.5, "end_s": 7.3, "retrans": 1},  # bins 0..3
                     {"start_s": -1.0, "end_s": 3.0, "retrans": 1, "rto": 1},  # clipped left
                     {"start_s": 9.0, "end_s": 12.0, "retrans": 1, "rto": 1},  # clipped right
                     {"start_s": 8.0, "end_s": 9.0}])  # healthy: adds nothing
    v = performance_vectors(classify(stats), [7, 7, 7, 7], stats.start_s, stats.end_s,
                            from_s=0.0, to_s=10.0, aggregation_s=2.0)
    assert v.connections.tolist() == [7]
    assert v.seconds.shape == (1, 5, len(PROBLEMS))
    assert_allclose(v.seconds[0, :, FAST], [1.5, 2.0, 2.0, 1.3, 0.0], atol=1e-12)
    assert_allclose(v.seconds[0, :, TIMEOUT], [2.0, 1.0, 0.0, 0.0, 1.0], atol=1e-12)
    others = np.delete(v.seconds, [FAST, TIMEOUT], axis=2)
    assert not others.any()


def test_a_window_that_is_no_multiple_of_the_bin_has_a_short_last_bin() -> None:
    stats = flagged([{"start_s": 0.0, "end_s": 5.0, "retrans": 1},
                     {"start_s": 4.0, "end_s": 6.0, "retrans": 1},  # ends on a bin edge
                     {"start_s": 5.0, "end_s": 9.0, "retrans": 1}])  # after the window
    v = performance_vectors(classify(stats), [1, 2, 3], stats.start_s, stats.end_s,
                            from_s=0.0, to_s=5.0, aggregation_s=2.0)
    assert v.connections.tolist() == [1, 2]  # 3 was not observed in the window
    assert_allclose(v.seconds[:, :, FAST], [[2.0, 2.0, 1.0], [0.0, 0.0, 1.0]], atol=1e-12)


def test_bin_overlaps_equal_a_brute_force_sum_on_random_intervals() -> None:
    rng = np.random.default_rng(3)
    n, from_s, to_s, t = 400, 100.0, 131.0, 1.5
    start = rng.uniform(95.0, 135.0, n)
    end = start + rng.exponential(3.0, n)
    conn = rng.integers(0, 6, n)
    rows = [{"start_s": s, "end_s": e, "retrans": rng.integers(0, 2)}
            for s, e in zip(start, end, strict=True)]
    stats = flagged(rows)
    v = performance_vectors(classify(stats), conn, start, end, from_s=from_s, to_s=to_s,
                            aggregation_s=t)
    edges = np.minimum(from_s + t * np.arange(v.seconds.shape[1] + 1), to_s)
    expected = np.zeros((len(v.connections), len(edges) - 1))
    for s, e, c, r in zip(start, end, conn, stats.retrans, strict=True):
        if r > 0 and c in v.connections:
            overlap = np.clip(np.minimum(e, edges[1:]) - np.maximum(s, edges[:-1]), 0, None)
            expected[np.searchsorted(v.connections, c)] += overlap
    assert_allclose(v.seconds[:, :, FAST], expected, atol=1e-9)


def brute_force_acc(x: np.ndarray) -> float:
    """Mean Pearson r over unordered pairs; a pair with a constant vector counts 0."""
    r = [0.0 if np.ptp(a) == 0 or np.ptp(b) == 0 else scipy_stats.pearsonr(a, b).statistic
         for a, b in itertools.combinations(x, 2)]
    return float(np.mean(r))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_closed_form_acc_equals_the_loop_over_pairs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(40, 30)) + rng.normal(size=30) * rng.uniform(0, 2)  # shared part
    x[::7] = 0.0  # always healthy
    x[3] = 2.5  # constant but not zero
    sparse = rng.random((40, 30)) < 0.8
    x[10:20][sparse[10:20]] = 0.0  # problem times are mostly zero
    assert_allclose(average_correlation(x), brute_force_acc(x), rtol=1e-10, atol=1e-12)


def test_acc_edge_cases() -> None:
    a = np.array([0.0, 1.0, 0.0, 2.0])
    assert average_correlation(np.empty((0, 4))) is None
    assert average_correlation([a]) is None  # one connection has no pairs
    assert average_correlation([a, 3 * a + 1]) == pytest.approx(1.0)
    assert average_correlation([a, -a]) == pytest.approx(-1.0)
    assert average_correlation(np.zeros((5, 4))) == 0.0  # all healthy: no common problem
    assert average_correlation([a, a, np.zeros(4)]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match=re.escape("one row per connection, got shape (4,)")):
        average_correlation(a)


def scenario() -> tuple[IntervalStats, np.ndarray, dict[int, str], dict[int, str],
                        dict[int, str]]:
    """Polls every 0.5 s for 60 s. Host .1: five connections to .9 with a common loss burst
    (fast retransmits at 10-12 s, 30-31 s, 45-47 s) plus their own random timeouts. Host .2:
    five healthy connections to .9. Host .3: five connections to .8 with independent losses.
    """
    rng = np.random.default_rng(11)
    starts = np.arange(0.0, 60.0, 0.5)
    burst = ((starts >= 10) & (starts < 12)) | ((starts >= 30) & (starts < 31)) \
        | ((starts >= 45) & (starts < 47))
    columns: dict[str, list] = {"start_s": [], "end_s": [], "retrans": [], "rto": []}
    connection, host, peer, process = [], {}, {}, {}
    for conn in range(15):
        group = conn // 5
        host[conn], peer[conn] = f"10.0.0.{group + 1}", "10.0.0.8" if group == 2 else "10.0.0.9"
        process[conn] = f"client-{group}"
        rto = (rng.random(len(starts)) < 0.03) if group == 0 else np.zeros(len(starts), bool)
        fast = burst if group == 0 else (rng.random(len(starts)) < 0.1) & (group == 2)
        columns["start_s"] += starts.tolist()
        columns["end_s"] += (starts + 0.5).tolist()
        columns["retrans"] += (2 * fast + rto).tolist()
        columns["rto"] += rto.astype(float).tolist()
        connection += [conn] * len(starts)
    return (IntervalStats.from_columns(columns), np.array(connection), host, peer, process)


def test_a_common_problem_on_one_host_ranks_first_and_healthy_hosts_score_zero() -> None:
    stats, connection, host, peer, process = scenario()
    vectors = performance_vectors(classify(stats), connection, stats.start_s, stats.end_s,
                                  from_s=0.0, to_s=60.0)
    scores = {s.resource: s for s in rank_resources(
        shared_resources(host, peer, process), vectors, alpha=0.4)}
    ranked = list(scores)
    sick = scores["from:10.0.0.1"]
    assert set(ranked[:3]) == {"from:10.0.0.1", "path:10.0.0.1->10.0.0.9", "process:client-0"}
    assert sick.acc > 0.4
    assert sick.above_alpha
    assert sick.kind == "from"
    assert sick.connections == (0, 1, 2, 3, 4)
    assert sick.problems["fast_retransmit"] == pytest.approx(5 * (2.0 + 1.0 + 2.0))
    assert sick.problems["timeout"] > 0
    assert scores["from:10.0.0.2"].acc == 0.0  # always healthy
    assert not scores["from:10.0.0.2"].above_alpha
    # Independent losses still correlate a little through the problem axis of P (both
    # vectors are non-zero only in their fast-retransmit entries): about 0.26 expected for
    # these rates, below α; it is the timing that lifts host .1 far above.
    assert 0.1 < scores["from:10.0.0.3"].acc < 0.4
    assert not scores["from:10.0.0.3"].above_alpha
    # into .9 go the five sick and the five healthy: ten correlated pairs of 45
    assert scores["to:10.0.0.9"].acc <= 10 / 45 + 1e-12


def test_a_group_of_one_has_no_acc_and_ranks_last() -> None:
    stats, connection, *_ = scenario()
    vectors = performance_vectors(classify(stats), connection, stats.start_s, stats.end_s,
                                  from_s=0.0, to_s=60.0)
    groups = {"process:lonely": [4], "process:ghost": [99], "host:10.0.0.2": [5, 6, 7]}
    ranked = rank_resources(groups, vectors)
    assert [r.resource for r in ranked] == ["host:10.0.0.2", "process:ghost", "process:lonely"]
    assert ranked[1].acc is None
    assert ranked[1].connections == ()  # unobserved ids are left out
    assert ranked[2].acc is None
    assert not ranked[2].above_alpha


def test_shared_resources_group_sockets_by_the_direction_they_send() -> None:
    groups = shared_resources({1: "a", 2: "b", 3: "a", 4: "c"},
                              {1: "b", 2: "a", 3: "a", 4: ""},
                              {1: "mysqld", 2: "httpd", 3: "mysqld"})
    assert groups == {
        "from:a": [1, 3], "from:b": [2], "from:c": [4],
        "to:b": [1], "to:a": [2, 3],
        "path:a->b": [1], "path:b->a": [2], "path:a->a": [3],
        "process:mysqld": [1, 3], "process:httpd": [2],
    }


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"aggregation_s": 0.0}, "aggregation_s=0.0 must be positive and finite"),
    ({"aggregation_s": float("nan")}, "aggregation_s=nan must be positive and finite"),
    ({"to_s": 0.0}, "the window [from_s=0.0, to_s=0.0) must be finite and not empty"),
    ({"connection": [1]}, "connection has shape (1,), expected (2,) like classes"),
    ({"start_s": [0.0, float("nan")]}, "start_s/end_s not finite at rows [1]"),
    ({"aggregation_s": 1e-6, "to_s": 1e3}, f"exceed {MAX_CELLS} cells"),
])
def test_performance_vectors_reject_bad_input(kwargs: dict, message: str) -> None:
    stats = flagged([{"start_s": 0.0, "end_s": 1.0}, {"start_s": 1.0, "end_s": 2.0}])
    call = {"connection": [1, 2], "start_s": stats.start_s, "end_s": stats.end_s,
            "from_s": 0.0, "to_s": 2.0, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        performance_vectors(classify(stats), **call)


@pytest.mark.parametrize("alpha", [1.5, -2.0, float("nan")])
def test_alpha_must_be_a_correlation(alpha: float) -> None:
    stats = flagged([{"start_s": 0.0, "end_s": 1.0}])
    vectors = performance_vectors(classify(stats), [1], stats.start_s, stats.end_s,
                                  from_s=0.0, to_s=1.0)
    with pytest.raises(ValueError, match=re.escape(f"{alpha=} must be a correlation")):
        rank_resources({"host:a": [1]}, vectors, alpha=alpha)

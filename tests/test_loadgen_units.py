"""The load generator's pure parts, without root or a server: the closed-loop client's script,
its per-client random streams, the command line's checks and the closed-loop summary."""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics

import pytest

from testbed.loadgen import (
    Sample,
    _parser,
    check_args,
    client_rng,
    client_steps,
    main,
    parse_mix,
    summary,
)

MIX = [("/a", 1.0), ("/b", 3.0)]


def steps(n: int, think_s: float, seed: int = 1, client: int = 0) -> list[tuple[float, str]]:
    return list(itertools.islice(client_steps(client_rng(seed, client), MIX, think_s), n))


def test_think_times_are_exponential_of_the_mean():
    thinks = [t for t, _ in steps(20000, 0.5)]
    assert min(thinks) >= 0
    # exponential: mean = sd = 0.5; 20000 draws put the mean within 0.5 * 4/sqrt(20000)
    assert statistics.fmean(thinks) == pytest.approx(0.5, abs=0.5 * 4 / math.sqrt(20000))
    assert statistics.stdev(thinks) == pytest.approx(0.5, rel=0.05)


def test_no_think_time_means_none():
    assert {t for t, _ in steps(100, 0.0)} == {0.0}


def test_paths_follow_the_mix_weights():
    paths = [p for _, p in steps(20000, 0.1)]
    share_b = paths.count("/b") / len(paths)
    assert share_b == pytest.approx(0.75, abs=4 * math.sqrt(0.75 * 0.25 / 20000))


def test_each_client_has_its_own_reproducible_stream():
    assert steps(50, 0.5, seed=3, client=2) == steps(50, 0.5, seed=3, client=2)
    assert steps(50, 0.5, seed=3, client=2) != steps(50, 0.5, seed=3, client=1)
    assert steps(50, 0.5, seed=3, client=2) != steps(50, 0.5, seed=4, client=2)


def test_negative_think_time_is_refused():
    with pytest.raises(ValueError, match="think_s"):
        next(client_steps(random.Random(1), MIX, -1.0))


def args(*argv: str):
    return _parser().parse_args(["--url", "http://x", "--mix", "/a=1", "--duration", "10",
                                 *argv])


def test_rate_and_clients_are_one_or_the_other(capsys):
    with pytest.raises(SystemExit):
        args("--rate", "5", "--clients", "3")
    with pytest.raises(SystemExit):
        args()
    assert "one of the arguments --rate --clients is required" in capsys.readouterr().err
    assert check_args(args("--rate", "5")) == []
    assert check_args(args("--clients", "3", "--think-s", "0")) == []


def test_every_bad_number_is_named():
    problems = check_args(_parser().parse_args(
        ["--url", "http://x", "--mix", "a=1", "--duration", "0", "--rate", "5",
         "--think-s", "-1"]))
    assert problems == ["--think-s goes with --clients (the closed loop)",
                        "--think-s -1: must be >= 0", "--duration 0: must be > 0",
                        "--mix: mix item 'a=1': expected /PATH=WEIGHT"]
    assert check_args(args("--clients", "0")) == ["--clients 0: must be at least 1"]
    assert check_args(args("--rate", "0")) == ["--rate 0: must be > 0"]


def test_bad_input_exits_2_before_any_request(capsys):
    assert main(["--url", "http://127.0.0.1:9", "--mix", "/a=1", "--clients", "0",
                 "--duration", "1"]) == 2
    assert "loadgen: --clients 0" in capsys.readouterr().err


def test_mix_keeps_query_strings():
    assert parse_mix("/r/PutBid?id=42&user=7=3,/s=1") == [("/r/PutBid?id=42&user=7", 3.0),
                                                          ("/s", 1.0)]


def test_closed_loop_summary_sets_littles_law_beside_the_achieved():
    samples = [Sample(1000.0 + i, 100.0, "/a", 200, 0.1) for i in range(9)] \
        + [Sample(1010.0, 300.0, "/b", 0, 0.2)]
    s = summary(samples, None, 10.0, clients=4, think_s=0.4).model_dump()
    assert "offered_per_s" not in s
    assert (s["clients"], s["think_s"]) == (4, 0.4)
    assert s["mean_response_ms"] == pytest.approx(120.0)
    assert s["littles_law_per_s"] == pytest.approx(4 / (0.12 + 0.4))
    assert (s["achieved_per_s"], s["errors"]) == (1.0, 1)
    assert s["response_ms"] == {"/a": {"count": 9, "mean": 100.0, "median": 100.0}}


def test_the_summary_printed_reads_back_as_its_loop():
    from testbed.loadgen import LOAD_SUMMARY, ClosedLoopSummary, OpenLoopSummary

    for made, kind in ((summary([Sample(1.0, 5.0, "/a", 200, 0.0)], 20.0, 10.0),
                        OpenLoopSummary),
                       (summary([], None, 10.0, clients=2, think_s=None), ClosedLoopSummary)):
        back = LOAD_SUMMARY.validate_json(json.dumps(made.model_dump()))
        assert type(back) is kind
        assert back == made


def test_open_loop_summary_is_unchanged():
    s = summary([Sample(1.0, 5.0, "/a", 200, 0.0)], 20.0, 10.0).model_dump()
    assert list(s)[:3] == ["offered_per_s", "duration_s", "requests"]
    assert s["offered_per_s"] == 20.0
    assert "clients" not in s

"""benchmarks/redmine_truth.py's pure parts: its --delay-ms and its RESULTS.md section, with
and without the slopes (a file measured before them still renders)."""

import argparse

import pytest

from benchmarks.redmine_truth import markdown, parse_delays, slope_columns, slope_ratio

CROSSINGS = {
    name: {"mean": {"statements": n, "response_ms": 100.0}, "min_statements": int(n),
           "max_statements": int(n), "expected": {"web->db": n, "db->web": n}}
    for name, n in (("issue", 48.0), ("login", 7.0))}


def _measured(link: str, ms: float, factor: float) -> dict:
    pages = {name: {"slope": factor * c["expected"][link], "se": 1.0}
             for name, c in CROSSINGS.items()}
    return {"link": link, "requested_ms": ms, "applied_ms": ms * 1.02, "pages": pages,
            "loadavg_1min": [0.5, 0.6]}


RESULT = {"machine": "vm, 2 cores", "requests": 10, "links": ["web->db", "db->web"],
          "crossings": CROSSINGS, "delays_ms": [1.0, 2.0], "window_s": 120.0, "cycles": 6,
          "rate": 10.0,
          "idle_slopes": [_measured(link, 2.0, 1.0) for link in ("web->db", "db->web")],
          "slopes": [_measured(link, ms, 1.1) for ms in (2.0, 1.0)
                     for link in ("web->db", "db->web")]}


def test_delays_are_comma_separated_positive_and_ascending() -> None:
    assert parse_delays("2,1") == [1.0, 2.0]
    assert parse_delays("0.5") == [0.5]
    assert parse_delays("1,1") == [1.0]
    for bad in ("", "1,x", "0,1", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_delays(bad)


def test_the_columns_go_by_direction_idle_first_then_by_delay() -> None:
    headings = [h for h, _ in slope_columns(RESULT)]
    assert headings == ["web→db idle 2 ms", "web→db 1 ms", "web→db 2 ms",
                        "db→web idle 2 ms", "db→web 1 ms", "db→web 2 ms"]


def test_the_ratio_is_the_median_of_slope_over_crossings() -> None:
    assert slope_ratio(RESULT["slopes"], CROSSINGS) == pytest.approx(1.1)
    assert slope_ratio(RESULT["idle_slopes"], CROSSINGS) == pytest.approx(1.0)


def test_the_section_has_a_slope_cell_per_column_and_page() -> None:
    text = markdown(RESULT)
    assert "10 req/s of all five pages (6 cycles, 120 s per side" in text
    assert "idle 1.00, loaded at 1 ms 1.10, at 2 ms 1.10" in text
    issue = next(line for line in text.splitlines() if line.startswith("| issue |"))
    assert issue.count(" ± ") == 6
    assert "| 52.8 ± 1.0 |" in issue  # 1.1 x 48
    header, rule = [line for line in text.splitlines() if line.startswith("|")][:2]
    assert header.count("|") == rule.count("|") == issue.count("|")


def test_a_result_without_slopes_renders_its_crossings_alone() -> None:
    old = {k: RESULT[k] for k in ("machine", "requests", "links", "crossings")}
    text = markdown(old)
    assert "Slopes" not in text
    assert "| page | statements (min-max) | crossings web->db | crossings db->web | response ms |" \
        in text
    assert "| login | 7.0 (7-7) | 7.0 | 7.0 | 100 |" in text

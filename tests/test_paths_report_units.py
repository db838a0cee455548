"""The report's causal-path section and the saved-trace file: timelines, crossings beside
gradients, and a bad trace named by file and line."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from coordinator.cli.paths_report import crossing_rows, svg_timeline, timeline
from coordinator.config.run_records import LinkMeasurement, MeasuredLink
from coordinator.config.trace_file import read_trace, write_trace
from linkgrad.errors import InputError
from linkgrad.paths.reconcile import HostRecord, HostTrace
from linkgrad.paths.result import HopResult, PatternResult
from linkgrad.spectral.result import GradientResult

HOPS = (
    HopResult(label="CLIENT->web:80", parent=-1, link="client->web", node_delay_s=None,
              network_delay_s=0.001, critical=1.0),
    HopResult(label="web->app1:8000", parent=0, link="web->app1", node_delay_s=0.0005,
              network_delay_s=0.001, critical=1.0),
    HopResult(label="app1:8000->web", parent=1, link="app1->web", node_delay_s=0.002,
              network_delay_s=0.001, critical=1.0),
)


def test_a_timeline_starts_each_hop_its_node_delay_after_its_parent_arrived() -> None:
    send, arrive = timeline(HOPS)
    assert send == pytest.approx([0.0, 1.5, 4.5])
    assert arrive == pytest.approx([1.0, 2.5, 5.5])
    svg = svg_timeline(HOPS)
    assert svg.count("<line") == 3
    assert "web-&gt;app1:8000" in svg


def _link(label: str, src: str, dst: str, gradient: float, lo: float, hi: float
          ) -> LinkMeasurement:
    # only the link and its transactions are read: the rest of a measurement is left out
    return LinkMeasurement.model_construct(
        link=MeasuredLink(label=label, src_host=src, dst_host=dst),
        transactions={"ViewItem": GradientResult(gradient=gradient, ci95=(lo, hi))})


def test_crossings_are_set_beside_gradients_and_disagreement_flagged() -> None:
    dominant = PatternResult(key="", count=1, score=1.0, max_probability=1.0, response_s=None,
                             crossings={"app1->db": 2.0}, hops=())
    rows = crossing_rows({"ViewItem": (dominant,)},
                         [_link("tcp app1:0 -> db:5432", "app1", "db", 1.95, 1.9, 2.0),
                          _link("tcp web:0 -> app1:8000", "web", "app1", 1.0, 0.9, 1.1)])
    assert [(r.crossings, r.disagree) for r in rows] == [(2.0, False), (0.0, True)]


def test_a_saved_trace_reads_back_and_a_bad_line_is_named(tmp_path: Path) -> None:
    host = HostTrace("web", frozenset({"10.0.0.2"}), frozenset({("0.0.0.0", 80)}), [
        HostRecord(("10.0.0.2", 80), ("10.0.0.1", 40000), False, 1, 51, 10.0, 10.1, False,
                   "nginx")])
    opened = HostTrace("db", frozenset({"10.0.0.3"}), frozenset(), [],
                       ((("10.0.0.2", 40001), ("10.0.0.3", 3306), 9.5),
                        (("10.0.0.2", 40002), ("10.0.0.3", 3306), math.nan)))
    path = tmp_path / "t.jsonl"
    write_trace(path, [host, opened])
    back = list(read_trace(path))
    assert back[0] == host
    assert dataclasses.replace(back[1], openings=()) == dataclasses.replace(opened, openings=())
    [(c1, s1, t1), (c2, s2, t2)] = back[1].openings  # a SYN's time, or not known
    assert (c1, s1, t1, c2, s2) == (*opened.openings[0], *opened.openings[1][:2])
    assert math.isnan(t2)
    path.write_text(path.read_text() + '{"host": "db", "addresses": []}\n')
    with pytest.raises(InputError, match=r"t.jsonl:4: a host entry needs"):
        list(read_trace(path))
    path.write_text("not json\n")
    with pytest.raises(InputError, match=r"t.jsonl:1: not JSON"):
        list(read_trace(path))

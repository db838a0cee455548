"""The report's causal-path section and the saved-trace file: timelines annotated with each
hop's gradient, SNAP classes and hosts' load, and a bad trace named by file and line."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from coordinator.cli.paths_report import hop_notes, svg_timeline, timeline
from coordinator.config.trace_file import read_trace, write_trace
from coordinator.explain.answer import ExplainRow
from linkgrad.errors import InputError
from linkgrad.hostprobe.load import HostLoad
from linkgrad.paths.reconcile import HostRecord, HostTrace
from linkgrad.paths.result import HopResult

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
    assert svg.count("data-mark='network'") == 3
    assert svg.count("data-mark='tick'") == len("012345")  # 0 to 5.5 ms by 1
    assert "web-&gt;app1:8000" in svg


def _row(pair: str, gradient: float | None, passive: float | None) -> ExplainRow:
    # only what a timeline reads: the rest of a row is left out
    return ExplainRow.model_construct(
        transaction="ViewItem", link=f"tcp {pair}", pair=pair, gradient=gradient,
        ci95=None if gradient is None else (1.9, 2.1), passive_gradient=passive,
        passive_ci95=(0.9, 1.1), snap=None, hosts=None)


def test_each_hop_says_its_links_gradient_and_its_evidence_once_under_it() -> None:
    load = HostLoad(seconds=30, cgroup_cpu_cores=0.5, cpu_busy=0.6)
    rows = [_row("web->app1", None, 1.0),
            _row("app1->web", 2.0, 1.9).model_copy(update={
                "snap": {"delayed_ack": 12.5, "app_limited": 3.0},
                "hosts": {"app1": load, "web": load}})]
    hops = (*HOPS, HOPS[2])  # a link crossed twice: its evidence said under the first hop
    notes = hop_notes(hops, rows)
    assert [n.value for n in notes] == ["no gradient", "1.00 [0.90, 1.10] passive",
                                        "2.00 [1.90, 2.10] measured",
                                        "2.00 [1.90, 2.10] measured"]
    assert notes[2].details == (
        "SNAP app1->web: delayed_ack 12.5, app_limited 3.0 (connection-seconds)",
        "app1: CPU 0.50 cores own (machine 60%)", "web: CPU 0.50 cores own (machine 60%)")
    assert notes[3].details == ()
    svg = svg_timeline(hops, notes)
    assert "2.00 [1.90, 2.10] measured" in svg
    assert "delayed_ack 12.5" in svg
    assert ">ms from the request&#x27;s first message<" in svg


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
    with pytest.raises(InputError, match=r"t.jsonl:4: field 'listening' expected a host entry"):
        list(read_trace(path))
    path.write_text("not json\n")
    with pytest.raises(InputError, match=r"t.jsonl:1: not valid JSON"):
        list(read_trace(path))

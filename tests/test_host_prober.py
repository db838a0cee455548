"""The sniffer's host probe sessions: contexts, rates changed while it runs, a last report at
each change, on this machine's /proc."""

from __future__ import annotations

import io
import itertools
import json
import time

import pytest

from linkgrad.errors import InputError
from linkgrad.protocol.hosts import HostReportEvent, Probe
from linkgrad.protocol.jsonlines import LineWriter
from sniffer.host_prober import HostProber


def _events(out: io.StringIO) -> list[HostReportEvent]:
    return [HostReportEvent.model_validate(json.loads(line))
            for line in out.getvalue().splitlines()]


def _until(out: io.StringIO, n: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(_events(out)) < n:
        assert time.monotonic() < deadline, f"fewer than {n} reports in {timeout_s} s"
        time.sleep(0.02)


def test_a_context_reports_at_its_rate_and_a_new_one_ends_it_with_a_last_report():
    out = io.StringIO()
    prober = HostProber(LineWriter(out))
    answer = prober.start(Probe(context="passive", sample_interval_s=0.05,
                                report_interval_s=0.2))
    assert answer.context == "passive"
    _until(out, 2)
    prober.start(Probe(context="measure app1->db", sample_interval_s=0.05,
                       report_interval_s=0.1))  # faster, on the measured link's hosts
    _until(out, len(_events(out)) + 1)
    last = prober.stop()
    assert last.context == "measure app1->db"
    events = _events(out)
    contexts = [e.context for e in events]
    switch = contexts.index("measure app1->db")
    assert set(contexts[:switch]) == {"passive"}
    assert set(contexts[switch:]) == {"measure app1->db"}
    for e in events:
        assert e.samples >= 2
        assert e.to_s > e.from_s
        assert "cpu_busy" in e.series
        assert e.series["cpu_busy"].count == e.samples - 1
        assert 0.0 <= e.host.cpu.get("idle", 0.0) <= 1.0
    for a, b in itertools.pairwise(events[:switch]):
        assert b.from_s == a.to_s  # one context's reports tile its time
    n = len(events)
    assert prober.stop() == last  # nothing runs: no report, the last answer again
    assert len(_events(out)) == n


def test_a_report_shorter_than_a_sample_is_refused_and_the_running_context_goes_on():
    out = io.StringIO()
    prober = HostProber(LineWriter(out))
    prober.start(Probe(context="a", sample_interval_s=0.05, report_interval_s=0.1))
    with pytest.raises(InputError, match="shorter than a sample") as e:
        prober.start(Probe(sample_interval_s=2.0, report_interval_s=1.0))
    assert e.value.problems[0].field == "report_interval_s"
    assert prober.thread is not None
    _until(out, 1)
    prober.stop()
    assert {ev.context for ev in _events(out)} == {"a"}

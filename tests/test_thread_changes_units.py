"""Each socket's thread from bpftrace's lines (no root: the program's text, the parser and the
log are pure); the program runs for real in tests/test_paths_trace_netns.py."""

from __future__ import annotations

import json
import sys

from sniffer.thread_changes import (
    NO_THREAD,
    ThreadChange,
    ThreadChangeParser,
    ThreadLog,
    build_program,
)
from sniffer.tracing import report_event


def _printf(text: str) -> str:
    return json.dumps({"type": "printf", "data": text + "\n"})


def test_the_program_prints_only_when_a_socket_s_thread_changes_in_its_namespace():
    program = build_program(4026531840)
    assert "ns.inum == 4026531840 && @t[(uint64)$sk] != tid" in program
    assert "delete(@t[(uint64)args->skaddr])" in program  # a closed socket is said again
    assert build_program(None).count("printf(\"lg thread") == 1


def test_lines_become_changes_on_the_unix_clock_with_the_port_in_host_order():
    parser = ThreadChangeParser(wall_offset_s=1000.0)
    assert parser.feed(_printf("lg start 5")) == []
    assert parser.feed(_printf("lg ready 6")) == []
    assert parser.ready
    port = int.from_bytes((3306).to_bytes(2, "big"), sys.byteorder)  # as skc_dport prints
    [change] = parser.feed(_printf(f"lg thread 2500000000 77 70 10.0.0.1 40000 "
                                   f"10.0.0.2 {port}"))
    assert change == ThreadChange(1002.5, 77, 70, ("10.0.0.1", 40000), ("10.0.0.2", 3306))
    assert parser.feed(_printf("lg tick")) == []
    parser.feed("not json")
    assert parser.unparsed == ["not json"]


def test_a_message_s_thread_is_the_last_change_before_it_else_the_first_after():
    log = ThreadLog()
    a, b = ("10.0.0.1", 40000), ("10.0.0.2", 3306)
    log.add([ThreadChange(10.0, 7, 7, a, b), ThreadChange(5.0, 6, 6, a, b)])  # out of order
    assert log.thread_at(a, b, 4.0) == 6  # received before the first recv call said who
    assert log.thread_at(a, b, 7.0) == 6
    assert log.thread_at(a, b, 10.0) == 7  # a pool handed the connection over
    assert log.thread_at(b, a, 7.0) == NO_THREAD  # the other end: not this host's
    log.forget_before(10.0 + log.keep_s + 1)
    assert log.thread_at(a, b, 7.0) == NO_THREAD


def test_a_report_carries_a_thread_per_message_row_or_none():
    from sniffer.message_assembly import HostMessage
    m = HostMessage(("10.0.0.1", 40000), ("10.0.0.2", 3306), True, 1, 11, 5.0, 5.0, 1)
    stats = {"segments": 1, "dropped_messages": 0, "ring_drops": 0}
    with_threads = report_event(4.0, 6.0, [m], {}, set(), stats, None,
                                lambda local, remote, t: 42)
    assert with_threads.threads == (42,)
    assert report_event(4.0, 6.0, [m], {}, set(), stats, None).threads == ()

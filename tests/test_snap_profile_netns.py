"""The sniffer's SNAP profiler on real sockets (root): a receiver-window limited connection told
from a healthy one, every `snap` event in the protocol's exact wire form."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from linkgrad.protocol.snap import SnapReportEvent
from linkgrad.snap.classify import PROBLEMS
from tests.marks import NETNS
from tests.netns_tools.pairs import echo_pair
from tests.netns_tools.sniffer_daemon import SnifferDaemon

pytestmark = NETNS

ECHO_PORT, STALLED_PORT = 7321, 7322
WRITE_S = 1.5

# b: accepts one connection and never reads it. The small receive buffer is set on the
# listening socket, before listen, so the accepted socket has it from the handshake on (its
# window scale too): the window closes after a few kilobytes.
RECEIVER = """
import socket, sys
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
srv.bind(("0.0.0.0", int(sys.argv[1])))
srv.listen()
print("ready", flush=True)
conn, _ = srv.accept()
sys.stdin.read()
"""

# a: writes without blocking for WRITE_S (waiting for room when the send buffer is full), says
# its port and what it wrote, and keeps the connection open until its stdin closes.
SENDER = """
import json, select, socket, sys, time
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
sock.setblocking(False)
end = time.monotonic() + float(sys.argv[3])
sent = 0
while (left := end - time.monotonic()) > 0:
    try:
        sent += sock.send(b"x" * 65536)
    except BlockingIOError:
        select.select([], [sock], [], left)
print(json.dumps({"port": sock.getsockname()[1], "sent": sent}), flush=True)
sys.stdin.read()
"""


def _of(events: list[SnapReportEvent], remote_port: int, local_port: int | None = None
        ) -> tuple[list[Any], list[Any]]:
    """The connection entries and records of one connection, over all reports."""
    def mine(x: Any) -> bool:
        return x.remote.port == remote_port and local_port in (None, x.local.port)
    return ([c for e in events for c in e.connections if mine(c)],
            [r for e in events for r in e.records if mine(r)])


def _stalled_seen(port: int) -> Callable[[list[dict[str, Any]]], bool]:
    """Whether a report has held a receiver-window record of the connection from `port`."""
    def seen(events: list[dict[str, Any]]) -> bool:
        return any(r["local"]["port"] == port and "receiver_window" in r["classes"]
                   for e in events if e.get("event") == "snap" for r in e["records"])
    return seen


def test_a_receiver_window_limited_connection_is_told_from_a_healthy_one():
    with echo_pair([ECHO_PORT], []) as hosts:
        b = hosts.addresses["b"]
        receiver = hosts.popen("b", sys.executable, "-c", RECEIVER, str(STALLED_PORT),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert receiver.stdout is not None
        assert receiver.stdout.readline().strip() == "ready"
        sniffer = SnifferDaemon(hosts)
        started = sniffer.ask({"id": 1, "cmd": "profile", "report_interval_s": 0.5,
                               "sums_interval_s": 0.5, "table_interval_s": 0.1})
        assert started["ok"], started
        assert started["result"]["table_interval_s"] == 0.1
        if lacking := [m for m in started["result"]["missing"] if "rwnd_limited" in m]:
            pytest.skip(lacking[0])
        sender = hosts.popen("a", sys.executable, "-c", SENDER, b, str(STALLED_PORT),
                             str(WRITE_S), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert sender.stdout is not None
        hosts.probe("a", "tcp", b, ECHO_PORT, 40, 0.02)  # 0.8 s of requests and answers
        stalled = json.loads(sender.stdout.readline())  # after WRITE_S of writing
        sniffer.events_until(_stalled_seen(stalled["port"]))
        stopped = sniffer.ask({"id": 2, "cmd": "unprofile"})
        assert stopped["ok"], stopped
        sniffer.end()

    assert not [e for e in sniffer.events if e["event"] not in ("snap", "stopped")]
    # the wire form is the protocol's, exactly: no field added, none missing, no NaN
    events = [SnapReportEvent.model_validate(e) for e in sniffer.events
              if e["event"] == "snap"]
    assert len(events) >= 2
    for earlier, later in itertools.pairwise(events):
        assert later.from_s == earlier.to_s  # reports tile the time

    connections, records = _of(events, STALLED_PORT, stalled["port"])
    assert connections, "the stalled connection was never reported"
    window_s = sum(c.seconds.get("receiver_window", 0) for c in connections)
    assert window_s > 0.5 * WRITE_S  # the window stays shut: most of the time it was seen
    assert sum(c.problem_intervals for c in connections) > 0
    assert all(c.process.startswith("python") for c in connections if c.process)
    stalled_records = [r for r in records if "receiver_window" in r.classes]
    assert stalled_records
    for r in stalled_records:
        assert r.tcp["rwnd_limited_us"] > 0  # Table 2's rule, diff(RwinLimitTime) > 0
        assert r.to_s > r.from_s
    # (no claim about retransmissions: b delays its ACK of the last segments before its window
    # shuts, a tail-loss probe resends one (spurious, a DSACK comes back: nstat's
    # TCPLossProbes, TCPDSACKRecv) and Linux counts it in total_retrans: fast_retransmit)

    connections, records = _of(events, ECHO_PORT)
    assert connections, "the healthy connection was never reported"
    assert len({c.local.port for c in connections}) == 1  # one connection, the probe's
    assert sum(c.sums["data_segs_out"] for c in connections) > 0
    for c in connections:
        assert not set(PROBLEMS) & set(c.seconds), c.seconds  # zeros are left out
        assert c.seconds["app_limited"] > 0
        assert c.problem_intervals == 0
    assert records == []


def test_contradicting_profile_settings_are_an_input_error_naming_the_field():
    with echo_pair([], []) as hosts:
        sniffer = SnifferDaemon(hosts)
        for request, field in [
            ({"cpu_lower_pct": 5.0, "cpu_upper_pct": 5.0}, "cpu_lower_pct"),
            ({"cpu_lower_pct": 6.0, "cpu_upper_pct": 3.0}, "cpu_lower_pct"),
            ({"table_interval_s": 0.02}, "fast_interval_min_s"),  # below the 0.05 default
            ({"table_interval_max_s": 0.2}, "table_interval_max_s"),
            ({"cpu_upper_pct": 0.0}, "cpu_upper_pct"),  # the protocol's own bound
        ]:
            reply = sniffer.ask({"id": 3, "cmd": "profile", **request})
            assert reply["ok"] is False, (request, reply)
            assert reply["error"]["kind"] == "input", (request, reply)
            assert field in reply["error"]["message"], (request, reply)
        started = sniffer.ask({"id": 4, "cmd": "profile", "report_interval_s": 3600.0})
        assert started["ok"], started  # the daemon lives on and profiles
        assert sniffer.ask({"id": 5, "cmd": "unprofile"})["ok"]
        sniffer.end()
    assert [e["event"] for e in sniffer.events] == ["snap"]  # unprofile's last report
    SnapReportEvent.model_validate(sniffer.events[0])

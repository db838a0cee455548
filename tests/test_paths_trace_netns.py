"""Causal paths from real packets (root): a client in host a asks a server in host b, which asks
a database on b over loopback (IPv4, or IPv6's ::1) twice per request. Both hosts' sniffers
trace; the reconciled trace's dominant path is that call structure for every request, every
message has both timestamps, each end its process, each connection's set-up is seen."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coordinator.live.trace_events import host_trace
from linkgrad.paths.clocks import clock_offsets
from linkgrad.paths.instances import path_instances
from linkgrad.paths.patterns import aggregate
from linkgrad.paths.reconcile import reconcile
from linkgrad.paths.structural import context_probabilities
from linkgrad.paths.threads import one_request_per_thread
from linkgrad.paths.wap5 import LinkingSettings
from linkgrad.protocol.trace import TraceReportEvent
from tests.marks import NETNS
from tests.netns_tools.pairs import echo_pair
from tests.netns_tools.sniffer_daemon import SnifferDaemon

pytestmark = NETNS

MID_PORT, DB_PORT = 7441, 7442
REQUESTS = 150

_NAME = """
import ctypes
ctypes.CDLL(None).prctl(15, {name!r}.encode(), 0, 0, 0)
"""

# the database: answers each 8-byte query with 200 bytes, on every connection
DB = _NAME.format(name="lgdb") + """
import socket, threading, sys
address = sys.argv[2]
srv = socket.create_server((address, int(sys.argv[1])),
                           family=socket.AF_INET6 if ":" in address else socket.AF_INET)
print("ready", flush=True)
def one(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while c.recv(8):
        c.sendall(b"r" * 200)
while True:
    c, _ = srv.accept()
    threading.Thread(target=one, args=(c,), daemon=True).start()
"""

# the server: per request, two queries in sequence on its own database connection, then
# 500 bytes back
MID = _NAME.format(name="lgmid") + """
import socket, threading, sys
srv = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
def one(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    db = socket.create_connection((sys.argv[3], int(sys.argv[2])))
    db.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while c.recv(16):
        for _ in range(2):
            db.sendall(b"q" * 8)
            got = 0
            while got < 200:
                got += len(db.recv(4096))
        c.sendall(b"a" * 500)
while True:
    c, _ = srv.accept()
    threading.Thread(target=one, args=(c,), daemon=True).start()
"""

CLIENT = _NAME.format(name="lgclient") + """
import random, socket, sys, time
socks = [socket.create_connection((sys.argv[1], int(sys.argv[2]))) for _ in range(2)]
for s in socks:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for i in range(int(sys.argv[3])):
    s = socks[i % 2]
    s.sendall(b"g" * 16)
    got = 0
    while got < 500:
        got += len(s.recv(4096))
    time.sleep(random.uniform(0.005, 0.03))
print("done", flush=True)
"""


def _ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"


@pytest.mark.parametrize("loopback", ["127.0.0.1", "::1"])
def test_a_two_tier_request_s_path_is_found_from_both_hosts_packets(loopback: str) -> None:
    with echo_pair([], []) as hosts:
        servers = [hosts.popen("b", sys.executable, "-c", DB, str(DB_PORT), loopback,
                               stdout=subprocess.PIPE, text=True)]
        _ready(servers[0])
        servers.append(hosts.popen("b", sys.executable, "-c", MID, str(MID_PORT),
                                   str(DB_PORT), loopback, stdout=subprocess.PIPE, text=True))
        _ready(servers[1])
        sniffers = {h: SnifferDaemon(hosts, h) for h in ("a", "b")}
        started = {h: s.ask({"id": 1, "cmd": "trace", "report_interval_s": 0.5})
                   for h, s in sniffers.items()}
        for reply in started.values():
            assert reply["ok"], reply
            capture = [m for m in reply["result"]["missing"] if not m.startswith("no threads")]
            if capture:
                pytest.skip(capture[0])
        client = hosts.popen("a", sys.executable, "-c", CLIENT, hosts.addresses["b"],
                             str(MID_PORT), str(REQUESTS), stdout=subprocess.PIPE, text=True)
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "done"
        for s in sniffers.values():
            assert s.ask({"id": 2, "cmd": "untrace"})["ok"]
            s.end()
        client.wait(timeout=10)
        for p in servers:
            p.kill()
            p.wait(timeout=10)

    traces = []
    for h, s in sniffers.items():
        events = [TraceReportEvent.model_validate(e) for e in s.events if e["event"] == "trace"]
        assert events, f"no trace event from {h}"
        assert all(e.error is None and e.ring_drops == 0 for e in events)
        traces.append(host_trace(h, started[h]["result"]["addresses"], events))
    trace = reconcile(traces)
    m = trace.messages
    assert len(m) == REQUESTS * 6  # request, two queries, two answers, reply
    assert not (m.send_s != m.send_s).any()
    assert not (m.recv_s != m.recv_s).any()
    assert set(trace.nodes) == {"a/lgclient", "b/lgmid", "b/lgdb"}
    # each message's thread at each end, where the kernel's tracepoints can say it: the
    # middle server's two client connections, a thread each, which make its queries
    if not any(m.startswith("no threads") for r in started.values()
               for m in r["result"]["missing"]):
        mid = trace.nodes.index("b/lgmid")
        assert (m.send_thread[m.src == mid] > 0).all()
        assert (m.recv_thread[m.dst == mid] > 0).all()
        assert len(set(m.recv_thread[(m.dst == mid) & ~trace.is_reply()].tolist())) == 2
        # both servers serve a connection per thread, a request at a time on it
        assert one_request_per_thread(trace).tolist() == [
            n != "a/lgclient" for n in trace.nodes]

    settings = LinkingSettings(window_s=1.0)
    per_root = path_instances(context_probabilities(trace, settings), settings)
    patterns = aggregate([inst[0] for inst in per_root], trace, clock_offsets(trace))
    top = patterns[0]
    assert [h.label for h in top.hops] == [
        f"CLIENT->b/lgmid:{MID_PORT}", f"b/lgmid->b/lgdb:{DB_PORT}",
        f"b/lgdb:{DB_PORT}->b/lgmid", f"b/lgmid->b/lgdb:{DB_PORT}",
        f"b/lgdb:{DB_PORT}->b/lgmid", f"b/lgmid:{MID_PORT}->CLIENT"]
    assert top.count == REQUESTS
    # every connection opened while tracing (SYNs seen, over loopback too): the first request
    # on each of the client's two pays their set-ups, SYN and SYN-ACK on a<->b (the client
    # speaks first); b's loopback to the database is within one host and crosses no link
    assert trace.connections.opened.all()
    first = 2 / REQUESTS
    assert top.crossings == pytest.approx({"a->b": 1 + first, "b->a": 1 + first})
    assert top.response_s > 0

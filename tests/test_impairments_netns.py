"""testbed/impairments.py's link problems on real sockets between two namespaces (root): what
each changes while it holds, and that it is gone after, even when the body fails."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from linkgrad.errors import RuntimeFailure
from testbed import impairments
from tests.marks import IPTABLES
from tests.netns_tools.pairs import echo_pair

pytestmark = IPTABLES

PORT = 7131
SENT = 2000  # bytes echoed: several windows of 64 B, two segments without the route
# a client in a: connects, has SENT bytes echoed, says so, and holds the connection until
# its stdin closes (then prints how the connection ended)
CLIENT = f"""
import socket, sys
s = socket.create_connection((sys.argv[1], {PORT}), timeout=10)
s.sendall(b"x" * {SENT})
got = 0
while got < {SENT}:
    got += len(s.recv(65536))
print("echoed", flush=True)
sys.stdin.read()
try:
    print("eof" if s.recv(1) == b"" else "data", flush=True)
except OSError as e:
    print(type(e).__name__, flush=True)
"""


@pytest.fixture
def pair():
    with echo_pair([PORT], []) as hosts:
        yield hosts


def _client(pair) -> subprocess.Popen[str]:
    proc = pair.popen("a", sys.executable, "-c", CLIENT, pair.addresses["b"],
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "echoed"
    return proc


def _server_info(pair) -> str:
    return pair.exec("b", "ss", "-tinH", "sport", "=", f":{PORT}").stdout


def _device(pair) -> str:
    return f"{pair.tag}ab"


def _routes(pair) -> str:
    return pair.exec("a", "ip", "route", "show", "exact", f"{pair.addresses['b']}/32").stdout


def test_a_route_window_caps_what_the_peer_sends_and_goes_after(pair):
    with impairments.route_metrics(pair.ns("a"), pair.addresses["b"], {"window": 64},
                                   device=_device(pair)):
        assert "window 64" in _routes(pair)
        client = _client(pair)
        segments = int(re.search(r"data_segs_out:(\d+)", _server_info(pair)).group(1))
        assert segments >= SENT // 64  # b sent the echo a window of 64 B at a time
        client.kill()  # pair.remove waits for it
    assert _routes(pair) == ""


def test_a_route_there_already_is_not_changed(pair):
    dst = f"{pair.addresses['b']}/32"
    pair.exec("a", "ip", "route", "add", dst, "dev", _device(pair), "initcwnd", "5")
    with pytest.raises(RuntimeFailure, match="already"), impairments.route_metrics(
            pair.ns("a"), pair.addresses["b"], {"initcwnd": 1}, device=_device(pair)):
        pass
    assert "initcwnd 5" in _routes(pair)


def test_advmss_makes_the_peer_send_small_segments(pair):
    with impairments.route_metrics(pair.ns("a"), pair.addresses["b"], {"advmss": 48},
                                   device=_device(pair)):
        client = _client(pair)
        advertised = re.search(r"\badvmss:(\d+)", pair.exec(
            "a", "ss", "-tinH", "dport", "=", f":{PORT}").stdout).group(1)
        # the peer sends segments of what the client advertised: 48 less the timestamps' 12 B
        # (tcp_min_snd_mss), or on kernels that floor a route's advmss at TCP_MIN_MSS, 88 less
        # 12 (6.18 does), against 1448 without the route
        assert advertised in ("36", "76")
        assert re.search(r"\bmss:(\d+)", _server_info(pair)).group(1) == advertised
        client.kill()  # pair.remove waits for it


def test_random_loss_is_one_rule_removed_even_when_the_body_fails(pair):
    a = pair.addresses["a"]
    seen = []

    def failing() -> None:
        with impairments.random_loss(pair.ns("b"), a, 0.25):
            seen.append(pair.iptables_rules("b"))
            raise KeyError("the body failed")

    with pytest.raises(KeyError):
        failing()
    assert f"-A INPUT -s {a}/32 -m statistic --mode random --probability 0.25" in seen[0]
    assert "statistic" not in pair.iptables_rules("b")


def test_closed_connections_are_reset(pair):
    client = _client(pair)
    impairments.close_connections(pair.ns("a"), pair.addresses["b"], PORT)
    deadline = time.monotonic() + 5  # b's end goes once the reset reaches it
    while _server_info(pair).strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _server_info(pair).strip() == ""
    client.stdin.close()
    assert client.stdout.readline().strip() in ("ConnectionAbortedError",
                                                "ConnectionResetError")
    client.wait(timeout=10)

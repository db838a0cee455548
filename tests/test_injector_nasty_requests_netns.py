"""Nasty request lines to the real injector in a namespace (root; CI runs them): each gets one
error reply naming what was wrong, and then a good request works (issue 13). `Lines` serves
the sniffer's test too."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

import pytest

from testbed.pairs.hosts import Hosts
from tests.marks import IPTABLES
from tests.netns_tools.pairs import echo_pair

pytestmark = IPTABLES

UDP_PORT = 7303


@pytest.fixture
def pair():
    with echo_pair([], [UDP_PORT]) as hosts:
        yield hosts


class Lines:
    """A daemon's stdin and stdout as raw lines, bypassing every client-side check."""

    def __init__(self, hosts: Hosts, *argv: str) -> None:
        self.proc = hosts.popen("a", sys.executable, "-m", *argv, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=False)
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.ready = self.next()
        assert self.ready["event"] == "ready", self.ready

    def next(self) -> dict[str, Any]:
        while True:
            line = self.stdout.readline()
            assert line, f"the daemon ended (exit status {self.proc.wait(timeout=15)})"
            message = json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} sent"))
            if message.get("event") != "report":
                return message

    def ask(self, raw: bytes) -> dict[str, Any]:
        self.stdin.write(raw + b"\n")
        self.stdin.flush()
        return self.next()

    def end(self) -> dict[str, Any]:
        self.stdin.close()
        stopped = self.next()
        assert self.proc.wait(timeout=15) == 0
        return stopped


def _add(dst: Any, **schedule: Any) -> bytes:
    return json.dumps({"id": 1, "cmd": "add", "link": {"proto": "udp", "dst": dst},
                       "schedule": {"kind": "constant", "magnitude_ms": 10, **schedule}}
                      ).encode()


def test_the_injector_answers_nasty_requests_and_then_delays(pair):
    b = pair.addresses["b"]
    good_dst = f"{b}:{UDP_PORT}"
    nasty = [
        (_add(5), "field 'link.dst': "),
        (_add(f"{b}:٧٣٠٣"), "is not a number 0-65535"),
        (_add("0.0.0.0/0"), "a link is between hosts"),
        (_add("::/0"), "a link is between hosts"),
        (_add("fe80::1%eth0"), "a zone (%...) cannot be matched"),
        (_add(f"::ffff:{b}:{UDP_PORT}"), "written [::ffff:a.b.c.d]:PORT"),
        (_add(good_dst, start=float("nan")), "field 'schedule.start': Input should be a finite"),
        (_add(good_dst, magnitude_ms=float("inf")), "field 'schedule.magnitude_ms'"),
        (_add(good_dst, kind="square", period_s=1, cycles=10**400), "field 'schedule.cycles'"),
        (b"[" * 100_000, "nested too deeply"),
        (b'{"id": 1, "cmd": "h\xffealth"}', "not UTF-8"),
        (b'{"id": 1, "cmd": "health", "pad": "' + b"x" * (2 << 20) + b'"}', "longer than"),
        (b'{"id": NaN, "cmd": "health"}', "field 'id'"),
    ]
    daemon = Lines(pair, "injector", "--queue", "5640")
    try:
        for raw, expected in nasty:
            reply = daemon.ask(raw)
            assert reply["ok"] is False, (raw[:80], reply)
            assert reply["error"]["kind"] == "input"
            assert expected in reply["error"]["message"], (raw[:80], reply)
        base = statistics.median(pair.probe("a", "udp", b, UDP_PORT, 20, 0.005).rtt)
        assert daemon.ask(_add(good_dst))["ok"]
        delayed = statistics.median(pair.probe("a", "udp", b, UDP_PORT, 20, 0.005).rtt)
        # at least the 10 ms asked, plus a busy machine's wake-ups (12.0 in one CI run),
        # and not a unit off
        assert 0.009 <= delayed - base < 0.015, delayed - base
        assert daemon.ask(b'{"id": 2, "cmd": "health"}')["result"]["links"] == 1
        assert daemon.end() == {"event": "stopped", "reason": "stdin closed"}
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
    assert "LINKGRAD" not in pair.iptables_rules("a")

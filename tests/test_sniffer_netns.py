"""The sniffer on real sockets in a namespace (root)."""

import json
import subprocess
import sys

from testbed.pairs.hosts import make_pair
from tests.marks import NETNS
from tests.test_injector_nasty_requests_netns import Lines

pytestmark = NETNS


def _summed(reports: list[dict]) -> list[dict]:
    """One entry per link, messages added over the reports."""
    total: dict[str, dict] = {}
    for report in reports:
        for link in report["links"]:
            # by address and port: a process may exit between reports, its pid then unknown
            key = json.dumps([link["proto"], link["src"]["addr"], link["src"]["port"],
                              link["dst"]["addr"], link["dst"]["port"]])
            entry = total.setdefault(key, {**link, "messages": 0})
            entry["messages"] += link["messages"] or 0
    return list(total.values())


def _watch(hosts, interval_s: float) -> subprocess.Popen:
    sniffer = hosts.popen("a", sys.executable, "-m", "sniffer", stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE)
    ready = json.loads(sniffer.stdout.readline())
    assert ready["event"] == "ready"
    assert ready["closed_sockets"]  # root: the kernel's closing notices are ours
    sniffer.stdin.write(json.dumps({"id": 1, "cmd": "watch", "interval_s": interval_s}) + "\n")
    sniffer.stdin.flush()
    assert json.loads(sniffer.stdout.readline())["ok"]
    return sniffer


def _reports_until_stopped(sniffer: subprocess.Popen) -> list[dict]:
    sniffer.stdin.close()  # the lease ends: a last report, then "stopped"
    reports = []
    while (message := json.loads(sniffer.stdout.readline()))["event"] == "report":
        reports.append(message)
    assert message["event"] == "stopped"
    sniffer.wait(timeout=10)
    return reports


def test_sniffer_reports_the_link_its_process_and_its_messages():
    hosts = make_pair()
    try:
        hosts.echo_servers("b", [7301], [])
        sniffer = _watch(hosts, 0.1)
        hosts.probe("a", "tcp", hosts.addresses["b"], 7301, 40, 0.02)  # 0.8 s, one connection
        links = _summed(_reports_until_stopped(sniffer))
    finally:
        hosts.remove()
    out = [lk for lk in links if lk["dst"]["port"] == 7301]
    back = [lk for lk in links if lk["src"]["port"] == 7301]
    assert len(out) == 1
    assert len(back) == 1
    assert out[0]["src"]["port"] == 0  # the client's ephemeral port, written 0
    assert out[0]["src"]["addr"] == hosts.addresses["a"]
    # 40 requests, 40 echoes: to the last segment, the closing socket's final counters included
    assert out[0]["messages"] == 40
    assert back[0]["messages"] == 40
    assert out[0]["src"]["process"].startswith("python")  # the probe owned the socket
    assert out[0]["dst"]["pid"] is None  # the echo server lives in b: unknown from a


def test_connections_shorter_than_a_poll_interval_are_all_counted():
    """One connection per request, as many apps open to their database: each lives a few ms,
    far less than the 2 s between snapshots, and only the kernel's closing notice sees it."""
    hosts = make_pair()
    try:
        hosts.echo_servers("b", [7302], [])
        sniffer = _watch(hosts, 2.0)
        for _ in range(12):
            hosts.probe("a", "tcp", hosts.addresses["b"], 7302, 1, 0.0)
        links = _summed(_reports_until_stopped(sniffer))
    finally:
        hosts.remove()
    out = [lk for lk in links if lk["dst"]["port"] == 7302]
    back = [lk for lk in links if lk["src"]["port"] == 7302]
    assert out[0]["messages"] == 12
    assert back[0]["messages"] == 12


def test_the_sniffer_answers_nasty_requests_and_then_polls():
    """Each nasty line gets one error naming the field; then a poll is answered (issue 13)."""
    pair = make_pair()
    try:
        daemon = Lines(pair, "sniffer")
        for raw, expected in [
            (b'{"id": 1, "cmd": "poll", "threshold": Infinity}', "field 'threshold'"),
            (b'{"id": 1, "cmd": "poll", "threshold": true}', "field 'threshold'"),
            (b'{"id": 1, "cmd": "watch", "interval_s": NaN}', "field 'interval_s'"),
            (b'{"id": 1, "cmd": "watch", "interval_s": 1e400}', "field 'interval_s'"),
            (b"[" * 100_000, "nested too deeply"),
            (b"\xc3\x28", "not UTF-8"),
        ]:
            reply = daemon.ask(raw)
            assert reply["ok"] is False, (raw[:80], reply)
            assert expected in reply["error"]["message"], (raw[:80], reply)
        poll = daemon.ask(b'{"id": 2, "cmd": "poll", "threshold": 0}')
        assert poll["ok"] is True
        assert poll["result"]["to"] >= poll["result"]["from"]
        assert daemon.end()["reason"] == "stdin closed"
    finally:
        pair.remove()

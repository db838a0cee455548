"""The sniffer on real sockets in a namespace (root)."""

import json
import os
import subprocess
import sys

import pytest

from tests.netns_tools.hosts import make_pair

pytestmark = [pytest.mark.netns,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")]


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


def test_sniffer_reports_the_link_its_process_and_its_messages():
    hosts = make_pair()
    try:
        hosts.echo_servers("b", [7301], [])
        sniffer = hosts.popen("a", sys.executable, "-m", "sniffer", stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
        assert json.loads(sniffer.stdout.readline())["event"] == "ready"
        sniffer.stdin.write('{"id": 1, "cmd": "watch", "interval_s": 0.1}\n')
        sniffer.stdin.flush()
        assert json.loads(sniffer.stdout.readline())["ok"]
        hosts.probe("a", "tcp", hosts.addresses["b"], 7301, 40, 0.02)  # 0.8 s, one connection
        sniffer.stdin.close()
        reports = []
        while (message := json.loads(sniffer.stdout.readline()))["event"] == "report":
            reports.append(message)
        assert message["event"] == "stopped"
        sniffer.wait(timeout=10)
        links = _summed(reports)
    finally:
        hosts.remove()
    out = [lk for lk in links if lk["dst"]["port"] == 7301]
    back = [lk for lk in links if lk["src"]["port"] == 7301]
    assert len(out) == 1
    assert len(back) == 1
    assert out[0]["src"]["port"] == 0  # the client's ephemeral port, written 0
    assert out[0]["src"]["addr"] == hosts.addresses["a"]
    # 40 requests. Snapshots every 0.1 s see a live socket's counters; what a connection sends
    # after the last snapshot before it closes is not seen (at most one interval: ~5 here)
    assert 35 <= out[0]["messages"] <= 42
    assert 35 <= back[0]["messages"] <= 42
    assert out[0]["src"]["process"].startswith("python")  # the probe owned the socket
    assert out[0]["dst"]["pid"] is None  # the echo server lives in b: unknown from a

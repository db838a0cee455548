"""IPv6, the pure parts (issue 13): the sniffer writes an IPv4-mapped address as the IPv4 link
it is and keeps native IPv6 ends; the graph names IPv6 ends by the hosts' own addresses; a run
says which host pairs talk IPv6 and refuses an include that only matches them. The run loop
is checked against the fake remote with an IPv6 connection beside the application's IPv4 ones.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import IO

import pytest

from common.errors import InputError
from common.protocol.fields import parse_endpoint_text
from common.protocol.injector import LinkSpec
from common.protocol.sniffer import LinkCount, Report, SnifferReady
from coordinator.config.experiment import Experiment
from coordinator.config.run_dir import RunDir, RunJournal
from coordinator.core.graph import build_graph, ipv6_only_selectors, ipv6_warning, select
from coordinator.live.run import run_experiment
from coordinator.live.session import ipv6_hosts
from injector.link import Endpoint, Link, parse_endpoint
from injector.rules import match_args
from sniffer.daemon import Service, Sniffer
from sniffer.daemon import run as run_sniffer
from sniffer.kernel import _record
from sniffer.links import Process, SocketRecord, is_ipv6, link_counts, plain_address
from tests.fakes.remote import OWNERS, START_S, FakeApplication, FakeRemote
from tests.test_run_fake_remote import Fake, experiment

HOSTS = {"10.9.0.2": "app", "10.9.0.3": "db", "fd00::2": "app", "fd00::3": "db"}


def test_an_ipv4_mapped_address_is_the_ipv4_address_and_ipv6_is_compressed():
    assert plain_address("::ffff:10.0.0.2") == "10.0.0.2"
    assert plain_address("::FFFF:0a00:0002") == "10.0.0.2"
    assert plain_address("fd00:0:0::0002") == "fd00::2"
    assert plain_address("10.0.0.2") == "10.0.0.2"
    assert plain_address("not an address") == "not an address"
    assert is_ipv6("fd00::2")
    assert is_ipv6("fe80::1")
    assert not is_ipv6("::ffff:10.0.0.2")
    assert not is_ipv6("10.0.0.2")
    assert not is_ipv6("")


@pytest.mark.parametrize(("text", "parsed"), [
    ("::ffff:10.0.0.2", ("10.0.0.2", 0)),
    ("[::ffff:10.0.0.2]:5432", ("10.0.0.2", 5432)),
    ("[::FFFF:0a00:0002]", ("10.0.0.2", 0)),
])
def test_an_ipv4_mapped_endpoint_is_its_ipv4_endpoint_for_the_injector(text, parsed):
    assert parse_endpoint_text(text) == parsed
    spec = LinkSpec(proto="tcp", dst=text)
    assert spec.dst == text  # the wire form stays as written
    link = Link("tcp", Endpoint(), parse_endpoint("[::ffff:10.0.0.2]:5432", "dst"))
    assert match_args(link) == ["-p", "tcp", "-d", "10.0.0.2", "--dport", "5432"]


@pytest.mark.parametrize(("text", "reason"), [
    ("fd00::3", "IPv6 is not supported yet"),
    ("[fd00::3]:5432", "later step"),
    ("::ffff:10.0.0.2:5432", "written [::ffff:a.b.c.d]:PORT"),
    ("::ffff:10.0.0.0/104", "IPv6 is not supported yet"),
    ("[::ffff:10.0.0.2]x", "IPv6 is not supported yet"),
    ("::ffff:0.0.0.0", "unspecified address"),
    ("[::ffff:10.0.0.2]:70000", "outside 0-65535"),
])
def test_other_ipv6_endpoints_are_refused_with_the_reason(text, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_endpoint_text(text)


class _Msg(dict):
    """A sock_diag message as pyroute2 decodes it: fields by key, attributes by get_attr."""

    def __init__(self, info: dict | None, **fields: object) -> None:
        super().__init__(fields)
        self.info = info

    def get_attr(self, name: str) -> dict | None:
        return self.info if name == "INET_DIAG_INFO" else None


def test_a_socket_of_a_server_on_any_ipv6_address_counts_on_its_ipv4_link():
    """What a Java or Go server listening on [::] holds for an IPv4 client: an AF_INET6
    socket with IPv4-mapped ends. It is the client's IPv4 link, not a link of its own."""
    msg = _Msg({"tcpi_data_segs_out": 7, "tcpi_data_segs_in": 5}, idiag_src="::ffff:10.9.0.3",
               idiag_sport=5432, idiag_dst="::ffff:10.9.0.2", idiag_dport=40001,
               idiag_inode=12, idiag_state=1)
    record = _record(msg, "tcp")
    assert record == SocketRecord("tcp", "10.9.0.3", 5432, "10.9.0.2", 40001, 12, 7, 5)
    counts = link_counts({}, [record], {12: Process(3, "java")}, (32768, 60999))
    assert {(lk.src_addr, lk.src_port, lk.dst_addr, lk.dst_port): n
            for lk, n in counts.items()} == {("10.9.0.3", 5432, "10.9.0.2", 0): 7,
                                              ("10.9.0.2", 0, "10.9.0.3", 5432): 5}


def test_a_native_ipv6_socket_keeps_its_addresses():
    msg = _Msg({"tcpi_data_segs_out": 2, "tcpi_data_segs_in": 1}, idiag_src="fd00::2",
               idiag_sport=40003, idiag_dst="fd00::3", idiag_dport=11211, idiag_inode=9,
               idiag_state=1)
    assert _record(msg, "tcp") == SocketRecord("tcp", "fd00::2", 40003, "fd00::3", 11211, 9,
                                               2, 1)
    assert _record(_Msg(None, idiag_src="fd00::2", idiag_sport=1, idiag_dst="fd00::3",
                        idiag_dport=2, idiag_inode=0, idiag_state=6), "tcp") is None


def _report(*links: tuple[str, int, str, int, int]) -> Report:
    return Report.model_validate({"from": 0.0, "to": 1.0, "links": [
        LinkCount.model_validate({"proto": "tcp", "src": {"addr": s, "port": sp},
                                  "dst": {"addr": d, "port": dp}, "messages": n})
        for s, sp, d, dp, n in links]})


def _graph():
    app = _report(("10.9.0.2", 0, "10.9.0.3", 5432, 40), ("fd00::2", 0, "fd00::3", 11211, 30),
                  ("fd00::3", 11211, "fd00::2", 0, 30))  # the last: the receiving side's
    db = _report(("10.9.0.3", 5432, "10.9.0.2", 0, 40), ("fd00::3", 11211, "fd00::2", 0, 25),
                 ("fd00::9", 0, "fd00::3", 11211, 99))  # not a host of the experiment
    return build_graph([("app", app), ("db", db)], HOSTS, threshold=1)


def test_the_graph_names_ipv6_ends_by_the_hosts_own_addresses():
    graph = _graph()
    assert [(g.label, g.messages, g.ipv6) for g in graph] == [
        ("tcp app:0 -> db:5432", 40, False), ("tcp db:5432 -> app:0", 40, False),
        ("tcp app:0 -> db:11211", 30, True), ("tcp db:11211 -> app:0", 25, True)]
    assert [g.src_addr for g in graph if g.ipv6] == ["fd00::2", "fd00::3"]


def test_a_run_warns_which_hosts_talk_ipv6_and_that_they_are_not_measured():
    warning = ipv6_warning(_graph())
    assert warning is not None
    assert warning.startswith("IPv6 between app->db, db->app: 2 links not measured")
    assert "tcp app:0 -> db:11211 (fd00::2 -> fd00::3)" in warning
    assert "IPv4 links only" in warning
    assert ipv6_warning([g for g in _graph() if not g.ipv6]) is None


def test_an_include_that_matches_only_ipv6_links_is_named():
    graph = _graph()
    include = ["app->db", "*->db:11211", "re:11211", "db:5432->*", "web->db"]
    assert ipv6_only_selectors(graph, include) == ["*->db:11211", "re:11211"]
    # one that matches both is no error: it measures the IPv4 link
    assert [g.label for g in select([g for g in graph if not g.ipv6], ["app->db"], [])] == [
        "tcp app:0 -> db:5432"]


def test_an_address_two_hosts_claim_names_neither():
    assert ipv6_hosts({"app": ("fd00::2", "fe80::1"), "db": ("fd00::3", "fe80::1"),
                       "web": ()}) == {"fd00::2": "app", "fd00::3": "db"}


def test_the_sniffers_ready_line_carries_its_ipv6_addresses_only_when_known():
    def ready(ipv6: tuple[str, ...] | None) -> dict:
        out = io.StringIO()
        sniffer = Sniffer(list, dict, (32768, 60999), lambda: 1.0)
        run_sniffer(Service(sniffer, out), io.StringIO(""), None, ipv6)
        return json.loads(out.getvalue().splitlines()[0])

    assert "ipv6_addresses" not in ready(None)
    assert ready(("fd00::2",))["ipv6_addresses"] == ["fd00::2"]
    assert ready(())["ipv6_addresses"] == []
    parsed = SnifferReady.model_validate(ready(("fd00::2",)))
    assert parsed.ipv6_addresses == ("fd00::2",)


# ------------------------------------------------------------- the run, on the fake remote

IPV6 = {"web": ("fd00::1",), "app": ("fd00::2",), "db": ("fd00::3",)}


class _Ipv6App(FakeApplication):
    """The fake application, plus a connection app -> db:11211 over IPv6 (a cache on db)."""

    def sockets(self, host: str) -> list[SocketRecord]:
        n = int((self.clock.time() - START_S) * 10)  # ten segments a second each way
        extra = {"app": [SocketRecord("tcp", "fd00::2", 40003, "fd00::3", 11211, 200, n, n)],
                 "db": [SocketRecord("tcp", "fd00::3", 11211, "fd00::2", 40003, 201, n, n)]}
        return [*super().sockets(host), *extra.get(host, [])]


def _sniffer_with_ipv6(self: FakeRemote, stdin: IO[str], stdout: IO[str]) -> int:
    """FakeRemote's sniffer, saying its host's IPv6 addresses as the real one does."""
    app, clock = self.hosts.app, self.hosts.app.clock
    sniffer = Sniffer(lambda: app.sockets(self.name),
                      lambda: {100 + i: Process(10 + i, OWNERS[self.name]) for i in range(2)},
                      ephemeral=(32768, 60999), clock=clock.time)
    return run_sniffer(Service(sniffer, stdout), stdin, None, IPV6[self.name])


def _fake(monkeypatch: pytest.MonkeyPatch) -> Fake:
    monkeypatch.setattr(FakeRemote, "_sniffer", _sniffer_with_ipv6)
    monkeypatch.setattr("tests.test_run_fake_remote.FakeApplication", _Ipv6App)
    return Fake()


def test_a_run_measures_the_ipv4_links_and_records_the_ipv6_ones(tmp_path: Path,
                                                                  monkeypatch):
    fake, run_dir = _fake(monkeypatch), tmp_path / "run"
    said: list[str] = []
    journal = _run(fake, experiment(tmp_path), run_dir, said)
    assert journal.status == "completed"
    run = json.loads((run_dir / "run.json").read_text())
    assert len(run["warnings"]) == 1
    assert run["warnings"][0].startswith("IPv6 between app->db, db->app: 2 links not measured")
    assert any("IPv6 between app->db" in line for line in said)  # on the console too
    graph = {g["label"]: g for g in json.loads((run_dir / "graph.json").read_text())}
    assert graph["tcp app:0 -> db:11211"]["src_addr"] == "fd00::2"  # kept, so predict knows
    measured = sorted(m.link["label"] for m in RunDir(run_dir).measurements())
    assert measured == ["tcp app:0 -> db:5432", "tcp db:5432 -> app:0"]


def test_a_run_whose_include_matches_only_ipv6_links_is_refused(tmp_path: Path, monkeypatch):
    fake = _fake(monkeypatch)
    with pytest.raises(InputError) as e:
        _run(fake, experiment(tmp_path, include=["app->db:11211"]), tmp_path / "run", [])
    message = str(e.value)
    assert "'app->db:11211' matches only links over IPv6" in message
    assert "parameters.include" in message
    assert fake.hosts.engines == {}  # refused before any injector was started


def _run(fake: Fake, exp: Experiment, run_dir: Path, said: list[str]) -> RunJournal:
    return run_experiment(exp, run_dir, said.append, connect=fake.hosts.connect,
                          clock=fake.clock)

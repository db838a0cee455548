"""IPv6, the pure parts (issue 13): the sniffer writes an IPv4-mapped address as the IPv4 link
it is and keeps native IPv6 ends; endpoints in requests may be IPv6 (`[fd00::3]:5432`), and the
injector matches them through ip6tables; the graph names IPv6 ends by the hosts' own addresses.
The run loop measures a fake application whose app<->db connection is IPv6.
"""

from __future__ import annotations

import errno
import io
import json
import re
import socket
from dataclasses import replace
from pathlib import Path
from typing import IO

import pytest
from pydantic import ValidationError

from coordinator.config.run_dir import RunDir
from coordinator.config.run_inputs import load_run
from coordinator.live.run import run_experiment
from coordinator.live.session import ipv6_hosts
from coordinator.live.validate import PlacementChanges, validate_placements
from injector.link import Endpoint, Link, parse_endpoint
from injector.rules import match_args
from linkgrad.errors import InputError
from linkgrad.graph import build_graph, select
from linkgrad.prediction import Estimate
from linkgrad.protocol.fields import parse_endpoint_text
from linkgrad.protocol.injector import LinkSpec
from linkgrad.protocol.sniffer import LinkCount, Report, SnifferReady
from sniffer.daemon import Service, Sniffer
from sniffer.daemon import run as run_sniffer
from sniffer.kernel import dump_sockets, socket_records
from sniffer.links import Process, SocketRecord, is_ipv6, link_counts, plain_address
from sniffer.sockdiag import SockDiag, SocketTable, empty_table, parse_datagram
from tests.fakes.diag_messages import diag_message
from tests.fakes.remote import (
    ADDRESSES,
    CLIENT_PORT,
    DB_PORT,
    OWNERS,
    FakeApplication,
    FakeRemote,
)
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


@pytest.mark.parametrize(("text", "parsed"), [
    ("fd00::3", ("fd00::3", 0)),
    ("[fd00:0:0::3]:5432", ("fd00::3", 5432)),
    ("fd00::/64", ("fd00::/64", 0)),
    ("[fd00::1/64]:80", ("fd00::/64", 80)),
    ("fe80::1", ("fe80::1", 0)),
])
def test_ipv6_endpoints_go_to_ip6tables(text, parsed):
    assert parse_endpoint_text(text) == parsed
    link = Link("tcp", Endpoint(), parse_endpoint(text, "dst"))
    assert link.version == 6
    assert match_args(link)[:4] == ["-p", "tcp", "-d", parsed[0]]


@pytest.mark.parametrize(("text", "reason"), [
    ("::/0", "a link is between hosts"),
    ("2001::/7", "a link is between hosts"),
    ("::", "unspecified address (::)"),
    ("fe80::1%eth0", "a zone (%...) cannot be matched"),
    ("::ffff:10.0.0.2:5432", "written [::ffff:a.b.c.d]:PORT"),
    ("::ffff:10.0.0.0/104", "IPv4-mapped network: give the IPv4 network"),
    ("[fd00::3]x", "written [ADDRESS]:PORT"),
    ("[fd00::3", "written [ADDRESS]:PORT"),
    ("::ffff:0.0.0.0", "unspecified address"),
    ("[::ffff:10.0.0.2]:70000", "outside 0-65535"),
    ("[fd00::3]:٥", "is not a number 0-65535"),
    ("fd00::3:5432x", "not an IPv4 or IPv6 address"),
])
def test_bad_ipv6_endpoints_are_refused_with_the_reason(text, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_endpoint_text(text)


def test_a_link_of_both_ip_versions_and_icmp_over_ipv6():
    with pytest.raises(ValidationError, match="different IP versions"):
        LinkSpec(proto="tcp", src="10.0.0.2", dst="[fd00::3]:5432")
    with pytest.raises(InputError, match="different IP versions"):
        Link("tcp", parse_endpoint("10.0.0.2", "src"), parse_endpoint("fd00::3", "dst"))
    icmp = Link("icmp", Endpoint(), parse_endpoint("fd00::3", "dst"))
    assert match_args(icmp) == ["-p", "ipv6-icmp", "-d", "fd00::3"]
    assert str(Link("tcp", Endpoint(), parse_endpoint("[fd00::3]:5432", "dst"))) == \
        "tcp *:0 -> [fd00::3]:5432"


def _record(message: bytes) -> SocketRecord | None:
    found = socket_records(parse_datagram(message), "tcp")
    return found[0] if found else None


def test_a_socket_of_a_server_on_any_ipv6_address_counts_on_its_ipv4_link():
    """What a Java or Go server listening on [::] holds for an IPv4 client: an AF_INET6
    socket with IPv4-mapped ends. It is the client's IPv4 link, not a link of its own."""
    record = _record(diag_message("::ffff:10.9.0.3", 5432, "::ffff:10.9.0.2", 40001, inode=12,
                                  info={"data_segs_out": 7, "data_segs_in": 5}))
    assert record == SocketRecord("tcp", "10.9.0.3", 5432, "10.9.0.2", 40001, 12, 7, 5)
    counts = link_counts({}, [record], {12: Process(3, "java")}, (32768, 60999))
    assert {(lk.src_addr, lk.src_port, lk.dst_addr, lk.dst_port): n
            for lk, n in counts.items()} == {("10.9.0.3", 5432, "10.9.0.2", 0): 7,
                                              ("10.9.0.2", 0, "10.9.0.3", 5432): 5}


def test_a_native_ipv6_socket_keeps_its_addresses():
    message = diag_message("fd00::2", 40003, "fd00::3", 11211, inode=9,
                           info={"data_segs_out": 2, "data_segs_in": 1})
    assert _record(message) == SocketRecord("tcp", "fd00::2", 40003, "fd00::3", 11211, 9, 2, 1)
    assert _record(diag_message("fd00::2", 1, "fd00::3", 2, inode=0, state=6)) is None


def test_a_kernel_without_ipv6_still_gives_its_ipv4_sockets(monkeypatch):
    """A kernel booted with ipv6.disable=1: AF_INET6 dumps fail."""

    def dump(self: SockDiag, family: int, protocol: int, **_: object) -> SocketTable:
        if family == socket.AF_INET6:
            raise OSError(errno.ENOENT, "No such file or directory")
        if protocol != socket.IPPROTO_TCP:
            return empty_table()
        return parse_datagram(diag_message("10.9.0.2", 40001, "10.9.0.3", 5432, inode=5,
                                           info={"data_segs_out": 1, "data_segs_in": 1}))

    monkeypatch.setattr(SockDiag, "dump", dump)
    assert dump_sockets() == [SocketRecord("tcp", "10.9.0.2", 40001, "10.9.0.3", 5432, 5, 1,
                                           1)]


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
        ("tcp6 app:0 -> db:11211", 30, True), ("tcp6 db:11211 -> app:0", 25, True)]
    v6 = [g.injector_link() for g in graph if g.ipv6]
    assert [(s.src, s.dst) for s in v6] == [("fd00::2", "[fd00::3]:11211"),
                                            ("[fd00::3]:11211", "fd00::2")]


def test_an_ipv4_and_an_ipv6_link_of_one_host_pair_and_port_are_two_links():
    app = _report(("10.9.0.2", 0, "10.9.0.3", 5432, 4), ("fd00::2", 0, "fd00::3", 5432, 3))
    graph = build_graph([("app", app)], HOSTS, threshold=1)
    assert [g.label for g in graph] == ["tcp app:0 -> db:5432", "tcp6 app:0 -> db:5432"]
    assert [g.label for g in select(graph, ["app->db"], ["re:^tcp6"])] == [
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

IPV6 = {"web": "fd00::1", "app": "fd00::2", "db": "fd00::3"}


class _Ipv6App(FakeApplication):
    """The fake application with its app<->db connection over IPv6 (web<->app stays IPv4):
    the sockets the sniffers read, and the delays the fake injectors apply, are IPv6's."""

    def sockets(self, host: str) -> list[SocketRecord]:
        def v6(record: SocketRecord) -> SocketRecord:
            if DB_PORT not in (record.local_port, record.remote_port):
                return record
            by_v4 = {v4: IPV6[name] for name, v4 in ADDRESSES.items()}
            return replace(record, local_addr=by_v4[record.local_addr],
                           remote_addr=by_v4[record.remote_addr])

        return [v6(r) for r in super().sockets(host)]

    def _delay_s(self, src: str, dst: str, t_s: float) -> float:
        sport, dport = (CLIENT_PORT, DB_PORT) if src == "app" else (DB_PORT, CLIENT_PORT)
        return sum(e.delay_s(IPV6[src], sport, IPV6[dst], dport, t_s) for e in self.engines)


def _sniffer_with_ipv6(self: FakeRemote, stdin: IO[str], stdout: IO[str]) -> int:
    """FakeRemote's sniffer, saying its host's IPv6 addresses as the real one does."""
    app, clock = self.hosts.app, self.hosts.app.clock
    sniffer = Sniffer(lambda: app.sockets(self.name),
                      lambda: {100 + i: Process(10 + i, OWNERS[self.name]) for i in range(2)},
                      ephemeral=(32768, 60999), clock=clock.time)
    return run_sniffer(Service(sniffer, stdout), stdin, None, (IPV6[self.name],))


def test_a_run_measures_a_link_over_ipv6(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(FakeRemote, "_sniffer", _sniffer_with_ipv6)
    monkeypatch.setattr("tests.test_run_fake_remote.FakeApplication", _Ipv6App)
    fake, run_dir = Fake(), tmp_path / "run"
    journal = run_experiment(experiment(tmp_path), run_dir, lambda _: None,
                             connect=fake.hosts.connect, clock=fake.clock)
    assert journal.status == "completed"
    fake.assert_every_lease_ended()
    graph = {g["label"]: g for g in json.loads((run_dir / "graph.json").read_text())}
    assert graph["tcp6 app:0 -> db:5432"]["src_addr"] == "fd00::2"
    assert graph["tcp web:0 -> app:8000"]["src_addr"] == ADDRESSES["web"]
    links = RunDir(run_dir).measurements()
    assert sorted(m.link.label for m in links) == ["tcp6 app:0 -> db:5432",
                                                     "tcp6 db:5432 -> app:0"]
    for m in links:
        assert m.record.link == m.link.label
        for name, truth in (("two", 2.0), ("none", 0.0)):  # about 3 standard errors
            assert abs(m.transactions[name].gradient - truth) < 0.3, m.transactions[name]


def test_validate_delays_a_pair_over_the_ipv6_ends_its_run_saw(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch):
    """`predict --validate` grows a pair's latency on every family the run saw it use: the
    app<->db pair talks IPv6 only, so a delay between their IPv4 addresses would change
    nothing and the validation would read no change."""
    monkeypatch.setattr(FakeRemote, "_sniffer", _sniffer_with_ipv6)
    monkeypatch.setattr("tests.test_run_fake_remote.FakeApplication", _Ipv6App)
    exp, run_dir = experiment(tmp_path), tmp_path / "run"
    assert Fake().run(exp, run_dir).status == "completed"
    run = load_run(run_dir / "gradients.json")
    assert run.ipv6_traffic[("app", "db")] == {("tcp", IPV6["app"], IPV6["db"])}
    fake = Fake(seed=3)
    changes = {("app", "db"): Estimate(5.0, 0.0), ("db", "app"): Estimate(5.0, 0.0)}
    [validation] = validate_placements(run, [PlacementChanges("east.yaml", changes)], 30.0,
                                       lambda _: None, fake.hosts.connect, fake.clock)
    two = validation.transactions["two"]
    assert two.predicted_ms - two.current_ms == pytest.approx(20.0, abs=3.0)  # 2 x 2 x 5 ms
    assert two.inside
    fake.assert_every_lease_ended()


def test_a_host_s_ipv6_addresses_are_read_from_if_inet6_without_loopback(tmp_path):
    from sniffer.kernel import ipv6_addresses

    table = tmp_path / "if_inet6"
    table.write_text(
        "00000000000000000000000000000001 01 80 10 80       lo\n"
        "fd000000000000000000000000000002 04 40 00 82     eth0\n"
        "fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n"
        "00000000000000000000ffff0a000001 05 60 00 80     eth1\n")  # IPv4-mapped: not IPv6
    assert ipv6_addresses(table) == ("fd00::2", "fe80::fc:ff:fe00:1")
    assert ipv6_addresses(tmp_path / "none") == ()  # IPv6 disabled

"""Packet captures as a host's trace (`paths --pcap HOST=FILE`): captures written with scapy in
each link type tcpdump and Wireshark write (Ethernet, `-i any`'s cooked headers, raw IP,
pcapng), one conversation each: a client asks the host's server, which asks a database."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.all import IP, TCP, CookedLinux, Ether, IPv6, Raw, wrpcap
from scapy.utils import PcapNgWriter

from coordinator.cli.main import main
from coordinator.config.pcap_trace import AmbiguousAddress, parse_pcap_option, read_pcap
from linkgrad.errors import InputError

HOST, CLIENT, DB = "10.0.0.2", "10.0.0.1", "10.0.0.3"
HOST_MAC, OTHER_MAC = "02:00:00:00:00:02", "02:00:00:00:00:01"


def _conversation(ipv6: bool = False) -> list[tuple[float, str, str, int, int, str, int, bytes]]:
    """(time, src, dst, sport, dport, flags, seq, payload): a SYN to the host's port 80, a
    request, a query to the database, its answer, the reply; an ACK and ssh in between."""
    h, c, d = ("fd00::2", "fd00::1", "fd00::3") if ipv6 else (HOST, CLIENT, DB)
    return [
        (1.000, c, h, 40000, 80, "S", 100, b""),
        (1.001, h, c, 80, 40000, "SA", 500, b""),
        (1.002, c, h, 40000, 80, "PA", 101, b"GET / HTTP/1.1\r\n\r\n"),
        (1.003, h, c, 80, 40000, "A", 501, b""),  # a pure ACK: no message
        (1.004, h, d, 50000, 5432, "PA", 900, b"q" * 30),
        (1.005, h, c, 22, 41000, "PA", 77, b"ssh noise"),
        (1.006, d, h, 5432, 50000, "PA", 3000, b"r" * 200),
        (1.007, h, c, 80, 40000, "PA", 501, b"a" * 400),
        (1.008, h, c, 80, 40000, "PA", 901, b"a" * 100),  # the same reply, its last segment
    ]


def _packets(kind: str):
    out = []
    for t, src, dst, sport, dport, flags, seq, data in _conversation(kind == "ipv6"):
        ip = (IPv6(src=src, dst=dst) if ":" in src else IP(src=src, dst=dst)) / \
            TCP(sport=sport, dport=dport, flags=flags, seq=seq) / Raw(data)
        leaving = src in (HOST, "fd00::2")
        if kind in ("ethernet", "ipv6"):
            p = Ether(src=HOST_MAC if leaving else OTHER_MAC,
                      dst=OTHER_MAC if leaving else HOST_MAC) / ip
        elif kind == "cooked":
            p = CookedLinux(pkttype=4 if leaving else 0, proto=0x0800) / ip
        else:
            p = ip
        p.time = 1795000000 + t
        out.append(p)
    return out


def _write(path: Path, kind: str) -> Path:
    if kind == "pcapng":
        with PcapNgWriter(str(path)) as w:
            for p in _packets("ethernet"):
                w.write(p)
    else:
        wrpcap(str(path), _packets(kind), linktype=101 if kind == "raw" else None)
    return path


@pytest.mark.parametrize("kind", ["ethernet", "cooked", "raw", "pcapng", "ipv6"])
def test_each_link_type_gives_the_host_s_messages(tmp_path, kind):
    got = read_pcap("web", _write(tmp_path / f"{kind}.pcap", kind))
    h, c, d = ("fd00::2", "fd00::1", "fd00::3") if kind == "ipv6" else (HOST, CLIENT, DB)
    assert h in got.trace.addresses
    assert c not in got.trace.addresses
    assert d not in got.trace.addresses
    assert (h, 80) in got.trace.listening  # it took a SYN
    assert [(o[0], o[1]) for o in got.trace.openings] == [((c, 40000), (h, 80))]
    messages = [(r.sent, r.remote[1],
                 (r.seq_end - r.seq_first) % (1 << 32)) for r in got.trace.records]
    # the request in, the query out, its answer in, the reply out in two segments (one
    # message); no ACK, no ssh (port 22 left out by default)
    assert messages == [(False, 40000, 18), (True, 5432, 30), (False, 5432, 200),
                        (True, 40000, 500)]
    reply = got.trace.records[-1]
    assert reply.last_s - reply.first_s == pytest.approx(0.001, abs=1e-6)
    assert got.skipped == {"an excluded port (--exclude-port)": 1}
    assert got.segments == 7  # the SYN and SYN-ACK, 5 with data


def test_a_server_whose_syn_fell_before_the_capture_is_known_by_its_fixed_port(tmp_path):
    """The web server's connection was opened before the capture (no SYN in it): its port
    80, below the ephemeral range, is the server's; the client's 40000 is not."""
    packets = [p for p in _packets("cooked") if "S" not in str(p["TCP"].flags)]
    path = tmp_path / "late.pcap"
    wrpcap(str(path), packets)
    got = read_pcap("web", path)
    assert got.trace.openings == ()
    assert (HOST, 80) in got.trace.listening
    assert (HOST, 50000) not in got.trace.listening


def test_a_loopback_reply_closing_its_connection_is_one_message(tmp_path):
    """`-i any` holds each loopback packet twice (leaving, arriving); a reply sent with its
    FIN is one message, not two, with or without the capture saying the direction."""
    lo = [(1.0, 50000, 8080, "PA", 10, b"q" * 20), (1.1, 8080, 50000, "FPA", 70, b"r" * 50)]
    for cooked in (True, False):
        packets = []
        for t, sport, dport, flags, seq, data in lo:
            for leaving in (True, False):
                ip = IP(src="127.0.0.1", dst="127.0.0.1") / \
                    TCP(sport=sport, dport=dport, flags=flags, seq=seq) / Raw(data)
                p = CookedLinux(pkttype=4 if leaving else 0, proto=0x0800) / ip if cooked \
                    else ip
                p.time = 1795000000 + t + (0 if leaving else 1e-6)
                packets.append(p)
        path = tmp_path / f"lo-{cooked}.pcap"
        wrpcap(str(path), packets, linktype=None if cooked else 101)
        got = read_pcap("web", path)
        sizes = sorted((r.seq_end - r.seq_first) % (1 << 32) for r in got.trace.records)
        assert sizes == [20, 50], (cooked, got.trace.records)


def test_a_pcapng_simple_packet_block_is_said_not_read(tmp_path):
    """A Simple Packet Block has no time stamp: counted as left out, never a traceback."""
    import struct as st

    def block(kind: int, body: bytes) -> bytes:
        body += b"\x00" * (-len(body) % 4)
        n = 12 + len(body)
        return st.pack("<II", kind, n) + body + st.pack("<I", n)

    ip = bytes(IP(src=CLIENT, dst=HOST) / TCP(sport=40000, dport=80, flags="PA") / Raw(b"x"))
    path = tmp_path / "spb.pcapng"
    path.write_bytes(block(0x0A0D0D0A, st.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
                     + block(1, st.pack("<HHI", 101, 0, 65535))
                     + block(3, st.pack("<I", len(ip)) + ip))
    got = read_pcap("web", path)
    assert got.skipped == {"no time stamp (a pcapng simple packet block)": 1}


def test_ports_left_out_are_the_ones_asked(tmp_path):
    path = _write(tmp_path / "c.pcap", "cooked")
    got = read_pcap("web", path, exclude_ports=(5432,))
    assert not any(r.remote[1] == 5432 for r in got.trace.records)
    assert any(r.remote[1] == 41000 for r in got.trace.records)  # ssh kept


def test_a_capture_cut_short_keeps_what_it_has(tmp_path):
    path = _write(tmp_path / "cut.pcap", "ethernet")
    data = path.read_bytes()
    path.write_bytes(data[:-50])  # tcpdump killed mid-write
    got = read_pcap("web", path)
    assert len(got.trace.records) == 4  # the last segment's header is whole, its data cut


@pytest.mark.parametrize(("content", "said"), [
    (b"", "not a pcap or pcapng capture"),
    (b"GET / HTTP/1.1\r\n" * 10, "not a pcap or pcapng capture"),
    (b"\xd4\xc3\xb2\xa1\x02\x00", "not a pcap or pcapng capture"),  # its header cut
    (b"\x0a\x0d\x0d\x0a\x00\x00", "not a pcap or pcapng capture"),
])
def test_what_is_no_capture_is_bad_input(tmp_path, content, said):
    path = tmp_path / "x.pcap"
    path.write_bytes(content)
    with pytest.raises(InputError, match=said):
        read_pcap("web", path)
    with pytest.raises(InputError, match="no such capture file"):
        read_pcap("web", tmp_path / "gone.pcap")


def test_a_link_type_it_cannot_read_is_said_per_packet(tmp_path, capsys):
    path = tmp_path / "radio.pcap"
    wrpcap(str(path), [Raw(b"\x00" * 60)] * 3, linktype=127)  # 802.11 radiotap
    got = read_pcap("web", path)
    assert got.trace.records == []
    assert got.skipped == {"link type 127 (not Ethernet, cooked or raw IP)": 3}
    # and a command with no message in any capture exits 2, saying what each left out
    assert main(["paths", "--pcap", f"web={path}"]) == 2
    captured = capsys.readouterr()
    assert "no TCP message in any capture" in captured.err
    assert "3 link type 127" in captured.err.replace("\n", " ") + captured.out


@pytest.mark.parametrize(("text", "said"), [
    ("web", "expected HOST=FILE"), ("=x.pcap", "expected HOST=FILE"),
    ("web=", "expected HOST=FILE"), ("we b=x.pcap", "is not a host name"),
    ("web@=x.pcap", "expected HOST=FILE or HOST@ADDRESS=FILE"),
    ("web@10.0.0.300=x.pcap", "'10.0.0.300' is not an IP address"),
])
def test_the_option_names_a_host_and_a_file(text, said):
    with pytest.raises(InputError, match=said):
        parse_pcap_option(text)


def test_the_option_may_name_the_host_s_addresses():
    got = parse_pcap_option("db@10.0.0.3, fd00:0::3=/tmp/a@b=c.pcap")
    assert (got.host, got.path) == ("db", Path("/tmp/a@b=c.pcap"))
    assert got.addresses == {"10.0.0.3", "fd00::3"}  # as the packets spell them
    assert parse_pcap_option("web=x.pcap").addresses == frozenset()


def test_paths_from_captures_links_the_conversation(tmp_path, capsys):
    path = _write(tmp_path / "web.pcap", "cooked")
    assert main(["paths", "--pcap", f"web={path}", "--json"]) == 0
    result = __import__("json").loads(capsys.readouterr().out)
    assert result["messages"] == 4
    assert result["traced_hosts"] == ["web"]
    assert main(["paths", "--pcap", f"web={path}", "--pcap", f"web={path}"]) == 2
    assert "one capture per host: web" in capsys.readouterr().err
    assert main(["paths", "--trace", str(path), "--pcap", f"web={path}"]) == 2
    assert main(["paths", "--trace", str(path), "--exclude-port", "22"]) == 2
    assert "field '--exclude-port': only with --pcap" in capsys.readouterr().err


def test_a_call_between_two_servers_of_one_host_nests(tmp_path, capsys):
    """nginx asking PHP-FPM over loopback, PHP-FPM the database: in a capture both ends of
    the loopback call are the host, and only the ports say which is the request and which
    the reply. The loopback hop nests between the front end's request and reply, the
    database's call inside it, and crosses no host link."""
    lo = "127.0.0.1"
    rows = []
    for i in range(10):
        b, cp, lp, dp = i * 0.1, 40000 + i, 50000 + i, 51000 + i
        rows += [(b, CLIENT, HOST, cp, 80, "S", 100, b""),
                 (b + 0.001, HOST, CLIENT, 80, cp, "SA", 500, b""),
                 (b + 0.002, CLIENT, HOST, cp, 80, "PA", 101, b"GET / HTTP/1.1\r\n\r\n"),
                 (b + 0.003, lo, lo, lp, 9000, "S", 700, b""),
                 (b + 0.0031, lo, lo, 9000, lp, "SA", 800, b""),
                 (b + 0.004, lo, lo, lp, 9000, "PA", 701, b"f" * 60),
                 (b + 0.005, HOST, DB, dp, 5432, "PA", 900, b"q" * 30),
                 (b + 0.006, DB, HOST, 5432, dp, "PA", 3000, b"r" * 200),
                 (b + 0.007, lo, lo, 9000, lp, "PA", 801, b"p" * 300),
                 (b + 0.008, HOST, CLIENT, 80, cp, "PA", 501, b"a" * 400)]
    packets = []
    for t, src, dst, sport, dport, flags, seq, data in rows:
        for leaving in (True, False) if src == lo else (src == HOST,):  # `-i any`: twice
            p = CookedLinux(pkttype=4 if leaving else 0, proto=0x0800) / \
                IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags=flags, seq=seq) / \
                Raw(data)
            p.time = 1795000000 + t + (0 if leaving else 1e-6)
            packets.append(p)
    path = tmp_path / "web.pcap"
    wrpcap(str(path), packets)
    assert main(["paths", "--pcap", f"web={path}", "--json"]) == 0
    result = __import__("json").loads(capsys.readouterr().out)
    [pattern] = result["patterns"]
    assert pattern["count"] == 10
    hops = [(h["label"], h["parent"]) for h in pattern["hops"]]
    assert hops == [("CLIENT->web:80", -1), ("web->web:9000", 0),
                    (f"web->{DB}:5432", 1), (f"{DB}:5432->web", 2),
                    ("web:9000->web", 3), ("web:80->CLIENT", 4)]
    assert "web->web" not in pattern["crossings"]
    assert pattern["crossings"][f"web->{DB}"] == 1.0


def _db_side(tmp_path: Path, kind: str) -> Path:
    """The database's capture of the conversation: its packets are all with the web host."""
    packets = [p for p in _packets("raw") if DB in (p[IP].src, p[IP].dst)]
    if kind == "ethernet":  # no router between: the two hosts' MACs, one address behind each
        packets = [Ether(src=OTHER_MAC if p[IP].src == DB else HOST_MAC,
                         dst=HOST_MAC if p[IP].src == DB else OTHER_MAC) / p for p in packets]
        for p, raw in zip(packets, [q for q in _packets("raw") if DB in (q[IP].src, q[IP].dst)],
                          strict=True):
            p.time = raw.time
    path = tmp_path / f"db-{kind}.pcap"
    wrpcap(str(path), packets, linktype=101 if kind == "raw" else None)
    return path


@pytest.mark.parametrize("kind", ["raw", "ethernet"])
def test_a_host_that_talked_to_one_peer_is_not_guessed(tmp_path, kind):
    """Every packet is between the database and the web host, and the capture says no
    direction: which address is the database's is not guessed. Its address given, or the
    web host's known (from its own capture), settles it."""
    path = _db_side(tmp_path, kind)
    with pytest.raises(AmbiguousAddress, match=f"which of {HOST}, {DB} is db's own address"
                       ".*--pcap db@ADDRESS=") as said:
        read_pcap("db", path)
    assert said.value.candidates == (HOST, DB)
    for got in (read_pcap("db", path, addresses=frozenset({DB})),
                read_pcap("db", path, others=frozenset({HOST}))):
        assert DB in got.trace.addresses
        assert HOST not in got.trace.addresses
        assert (DB, 5432) in got.trace.listening
        assert [r.sent for r in got.trace.records] == [False, True]
    with pytest.raises(InputError,
                       match=r"10\.9\.9\.9 \(given as db's address\) is in no TCP packet"):
        read_pcap("db", path, addresses=frozenset({"10.9.9.9"}))


def test_paths_settles_a_one_peer_capture_by_the_other_captures(tmp_path, capsys):
    web, db = _write(tmp_path / "web.pcap", "raw"), _db_side(tmp_path, "raw")
    assert main(["paths", "--pcap", f"db={db}"]) == 2
    err = capsys.readouterr().err
    assert f"which of {HOST}, {DB} is db's own address" in err.replace("\n", " ")
    for given in ([f"db={db}", f"web={web}"], [f"web={web}", f"db={db}"],
                  [f"db@{DB}={db}", f"web={web}"]):
        assert main(["paths", "--json", *(a for g in given for a in ("--pcap", g))]) == 0
        result = __import__("json").loads(capsys.readouterr().out)
        [pattern] = result["patterns"]
        hops = [(h["label"], h["parent"]) for h in pattern["hops"]]
        assert hops == [("CLIENT->web:80", -1), ("web->db:5432", 0), ("db:5432->web", 1),
                        ("web:80->CLIENT", 2)], given

"""The socket-call collector's pure parts: the bpftrace program and the parser of its output
(no root; the output below was captured from bpftrace 0.17 on Linux 6.18)."""

import json
import math
import socket

import pytest

from sniffer import socket_calls
from sniffer.socket_call_summary import (
    SocketCallSummary,
    SummaryParser,
    TraceSettings,
    build_program,
)
from sniffer.socket_calls import SocketCallTracer, TracerConfig, probe

# One run of `build_program(TraceSettings(interval_s=0.5, netns_inode=<a fresh namespace>))`,
# stopped by TERM after four flushes, while one process (comm `web,1 "x"\`, pid 15689) in that
# namespace did: 127.0.0.1:40000 -> :5000 three writes of 3000 bytes and two of 100, read in one
# call; a non-blocking read with nothing to read (EAGAIN: not counted); a send on an
# unconnected socket (EPIPE: an error); [::1]:40001 -> :5001 one write of 5000 bytes, peeked at
# (MSG_PEEK: not counted), then read; a dual-stack server on [::]:5002 writing 7 bytes to
# 127.0.0.1:40002 (an IPv4-mapped socket). The blank lines and the last two are bpftrace's own
# print of the maps at exit.
CAPTURED = r'''{"type": "attached_probes", "data": {"probes": 5}}
{"type": "printf", "data": "lg start 56895826378176\n"}
{"type": "printf", "data": "lg ready 56895929738704\n"}
{"type": "printf", "data": "lg flush 56896329732904\n"}
{"type": "stats", "data": {"@ws0": {"15689,::ffff:127.0.0.1,5002,::ffff:127.0.0.1,17052,web,1 \"x\"\\": {"count": 1, "average": 7, "total": 7}, "15689,127.0.0.1,40000,127.0.0.1,34835,web,1 \"x\"\\": {"count": 5, "average": 1840, "total": 9200}, "15689,::1,40001,::1,35091,web,1 \"x\"\\": {"count": 1, "average": 5000, "total": 5000}}}}
{"type": "hist", "data": {"@wh0": {"15689,::1,40001,::1,35091,web,1 \"x\"\\": [{"min": 4096, "max": 8191, "count": 1}], "15689,::ffff:127.0.0.1,5002,::ffff:127.0.0.1,17052,web,1 \"x\"\\": [{"min": 4, "max": 7, "count": 1}], "15689,127.0.0.1,40000,127.0.0.1,34835,web,1 \"x\"\\": [{"min": 64, "max": 127, "count": 2}, {"min": 128, "max": 255, "count": 0}, {"min": 256, "max": 511, "count": 0}, {"min": 512, "max": 1023, "count": 0}, {"min": 1024, "max": 2047, "count": 0}, {"min": 2048, "max": 4095, "count": 3}]}}}
{"type": "map", "data": {"@wm0": {"15689,::ffff:127.0.0.1,5002,::ffff:127.0.0.1,17052,web,1 \"x\"\\": 1, "15689,127.0.0.1,40000,127.0.0.1,34835,web,1 \"x\"\\": 2}}}
{"type": "stats", "data": {"@rs0": {"15689,127.0.0.1,40002,127.0.0.1,35347,web,1 \"x\"\\": {"count": 1, "average": 7, "total": 7}, "15689,::1,5001,::1,16796,web,1 \"x\"\\": {"count": 1, "average": 5000, "total": 5000}, "15689,127.0.0.1,5000,127.0.0.1,16540,web,1 \"x\"\\": {"count": 1, "average": 9200, "total": 9200}}}}
{"type": "map", "data": {"@e0": {"15689,0.0.0.0,0,0.0.0.0,0,web,1 \"x\"\\": 1}}}
{"type": "map", "data": {"@n0": 11}}
{"type": "printf", "data": "lg done\n"}
{"type": "printf", "data": "lg flush 56896829738178\n"}
{"type": "map", "data": {"@n1": 0}}
{"type": "printf", "data": "lg done\n"}
{"type": "printf", "data": "lg flush 56897329741579\n"}
{"type": "map", "data": {"@n0": 0}}
{"type": "printf", "data": "lg done\n"}
{"type": "printf", "data": "lg flush 56897372954695\n"}
{"type": "map", "data": {"@n0": 0}}
{"type": "map", "data": {"@n1": 0}}
{"type": "printf", "data": "lg done\n"}


{"type": "map", "data": {"@n0": 0}}
{"type": "map", "data": {"@n1": 0}}
'''  # noqa: E501 (bpftrace's lines as they came)
COMM = 'web,1 "x"\\'
START_NS, FIRST_FLUSH_NS = 56895826378176, 56896329732904
OFFSET_S = 1_700_000_000.0


def summary(local, remote, **counts) -> SocketCallSummary:
    family = socket.AF_INET6 if ":" in local[0] else socket.AF_INET
    return SocketCallSummary(15689, COMM, family, *local, *remote, START_NS / 1e9 + OFFSET_S,
                             FIRST_FLUSH_NS / 1e9 + OFFSET_S, **counts)


def feed(parser: SummaryParser, text: str) -> list[SocketCallSummary]:
    return [s for line in text.splitlines(keepends=True) for s in parser.feed(line)]


def test_the_captured_run_gives_one_summary_per_socket_and_process():
    parser = SummaryParser(wall_offset_s=OFFSET_S)
    found = feed(parser, CAPTURED)
    v4, v6 = ("127.0.0.1", 40000), ("::1", 40001)
    expected = [
        summary(("0.0.0.0", 0), ("0.0.0.0", 0), errors=1),
        summary(v6, ("::1", 5001), writes=1, write_bytes=5000,
                write_size_log2_hist=(0,) * 13 + (1,)),
        summary(("::1", 5001), v6, reads=1, read_bytes=5000),
        summary(v4, ("127.0.0.1", 5000), writes=5, write_bytes=9200, small_writes=2,
                write_size_log2_hist=(0,) * 7 + (2, 0, 0, 0, 0, 3)),
        summary(("127.0.0.1", 40002), ("127.0.0.1", 5002), reads=1, read_bytes=7),
        summary(("127.0.0.1", 5000), v4, reads=1, read_bytes=9200),
        summary(("127.0.0.1", 5002), ("127.0.0.1", 40002), writes=1, write_bytes=7,
                small_writes=1, write_size_log2_hist=(0, 0, 0, 1)),
    ]
    assert sorted(found, key=repr) == sorted(expected, key=repr)
    assert parser.ready
    assert (parser.dropped_calls, parser.lost_events, parser.unparsed) == (0, 0, [])


def test_intervals_follow_each_other_and_empty_ones_give_nothing():
    parser = SummaryParser(wall_offset_s=0.0)
    flushes = []
    for line in CAPTURED.splitlines(keepends=True):
        got = parser.feed(line)
        if got:
            flushes.append({(s.from_s, s.to_s) for s in got})
    assert flushes == [{(START_NS / 1e9, FIRST_FLUSH_NS / 1e9)}]  # three empty flushes after


def test_an_ipv4_mapped_socket_is_written_as_ipv4():
    found = feed(SummaryParser(0.0), CAPTURED)
    server = [s for s in found if s.local_port == 5002]
    assert [(s.family, s.local_addr, s.remote_addr) for s in server] == [
        (socket.AF_INET, "127.0.0.1", "127.0.0.1")]


def line(kind: str, data: object) -> str:
    return json.dumps({"type": kind, "data": data}) + "\n"


def test_both_sets_of_maps_in_one_flush_add_up():
    key = "1,10.0.0.1,80,10.0.0.2,20480,nginx"  # the remote port, 80, in network byte order
    text = "".join([
        line("printf", "lg start 1000000000\n"), line("printf", "lg flush 3000000000\n"),
        line("stats", {"@ws0": {key: {"count": 2, "average": 5, "total": 10}}}),
        line("hist", {"@wh0": {key: [{"min": 4, "max": 7, "count": 2}]}}),
        line("stats", {"@ws1": {key: {"count": 1, "average": 9, "total": 9}}}),
        line("hist", {"@wh1": {key: [{"min": 8, "max": 15, "count": 1}]}}),
        line("map", {"@n0": 2}), line("map", {"@n1": 1}), line("printf", "lg done\n")])
    (only,) = feed(SummaryParser(0.0), text)
    assert (only.remote_port, only.writes, only.write_bytes) == (80, 3, 19)
    assert only.write_size_log2_hist == (0, 0, 0, 2, 1)
    assert (only.from_s, only.to_s) == (1.0, 3.0)


def test_calls_the_full_maps_dropped_are_reported():
    parser = SummaryParser(0.0)
    feed(parser, CAPTURED.replace('"@n0": 11', '"@n0": 15'))
    assert parser.dropped_calls == 4


def test_lines_not_ours_are_kept_aside_not_raised():
    parser = SummaryParser(0.0)
    text = CAPTURED.replace('"lg flush 56896829738178\\n"}',
                            '"lg flush 56896829738178\\n"}\nnot json\n'
                            '{"type": "map", "data": {"@wm1": {"x,y": 1}}}')
    text += '{"type": "lost_events", "data": {"events": 3}}\n'  # bpftrace 0.17's JsonOutput
    text += '{"type": "printf", "data": "someone else\'s printf\\n"}\n'
    text += '{"type": "printf", "data": 7}\n{"type": "lost_events", "data": []}\n'
    assert len(feed(parser, text)) == 7
    assert parser.unparsed == ["not json", "@wm key 'x,y'", '{"type": "printf", "data": 7}',
                               '{"type": "lost_events", "data": []}']
    assert parser.lost_events == 3


def test_the_program_counts_tcp_calls_of_one_namespace():
    program = build_program(TraceSettings(interval_s=2.5, small_write_bytes=500,
                                          netns_inode=4026532000))
    send, recv = (program.split(f"tracepoint:sock:{t}")[1].split("\n}\n")[0]
                  for t in ("sock_send_length", "sock_recv_length"))
    for probe_text in (send, recv):
        assert probe_text.startswith(" /args->protocol == 6/")
        assert "skc_net.net->ns.inum == 4026532000" in probe_text
        assert "args." not in probe_text  # bpftrace 0.17: args->field only
    assert "$ret < 500" in send
    assert "$fl & 2" in recv  # MSG_PEEK
    assert "$fl & 2" not in send
    assert "@tick % 25 == 0" in program
    assert program.count("print(@ws0)") == 2  # every interval, and at the end
    assert program.count("clear(@n1)") == 2


def test_the_program_without_a_namespace_traces_them_all():
    assert "ns.inum" not in build_program(TraceSettings())


@pytest.mark.parametrize(("field", "value"), [
    ("interval_s", 0.05), ("interval_s", 0.15), ("interval_s", math.nan),
    ("interval_s", math.inf), ("interval_s", 3600.1), ("small_write_bytes", 0),
    ("map_keys_max", 8)])
def test_settings_are_checked(field, value):
    with pytest.raises(ValueError, match=field):
        TraceSettings(**{field: value})


@pytest.fixture
def capable_host(monkeypatch, tmp_path):
    """A host where everything is in place, for each test to take one thing away."""
    for name in socket_calls.TRACEPOINTS:
        (tmp_path / "events/sock" / name).mkdir(parents=True)
    (tmp_path / "btf").write_bytes(b"")
    monkeypatch.setattr(socket_calls.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(socket_calls.os, "geteuid", lambda: 0)
    monkeypatch.setattr(socket_calls, "_capabilities", lambda: 1 << socket_calls.CAP_SYS_ADMIN)
    monkeypatch.setattr(socket_calls, "BTF", tmp_path / "btf")
    monkeypatch.setattr(socket_calls, "TRACEFS", tmp_path)
    monkeypatch.setattr(socket_calls, "tracefs_mounted", lambda: True)
    return tmp_path


def mount_refused(monkeypatch, root):
    monkeypatch.setattr(socket_calls, "tracefs_mounted", lambda: False)
    monkeypatch.setattr(socket_calls, "with_tracefs", lambda argv: [
        "sh", "-c", "echo 'mount: /sys/kernel/tracing: permission denied.' >&2; exit 32"])


def test_probe_gives_a_config_for_this_namespace(capable_host):
    config = probe()
    assert isinstance(config, TracerConfig)
    assert config.bpftrace == "/usr/bin/bpftrace"
    assert config.settings.netns_inode == socket_calls.own_netns()


@pytest.mark.parametrize(("take_away", "reason"), [
    (lambda mp, root: mp.setattr(socket_calls.shutil, "which", lambda name: None),
     "bpftrace is not installed: socket-call logs are off"),
    (lambda mp, root: mp.setattr(socket_calls.os, "geteuid", lambda: 1000),
     "not root (bpftrace 0.17 runs as root only): socket-call logs are off"),
    (lambda mp, root: mp.setattr(socket_calls, "_capabilities", lambda: 1 << 38),
     "root without CAP_BPF and CAP_PERFMON (a restricted container?): socket-call logs are off"),
    (lambda mp, root: (root / "btf").unlink(), "the kernel has no BTF"),
    (mount_refused, "tracefs cannot be mounted: mount: /sys/kernel/tracing: permission "
     "denied: socket-call logs are off"),
    (lambda mp, root: (root / "events/sock/sock_recv_length").rmdir(),
     "no tracepoint sock:sock_recv_length (needs Linux 6.3 or later): socket-call logs are off"),
])
def test_probe_says_in_one_line_why_not(capable_host, monkeypatch, take_away, reason):
    take_away(monkeypatch, capable_host)
    found = probe()
    assert isinstance(found, str)
    assert found.startswith(reason)
    assert "\n" not in found


def test_a_tracer_mounts_tracefs_in_a_namespace_of_its_own_only_where_it_is_missing(
        monkeypatch):
    argv = ["/usr/bin/bpftrace", "-e", "BEGIN {}"]
    monkeypatch.setattr(socket_calls, "tracefs_mounted", lambda: True)
    assert socket_calls.with_tracefs(argv) == argv
    monkeypatch.setattr(socket_calls, "tracefs_mounted", lambda: False)
    wrapped = socket_calls.with_tracefs(argv)
    assert wrapped[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert wrapped[-3:] == argv
    assert "mount -t tracefs tracefs /sys/kernel/tracing && exec" in wrapped[-4]


def test_losses_are_told_in_words():
    tracer = SocketCallTracer(TracerConfig("/usr/bin/bpftrace", TraceSettings()))
    assert tracer.losses() is None
    tracer.parser.dropped_calls, tracer.parser.lost_events = 4, 2
    tracer.parser.unparsed = ["?"]
    assert tracer.losses() == ("4 calls not counted: the maps were full; 2 bpftrace events "
                               "lost; bpftrace output not understood: '?'")
    tracer.stop()  # never started: nothing to do

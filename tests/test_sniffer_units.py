"""Link records and message counts from socket snapshots (no root)."""

from sniffer.daemon import Service, Sniffer, serve
from sniffer.links import Link, Process, SocketRecord, active, link_counts

EPHEMERAL = (32768, 60999)


def tcp(local_port, remote_port, out, inn, inode=11, local="10.0.0.3", remote="10.0.0.5"):
    return SocketRecord("tcp", local, local_port, remote, remote_port, inode, out, inn)


def test_ephemeral_ports_become_0_and_counts_are_deltas():
    before = {s.key: s for s in [tcp(40001, 5432, 10, 10)]}
    now = [tcp(40001, 5432, 25, 24), tcp(40002, 5432, 3, 3, inode=12)]
    owners = {11: Process(700, "uvicorn"), 12: Process(700, "uvicorn")}
    counts = link_counts(before, now, owners, EPHEMERAL)
    forward = Link("tcp", "10.0.0.3", 700, "uvicorn", 0, "10.0.0.5", None, None, 5432)
    reverse = Link("tcp", "10.0.0.5", None, None, 5432, "10.0.0.3", 700, "uvicorn", 0)
    assert counts == {forward: 15 + 3, reverse: 14 + 3}  # two connections, one logical link


def test_listening_and_udp_sockets():
    listening = SocketRecord("tcp", "0.0.0.0", 80, "0.0.0.0", 0, 5, 0, 0, listening=True)
    udp = SocketRecord("udp", "10.0.0.3", 5353, "10.0.0.9", 53, 6, None, None)
    counts = link_counts({}, [listening, udp], {}, EPHEMERAL)
    assert len(counts) == 2
    assert set(counts.values()) == {None}  # seen, not counted
    assert len(active(counts, threshold=100)) == 2


def test_threshold_keeps_busy_links_only():
    counts = link_counts({}, [tcp(40001, 5432, 50, 1)], {}, EPHEMERAL)
    busy = active(counts, threshold=10)
    assert [link.dst_port for link in busy] == [5432]


def test_a_reused_inode_with_a_new_peer_is_a_new_socket():
    before = {s.key: s for s in [tcp(40001, 5432, 100, 100)]}
    counts = link_counts(before, [tcp(40009, 6379, 4, 4)], {}, EPHEMERAL)
    assert sorted(counts.values()) == [4, 4]  # not 4 - 100


def test_the_protocol_answers_poll_and_stops():
    import io

    snapshots = iter([[tcp(40001, 5432, 0, 0)], [tcp(40001, 5432, 7, 6)]])
    clock = iter([100.0, 101.5])
    sniffer = Sniffer(lambda: next(snapshots), lambda: {}, EPHEMERAL, lambda: next(clock))
    out = io.StringIO()
    reason = serve(Service(sniffer, out),
                   io.StringIO('{"id": 1, "cmd": "poll"}\n{"id": 2, "cmd": "bogus"}\n'
                               '{"id": 3, "cmd": "stop"}\n'))
    replies = [__import__("json").loads(line) for line in out.getvalue().splitlines()]
    assert reason == "stop"
    poll = replies[0]["result"]
    assert (poll["from"], poll["to"]) == (100.0, 101.5)
    assert sorted(link["messages"] for link in poll["links"]) == [6, 7]
    assert replies[1]["error"]["kind"] == "input"
    assert replies[2] == {"id": 3, "ok": True, "result": {}}


def _messages(report):
    return sorted(link.messages for link in report.links)


def test_a_closed_socket_counts_to_its_last_segment_once():
    """The kernel's closing notice (inode 0) finishes a socket the polls saw, counts one they
    never saw, and waits for a socket that vanished before its notice came."""
    dumps = iter([[tcp(40001, 5432, 10, 10)],  # start
                  [],  # poll 1: 40001 closed at 15/15 (notice below); 40007 opened and closed
                  [tcp(40002, 5432, 4, 4, inode=12)],  # poll 2
                  [],  # poll 3: 40002 gone from the dump, its notice not yet drained
                  []])  # poll 4: the notice arrives
    notices = iter([[], [tcp(40001, 5432, 15, 15, inode=0), tcp(40007, 5432, 3, 3, inode=0)],
                    [], [], [tcp(40002, 5432, 9, 9, inode=0)]])
    sniffer = Sniffer(lambda: next(dumps), lambda: {}, EPHEMERAL, lambda: 0.0,
                      closed=lambda: next(notices))
    assert _messages(sniffer.poll()) == [5 + 3, 5 + 3]  # the rest of 40001, all of 40007
    assert _messages(sniffer.poll()) == [4, 4]
    assert _messages(sniffer.poll()) == []
    assert _messages(sniffer.poll()) == [5, 5]  # 9 - 4: counted from where it was last seen


def test_a_socket_closing_between_the_dump_and_the_drain_counts_once_to_its_end():
    """The drain follows the dump, so a last report holds every socket closed before it; one
    that closed in between is in both, and its notice's final counters stand, once."""
    dumps = iter([[tcp(40001, 5432, 10, 10, inode=7)],  # start
                  [tcp(40001, 5432, 12, 12, inode=7), tcp(40003, 5432, 2, 2, inode=8)]])
    notices = iter([[], [tcp(40001, 5432, 15, 15, inode=0), tcp(40003, 5432, 4, 4, inode=0)]])
    sniffer = Sniffer(lambda: next(dumps), lambda: {}, EPHEMERAL, lambda: 0.0,
                      closed=lambda: next(notices))
    assert _messages(sniffer.poll()) == [5 + 4, 5 + 4]  # 40001 from 10 to 15; 40003 whole
    assert sniffer.previous == {}  # neither is waited for again


def test_a_notice_is_matched_by_its_cookie_when_a_new_connection_reuses_the_4_tuple():
    """TIME_WAIT reuse: the old connection (cookie 1) closes and a new one of the same
    addresses (cookie 2) is in the dump. Each counts its own, once."""
    def cookied(out, cookie, inode):
        return SocketRecord("tcp", "10.0.0.3", 40001, "10.0.0.5", 5432, inode, out, out,
                            cookie=cookie)

    dumps = iter([[cookied(8, 1, inode=7)], [cookied(3, 2, inode=9)], [cookied(3, 2, inode=9)]])
    notices = iter([[], [cookied(10, 1, inode=0)], []])
    sniffer = Sniffer(lambda: next(dumps), lambda: {}, EPHEMERAL, lambda: 0.0,
                      closed=lambda: next(notices))
    assert _messages(sniffer.poll()) == [2 + 3, 2 + 3]  # the old one's last 2, the new one's 3
    assert _messages(sniffer.poll()) == []


def test_a_report_says_the_closing_notices_lost_since_the_one_before():
    """ClosedSockets counts each overrun of the kernel's queue; a report carries how many came
    since the previous report, and nothing when none did (the wire as it always was)."""
    losses = iter([0, 0, 2, 2, 5])  # at start, then at each poll
    sniffer = Sniffer(lambda: [], lambda: {}, EPHEMERAL, lambda: 0.0, losses=lambda: next(losses))
    told = [sniffer.poll().notice_losses for _ in range(4)]
    assert told == [None, 2, None, 3]

"""Segments into logical messages (sniffer.message_assembly): turns, retransmissions,
sequence wrap, loopback, idle expiry."""

from __future__ import annotations

from sniffer.message_assembly import MessageAssembler

HERE, THERE = ("10.0.0.1", 40000), ("10.0.0.2", 5432)


def test_a_direction_s_segments_between_turns_are_one_message() -> None:
    a = MessageAssembler({"10.0.0.1", "127.0.0.1"})
    assert a.feed(1.0, HERE, THERE, 100, 50, False, outgoing=True) == []
    assert a.feed(1.1, HERE, THERE, 150, 50, False, outgoing=True) == []
    assert a.feed(1.15, HERE, THERE, 100, 50, False, outgoing=True) == []  # a retransmission
    done = a.feed(1.2, THERE, HERE, 7000, 300, False, outgoing=False)
    assert len(done) == 1
    m = done[0]
    assert (m.local, m.remote, m.sent) == (HERE, THERE, True)
    assert (m.seq_first, m.seq_end, m.size_bytes) == (100, 200, 100)
    assert (m.first_s, m.last_s, m.segments) == (1.0, 1.1, 2)
    reply = a.feed(1.3, HERE, THERE, 200, 10, False, outgoing=True)
    assert [(r.sent, r.size_bytes, r.first_s, r.last_s) for r in reply] == [
        (False, 300, 1.2, 1.2)]


def test_sequence_numbers_wrap_and_a_closing_segment_ends_the_message() -> None:
    a = MessageAssembler({"10.0.0.1"})
    a.feed(1.0, HERE, THERE, (1 << 32) - 20, 20, False, outgoing=True)
    done = a.feed(1.1, HERE, THERE, 0, 30, True, outgoing=True)  # FIN with data
    assert [(m.seq_first, m.seq_end, m.size_bytes) for m in done] == [((1 << 32) - 20, 30, 50)]
    assert a.open == {}


def test_a_loopback_packet_counts_once_with_both_ends_here() -> None:
    a = MessageAssembler({"127.0.0.1"})
    client, server = ("127.0.0.1", 50000), ("127.0.0.1", 5432)
    assert a.feed(1.0, client, server, 10, 8, False, outgoing=True) == []  # the leaving copy
    assert a.feed(1.0, client, server, 10, 8, False, outgoing=False) == []
    done = a.feed(1.2, server, client, 90, 200, False, outgoing=False)
    assert len(done) == 1
    m = done[0]
    assert m.loopback
    assert (m.local, m.remote, m.sent) == (server, client, False)  # keyed by the lower end
    assert m.size_bytes == 8
    assert m.segments == 1


def test_an_unanswered_message_comes_out_when_idle_and_at_the_end() -> None:
    a = MessageAssembler({"10.0.0.1"}, idle_s=2.0)
    a.feed(1.0, HERE, THERE, 100, 5, False, outgoing=True)
    a.feed(1.5, THERE, ("10.0.0.1", 40001), 1, 5, False, outgoing=False)
    assert a.expire(2.9) == []
    assert [m.first_s for m in a.expire(3.1)] == [1.0]
    assert [m.first_s for m in a.flush()] == [1.5]
    assert a.open == {}

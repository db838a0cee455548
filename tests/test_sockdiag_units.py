"""The raw sock_diag parser: the tcp_info layout by kernel version, fields gated on the length
the kernel filled, SKMEMINFO, lookups of closed sockets; and a dump of real loopback sockets
checked against what was sent (no root: a namespace's own sockets are readable)."""

from __future__ import annotations

import errno
import socket
import struct

import numpy as np
import pytest

from sniffer import tcp_info
from sniffer.sockdiag import SockDiag, _Batch, address_text, parse_datagram, sockid
from tests.fakes.diag_messages import diag_message, done


def test_the_layout_matches_the_kernels_offsets_and_sizes():
    offsets = {name: offset for name, _, offset, _ in tcp_info.LAYOUT}
    # offsetof() in include/uapi/linux/tcp.h, 6.18
    assert {n: offsets[n] for n in ("rto", "snd_mss", "rtt", "rcv_space", "total_retrans",
                                    "bytes_received", "min_rtt", "busy_time", "bytes_retrans",
                                    "snd_wnd", "rcv_wnd", "total_rto", "received_ce")} == {
        "rto": 8, "snd_mss": 16, "rtt": 68, "rcv_space": 96, "total_retrans": 100,
        "bytes_received": 128, "min_rtt": 148, "busy_time": 168, "bytes_retrans": 208,
        "snd_wnd": 228, "rcv_wnd": 232, "total_rto": 240, "received_ce": 248}
    assert tcp_info.FULL_SIZE == 280
    assert tcp_info.dtype_for(232).names[-1] == "snd_wnd"  # 5.4, where pyroute2 stops
    assert tcp_info.dtype_for(248).names[-1] == "total_rto_time"  # 6.7


@pytest.mark.parametrize(("length", "last", "absent"), [
    (104, "total_retrans", "pacing_rate"),  # before 3.15
    (160, "data_segs_out", "busy_time"),  # 4.6
    (232, "snd_wnd", "total_rto"),  # 5.4
    (280, "accecn_flags", None),
])
def test_an_older_kernel_gives_fewer_fields_never_garbage(length, last, absent):
    values = {"rtt": 1500, "total_retrans": 3}
    if length >= 160:
        values["data_segs_out"] = 9
    table = parse_datagram(diag_message("10.0.0.1", 40000, "10.0.0.2", 80, info=values,
                                        info_len=length))
    assert table.info.dtype.names[-1] == last
    assert not tcp_info.has(table.info, absent) if absent else True
    assert table.info["rtt"][0] == 1500
    assert table.info["total_retrans"][0] == 3


def test_headers_addresses_and_memory():
    table = parse_datagram(
        diag_message("10.0.0.1", 40000, "10.0.0.2", 5432, inode=77, cookie=2**40 + 5,
                     info={"bytes_acked": 2**33, "total_rto": 2}, skmem=tuple(range(9)))
        + diag_message("fd00::1", 443, "::ffff:10.0.0.9", 50000, inode=78, state=6)
        + diag_message("10.0.0.1", 1, "10.0.0.3", 2, info={}, skmem=tuple(range(8))))
    assert len(table) == 3
    assert table.diag["sport"].tolist() == [40000, 443, 1]
    assert table.diag["dport"].tolist() == [5432, 50000, 2]
    assert table.diag["inode"].tolist() == [77, 78, 1]
    assert table.diag["cookie"][0] == 2**40 + 5
    assert [address_text(r["family"], r["dst"].tobytes()) for r in table.diag] == [
        "10.0.0.2", "10.0.0.9", "10.0.0.3"]
    assert address_text(socket.AF_INET6, table.diag["src"][1].tobytes()) == "fd00::1"
    assert table.has_info.tolist() == [True, False, True]
    assert table.info["bytes_acked"][0] == 2**33
    assert table.info["total_rto"].tolist() == [2, 0, 0]
    assert table.skmem[0].tolist() == list(range(9))
    assert table.skmem[1].tolist() == [-1] * 9  # none given
    assert table.skmem[2].tolist() == [*range(8), -1]  # a kernel before 4.7: no drops word


def test_replies_to_another_request_and_closed_sockets_in_a_lookup():
    batch = _Batch()
    enoent = struct.pack("=IHHIIi", 36, 2, 0, 7, 0, -errno.ENOENT) + bytes(16)
    answered = batch.feed(diag_message("10.0.0.1", 1, "10.0.0.2", 2, info={}, seq=6)
                          + diag_message("10.0.0.1", 3, "10.0.0.2", 4, info={}, seq=7)
                          + enoent + done(7), seq=7)
    assert answered == 2  # one socket, one that has closed since
    assert batch.done
    assert batch.table().diag["sport"].tolist() == [3]
    eperm = struct.pack("=IHHIIi", 36, 2, 0, 7, 0, -errno.EPERM) + bytes(16)
    with pytest.raises(OSError, match="Operation not permitted"):
        _Batch().feed(eperm, seq=7)


def test_a_dump_of_real_sockets_counts_what_was_sent_and_a_lookup_finds_them():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        peer, _ = server.accept()
        with client, peer:
            client.sendall(b"x" * 100_000)
            got = 0
            while got < 100_000:
                got += len(peer.recv(1 << 16))
            with SockDiag() as diag:
                table = diag.dump(socket.AF_INET)
                mine = table[(table.diag["dport"] == port) & table.has_info]
                assert len(mine) == 1
                if tcp_info.has(mine.info, "bytes_received"):
                    assert mine.info["bytes_acked"][0] in (100_000, 100_001)  # the SYN: 1
                assert mine.skmem[0, 3] > 0  # sndbuf
                found = diag.lookup(socket.AF_INET, [sockid(mine.diag[0])])
                assert found.diag["cookie"].tolist() == mine.diag["cookie"].tolist()
        with SockDiag() as diag:  # closed: ENOENT (or its TIME_WAIT ghost), not an error
            closed = diag.lookup(socket.AF_INET, [sockid(mine.diag[0])])
            assert len(closed) == 0 or closed.diag["state"][0] != 1  # not ESTABLISHED
    assert np.all(table.diag["family"] == socket.AF_INET)


def _slow_table(data: bytes):
    batch = _Batch()
    batch._uniform = lambda data, seq: None  # the general path, message by message
    batch.feed(data, None)
    return batch.table()


@pytest.mark.parametrize("odd_one", [None, "no info", "longer memory"])
def test_a_uniform_datagram_is_cut_as_an_array_and_gives_what_the_general_path_gives(odd_one):
    messages = [diag_message("10.0.0.1", 40000 + i, "10.0.0.2", 5432, inode=10 + i, cookie=i,
                             info={"rtt": 100 * i, "bytes_acked": 7 * i},
                             skmem=tuple(range(i, i + 9))) for i in range(5)]
    if odd_one == "no info":  # another layout: the whole datagram takes the general path
        messages[2] = diag_message("10.0.0.1", 40002, "10.0.0.2", 5432, inode=12, state=6)
    elif odd_one == "longer memory":
        messages[3] = diag_message("10.0.0.1", 40003, "10.0.0.2", 5432, inode=13, cookie=3,
                                   info={"rtt": 300}, skmem=tuple(range(10)))
    data = b"".join(messages) + done(0)
    batch = _Batch()
    assert batch.feed(data, None) == 5
    assert batch.done
    fast, slow = batch.table(), _slow_table(data)
    assert fast.diag.tobytes() == slow.diag.tobytes()
    assert fast.info.tobytes() == slow.info.tobytes()
    assert fast.has_info.tolist() == slow.has_info.tolist()
    assert fast.skmem.tolist() == slow.skmem.tolist()
    assert fast.diag["sport"].tolist() == [40000 + i for i in range(5)]
    if odd_one is None:
        assert fast.info["rtt"].tolist() == [0, 100, 200, 300, 400]
        assert fast.skmem[:, 0].tolist() == [0, 1, 2, 3, 4]

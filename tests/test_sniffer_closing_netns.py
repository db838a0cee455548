"""The kernel's closing notices (root: the sock_diag destroy groups need CAP_NET_ADMIN). The
kernel sends a freed socket's notice from a work queue a moment after the close; a daemon's
last report is made the moment it is told to stop, after `settle`: a drain then has both ends
of a connection closed just before, however far the reading thread lags."""

from __future__ import annotations

import socket

from sniffer.kernel import ClosedSockets
from tests.marks import NETNS

pytestmark = NETNS


def _closed_ports(records, ports: set[int]) -> list[tuple[int, int, int | None]]:
    return sorted((r.local_port, r.remote_port, r.segs_out) for r in records
                  if r.local_port in ports or r.remote_port in ports)


def test_a_drain_settled_right_after_the_close_has_both_ends_to_the_last_segment():
    closing = ClosedSockets()
    try:
        with socket.create_server(("127.0.0.1", 0)) as server:
            port = server.getsockname()[1]
            for _ in range(20):  # twenty in a row: a drain without settling misses some
                client = socket.create_connection(("127.0.0.1", port))
                accepted, _ = server.accept()
                client.sendall(b"x")
                accepted.recv(1)
                accepted.sendall(b"y")
                client.recv(1)
                client.close()
                accepted.close()
                closing.settle()
                found = _closed_ports(closing.drain(), {port})
                assert len(found) == 2, found
                assert all(segs == 1 for _, _, segs in found), found
    finally:
        closing.close()

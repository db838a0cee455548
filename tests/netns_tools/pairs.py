"""Two namespaces a and b with echo servers on b, for the daemons' namespace tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from testbed.pairs.hosts import Hosts, make_pair


@contextmanager
def echo_pair(tcp_ports: list[int], udp_ports: list[int]) -> Iterator[Hosts]:
    """A fresh pair with b echoing on the given ports; removed whatever happens."""
    hosts = make_pair()
    try:
        hosts.echo_servers("b", tcp_ports, udp_ports)
        yield hosts
    finally:
        hosts.remove()

"""`testbed.service_server` in-process on loopback (no root): each service on its own 127.0.1.x
address, all on one port, as on the testbed's hosts. The calls each request makes follow the
graph (sequential repeats, both branches of a parallel step, a cache's misses), keep-alive
connections are reused, and a failure answers 502 up to the front."""

from __future__ import annotations

import asyncio
import random
import re
import socket

import pytest

from testbed.service_graph import Call, Service, ServiceGraph, Step, generate, graph_from_json
from testbed.service_server import Peer, peers_of, read_response
from testbed.service_server import Service as Server

GRAPH = ServiceGraph("s0", {
    "s1": Service("s1", 0.5, (Step((Call("s2", repeat=2),)), Step((Call("s3"), Call("s4"))))),
    "s2": Service("s2", 0.2, (Step((Call("s4", miss_p=0.5),)),)),
    "s3": Service("s3", 0.2),
    "s4": Service("s4", 0.2),
}, {"t0": (Step((Call("s1"),)),), "t1": (Step((Call("s3", repeat=3),)),)})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.1.0", 0))
        return s.getsockname()[1]


async def started(graph: ServiceGraph, down: tuple[str, ...] = ()
                  ) -> tuple[dict[str, Server], int, list[asyncio.Server]]:
    port = free_port()
    names = [graph.front, *graph.services]
    addresses = {n: f"127.0.1.{i + 1}" for i, n in enumerate(names)}
    servers, running = {}, []
    for name in names:
        servers[name] = Server(graph, name, peers_of(graph, name, addresses, port),
                               rng=random.Random(7))
        if name not in down:
            running.append(await asyncio.start_server(servers[name].handle, addresses[name],
                                                      port))
    return servers, port, running


async def stop(servers: dict[str, Server], running: list[asyncio.Server]) -> None:
    for server in running:
        server.close()
    for service in servers.values():
        await service.close()
    for server in running:
        await server.wait_closed()
    await asyncio.sleep(0)  # the handlers' last steps, on their closed connections


async def ask(port: int, paths: list[str]) -> list[int]:
    """The front's answers to `paths`, over one keep-alive connection."""
    reader, writer = await asyncio.open_connection("127.0.1.1", port)
    statuses = []
    for path in paths:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        statuses.append(await read_response(reader))
    writer.close()
    await writer.wait_closed()
    return statuses


def test_each_request_makes_the_calls_the_graph_says():
    async def go() -> tuple[list[int], dict[str, Server]]:
        servers, port, running = await started(GRAPH)
        statuses = await ask(port, ["/t0"] * 40 + ["/t1"] * 5)
        await stop(servers, running)
        return statuses, servers

    statuses, servers = asyncio.run(asyncio.wait_for(go(), 30))
    assert statuses == [200] * 45
    served = {name: s.served for name, s in servers.items()}
    assert served["s1"] == 40
    assert served["s2"] == 80  # twice in a row per request
    assert served["s3"] == 40 + 15  # a parallel branch is called, and t1's three
    # s4: a parallel branch per s1 request, and on half of s2's 80 calls (a cache's misses)
    assert 40 + 25 <= served["s4"] <= 40 + 55


def test_a_callee_that_is_down_is_a_502_at_the_front_and_an_unknown_path_a_404():
    async def go() -> list[int]:
        servers, port, running = await started(GRAPH, down=("s3",))
        statuses = await ask(port, ["/t1", "/t0", "/nope"])
        await stop(servers, running)
        return statuses

    assert asyncio.run(asyncio.wait_for(go(), 30)) == [502, 502, 404]


def test_keep_alive_connections_are_reused_and_a_closed_one_is_replaced():
    async def go() -> tuple[int, int]:
        port = free_port()
        opened = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            """Two requests on a connection, then it is closed (as an idle timeout would)."""
            nonlocal opened
            opened += 1
            for _ in range(2):
                await reader.readline()
                while await reader.readline() not in (b"\r\n", b""):
                    pass
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.1.9", port)
        peer = Peer("127.0.1.9", port)
        await peer.call()
        await peer.call()
        first = opened
        await asyncio.sleep(0.05)  # the server has closed it
        await peer.call()  # on the idle one, which fails: made again on a new connection
        server.close()
        await server.wait_closed()
        await peer.close()
        return first, opened

    assert asyncio.run(asyncio.wait_for(go(), 10)) == (1, 2)  # two calls, one connection


@pytest.mark.parametrize("seed", [1, 2])
def test_a_generated_graph_round_trips_and_every_callee_has_a_peer(seed):
    from testbed.service_graph import graph_to_json

    graph = generate(20, seed)
    assert graph_from_json(graph_to_json(graph)) == graph
    addresses = {n: "10.0.0.1" for n in [graph.front, *graph.services]}
    for name in [graph.front, *graph.services]:
        peers = peers_of(graph, name, addresses, 8080)
        steps = graph.transactions.values() if name == graph.front else [graph.calls_of(name)]
        assert set(peers) == {c.target for s in steps for st in s for c in st.calls}


def test_a_body_is_read_a_head_gets_none_and_an_unframed_body_closes_with_400():
    async def go() -> tuple[bytes, bytes]:
        servers, port, running = await started(GRAPH)
        reader, writer = await asyncio.open_connection("127.0.1.1", port)
        writer.write(b"POST /t1 HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
                     b"\r\nHEAD /t1 HTTP/1.1\r\n\r\n"
                     b"GET /t1 HTTP/1.1\r\nContent-Length: x\r\n\r\n")
        await writer.drain()
        answers = await asyncio.wait_for(reader.read(), 10)  # until the server closes
        writer.close()
        await writer.wait_closed()
        await stop(servers, running)
        return answers

    answers = asyncio.run(asyncio.wait_for(go(), 30))
    heads = re.findall(rb"HTTP/1\.1 \d+ [A-Za-z ]+", answers)
    assert heads == [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"]
    assert answers.count(b"s0 200\n") == 1  # the POST's body; the HEAD's has none

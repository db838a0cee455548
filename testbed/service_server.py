"""One service of a generated application (`testbed.service_graph`), a process in its host's
namespace: an HTTP/1.1 server with keep-alive that, per request, sleeps its own work and makes
its calls as the graph says (in a row, `repeat` times, at once for a parallel step, or only on
a cache's miss), over keep-alive connections of its own to each service it calls.

The front service's endpoints are the transactions (`GET /t0`...); every other service
answers `GET /`. A call that fails or takes more than CALL_TIMEOUT_S is a 502 to the caller,
so a broken service shows in the front's log as an error, not a hang.

Standard library only, asyncio, one thread: fifty of these start in a few seconds on two cores
and cost nothing while idle (the testbed's budget at 50 hosts), which a framework per process
(Starlette and uvicorn import in ~0.5 s each) would not.

    python -m testbed.service_server --graph graph.json --name s3 --listen 10.201.0.5 \\
        --port 8080 --peers peers.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

from testbed.service_graph import Call, ServiceGraph, Step, graph_from_json

PORT = 8080
MAX_HEADER_LINES = 100
CALL_TIMEOUT_S = 10.0  # a callee that does not answer is a 502, before nginx's own 60 s
OK, BAD_REQUEST, NOT_FOUND, BAD_GATEWAY = 200, 400, 404, 502
REASONS = {OK: "OK", BAD_REQUEST: "Bad Request", NOT_FOUND: "Not Found",
           BAD_GATEWAY: "Bad Gateway"}


class CallFailed(Exception):
    """A callee did not answer 200."""


async def read_response(reader: asyncio.StreamReader) -> int:
    """One response's status, its body read (Content-Length) so the connection can be reused."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("closed before the response")
    parts = status_line.split()
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    length = content_length(await read_headers(reader))
    if length:
        await reader.readexactly(length)
    return status


async def read_headers(reader: asyncio.StreamReader) -> dict[bytes, bytes]:
    """Header lines up to the blank one, by lower-case name."""
    headers = {}
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return headers


def content_length(headers: dict[bytes, bytes]) -> int:
    """The body's length; ValueError if it is no length."""
    value = headers.get(b"content-length", b"0") or b"0"
    if not value.isdigit():
        raise ValueError(f"Content-Length {value!r}")
    return int(value)


class Peer:
    """Keep-alive connections to one callee, each reused once it comes free."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def call(self, path: str = "/") -> None:
        for attempt in (1, 2):  # an idle connection the callee closed is retried on a new one
            reused = bool(self.idle)
            reader, writer = (self.idle.pop() if reused else await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), CALL_TIMEOUT_S))
            try:
                writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
                await writer.drain()
                status = await asyncio.wait_for(read_response(reader), CALL_TIMEOUT_S)
            except BaseException as e:  # the connection's state is unknown: never reused
                writer.close()
                if reused and attempt == 1 and isinstance(
                        e, (ConnectionError, asyncio.IncompleteReadError)):
                    continue
                raise
            self.idle.append((reader, writer))
            if status != OK:
                raise CallFailed(f"{self.host}:{self.port}{path} answered {status}")
            return

    async def close(self) -> None:
        while self.idle:
            _, writer = self.idle.pop()
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


class Service:
    """What one service does per request, over the peers it calls."""

    def __init__(self, graph: ServiceGraph, name: str, peers: dict[str, Peer],
                 rng: random.Random | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.graph, self.name, self.peers = graph, name, peers
        self.rng = rng or random.Random()
        self.sleep = sleep
        self.front = name == graph.front
        self.work_s = 0.0 if self.front else graph.services[name].work_ms / 1e3
        self.served = 0  # requests answered 200
        self.clients: set[asyncio.StreamWriter] = set()  # connections being served

    async def close(self) -> None:
        """Its connections to the services it calls, and its clients' (idle keep-alive ones
        would never end by themselves: since Python 3.12.1 a server waits for them)."""
        for peer in self.peers.values():
            await peer.close()
        for writer in list(self.clients):
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def steps_for(self, path: str) -> tuple[Step, ...] | None:
        """The steps a request for `path` makes; None: no such endpoint."""
        if self.front:
            return self.graph.transactions.get(path.split("?")[0].strip("/"))
        return self.graph.services[self.name].steps if path.split("?")[0] == "/" else None

    async def serve(self, steps: tuple[Step, ...]) -> None:
        if self.work_s:
            await self.sleep(self.work_s)
        for step in steps:
            if step.parallel:  # one branch failing cancels the others: none is left running
                async with asyncio.TaskGroup() as branches:
                    for c in step.calls:
                        branches.create_task(self._call(c))
            else:
                await self._call(step.calls[0])

    async def _call(self, call: Call) -> None:
        if call.miss_p < 1.0 and self.rng.random() >= call.miss_p:
            return  # a cache's hit: no call
        for _ in range(call.repeat):
            await self.peers[call.target].call("/")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Requests on one connection, one after the other, until the client closes it. A
        request's body is read and ignored; one this server cannot frame (chunked, a bad
        Content-Length) is a 400 and the connection is closed."""
        self.clients.add(writer)
        try:
            while True:
                request = await reader.readline()
                if not request:
                    return
                if not request.strip():  # a stray blank line between requests
                    continue
                headers = await read_headers(reader)
                parts = request.split()
                try:
                    if b"transfer-encoding" in headers:
                        raise ValueError("chunked bodies are not read")
                    await reader.readexactly(content_length(headers))
                except ValueError:
                    await self._answer(writer, BAD_REQUEST, head=False, close=True)
                    return
                steps = self.steps_for(parts[1].decode("latin-1")) if len(parts) > 1 else None
                status = NOT_FOUND
                if steps is not None:
                    try:
                        await self.serve(steps)
                        status = OK
                        self.served += 1
                    except (OSError, CallFailed, ValueError, asyncio.IncompleteReadError,
                            asyncio.LimitOverrunError, ExceptionGroup):  # a parallel step's
                        status = BAD_GATEWAY
                await self._answer(writer, status, head=parts[0] == b"HEAD")
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError):
            return
        finally:
            self.clients.discard(writer)
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, status: int, head: bool,
                      close: bool = False) -> None:
        body = f"{self.name} {status}\n".encode()
        closing = "Connection: close\r\n" if close else ""
        writer.write(f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Length: {len(body)}\r\n"
                     f"Content-Type: text/plain\r\n{closing}\r\n".encode()
                     + (b"" if head else body))
        await writer.drain()


def peers_of(graph: ServiceGraph, name: str, addresses: dict[str, str], port: int
             ) -> dict[str, Peer]:
    steps = graph.transactions.values() if name == graph.front else [graph.calls_of(name)]
    targets = {c.target for s in steps for step in s for c in step.calls}
    return {t: Peer(addresses[t], port) for t in sorted(targets)}


async def run(service: Service, listen: str, port: int) -> None:
    server = await asyncio.start_server(service.handle, listen, port, backlog=1024)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()
        server.close()
        await service.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", type=Path, required=True, help="the graph, as graph_to_json")
    p.add_argument("--name", required=True, help="this service")
    p.add_argument("--listen", required=True, help="address to listen on")
    p.add_argument("--port", type=int, default=PORT)
    p.add_argument("--peers", type=Path, required=True,
                   help="JSON: service name -> its host's address")
    args = p.parse_args()
    graph = graph_from_json(args.graph.read_text())
    addresses = json.loads(args.peers.read_text())
    service = Service(graph, args.name, peers_of(graph, args.name, addresses, args.port))
    asyncio.run(run(service, args.listen, args.port))


if __name__ == "__main__":
    main()

"""The testbed's application server: an ASGI app (Starlette) served by uvicorn on app hosts.

Every backend connection is persistent (asyncpg pool, memcached client, HTTP keep-alive), so
one call is one crossing of the link each way, and the expected gradients in
`testbed.transactions` are the crossings on the critical path.

S2 is a database call whose service time is N(s2_mean, s2_sd) (`SELECT pg_sleep`); S3 is the
second app server's `/svc/work`, N(s3_mean, s3_sd) (thesis §4.7).

    python -m testbed.app --listen IP --port 8000 --dsn-file FILE --cache IP --peer URL [...]

The DSN (with the database password) is read from a file: a command line is visible to every
local user in /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

try:
    import aiomcache
    import asyncpg
    import httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route
    from starlette.types import ASGIApp, Receive, Scope, Send
except ImportError as e:  # a plain install: what to install, not a traceback in a namespace
    raise SystemExit(f"testbed.app: {e.name} is missing: pip install 'linkgrad[testbed]'") from e

ITEM = "SELECT id, name, max_bid, nb_of_bids FROM items WHERE id = $1"
ITEM_BIDS = "SELECT count(*), max(bid) FROM bids WHERE item_id = $1"
AUTH = "SELECT id FROM users WHERE nickname = $1 AND password = $2"
ITEM_PRICE = "SELECT name, max_bid FROM items WHERE id = $1"
TOP_BID = "SELECT max(bid) FROM bids WHERE item_id = $1"
SLEEP = "SELECT pg_sleep($1)"
INSERT_BID = ("INSERT INTO bids (user_id, item_id, qty, bid, max_bid, date) "
              "VALUES ($1, $2, 1, 10, 10, now())")
COUNT_BID = "UPDATE items SET nb_of_bids = nb_of_bids + 1 WHERE id = $1"
POOL_SIZE = 48


class _Rollback(Exception):
    pass


async def _warm(conn: asyncpg.Connection) -> None:
    """Put every statement in this connection's cache (writes rolled back): a cold statement
    costs an extra Parse/Describe round trip, which would blur the crossing counts."""
    for sql, args in ((ITEM, (1,)), (ITEM_BIDS, (1,)), (AUTH, ("x", "y")), (ITEM_PRICE, (1,)),
                      (TOP_BID, (1,)), (SLEEP, (0.0,))):
        await conn.fetch(sql, *args)
    try:
        async with conn.transaction():
            await conn.execute(INSERT_BID, 1, 1)
            await conn.execute(COUNT_BID, -1)  # no such row: prepared, nothing locked
            raise _Rollback
    except _Rollback:
        pass


async def _keep_session(_: asyncpg.Connection) -> None:
    """No reset query when a connection goes back to the pool: this app leaves no session
    state, and asyncpg's default reset is one more round trip on every request's critical path."""


@dataclass(frozen=True)
class AppConfig:
    name: str
    dsn: str
    cache_host: str
    peer_url: str  # the S3 server (the second app host)
    s2_mean_s: float = 0.1
    s2_sd_s: float = 0.03
    s3_mean_s: float = 0.2
    s3_sd_s: float = 0.06
    cache_miss_p: float = 0.3
    sequential_m: int = 2
    truth_log: Path | None = None
    extra_query: tuple[str, ...] = ()  # transactions given one more database round trip


@dataclass(frozen=True)
class TruthCall:
    """One backend call of a request: which service, the local port of its connection (None:
    unknown), and when it was sent and answered (unix s). Its fields are the log's keys."""

    service: str
    port: int | None
    t0: float
    t1: float


@dataclass
class TruthRecord:
    """One request as the app saw it, for checking inferred paths only: the id nginx gave it
    (X-Request-Id), the port of the connection it came on, and each database call's local
    port and times."""

    rid: str
    peer_port: int | None
    t_in: float
    calls: list[TruthCall]
    done: bool = False


class Truth:
    """The ground-truth log (`--truth-log`): a JSON line per request, and one per call made
    after its request was answered (fire-and-forget). Off without a file."""

    def __init__(self, path: Path | None) -> None:
        self.file = path.open("a", buffering=1) if path is not None else None
        self.current: contextvars.ContextVar[TruthRecord | None] = contextvars.ContextVar(
            "truth", default=None)

    def call(self, service: str, conn: Any, t0: float) -> None:
        record = self.current.get()
        if self.file is None or record is None:
            return
        transport = getattr(conn, "_transport", None)  # asyncpg's, private: our own test app
        sockname = transport.get_extra_info("sockname") if transport is not None else None
        call = TruthCall(service, sockname[1] if sockname else None, t0, time.time())
        if record.done:
            self.file.write(json.dumps({"rid": record.rid, "late": True,
                                        "calls": [asdict(call)]}) + "\n")
        else:
            record.calls.append(call)

    def middleware(self, app: ASGIApp) -> ASGIApp:
        async def truth_app(scope: Scope, receive: Receive, send: Send) -> None:
            if self.file is None or scope["type"] != "http":
                await app(scope, receive, send)
                return
            headers = dict(scope.get("headers") or [])
            client = scope.get("client")
            record = TruthRecord(headers.get(b"x-request-id", b"").decode(),
                                 client[1] if client else None, time.time(), [])
            token = self.current.set(record)
            try:
                await app(scope, receive, send)
            finally:
                self.current.reset(token)
                record.done = True
                assert self.file is not None
                self.file.write(json.dumps({"rid": record.rid, "peer_port": record.peer_port,
                                            "path": scope.get("path"), "t_in": record.t_in,
                                            "t_out": time.time(),
                                            "calls": [asdict(c) for c in record.calls]})
                                + "\n")
        return truth_app


class Backends:
    """The app's connections; opened at startup, closed at shutdown."""

    def __init__(self, config: AppConfig, truth: Truth | None = None) -> None:
        self.config = config
        self.truth = truth or Truth(None)
        self.rng = random.Random()
        self.background: set[asyncio.Task[Any]] = set()  # fire-and-forget calls, kept alive
        self.pool: asyncpg.Pool | None = None
        self.cache: aiomcache.Client | None = None
        self.http: httpx.AsyncClient | None = None

    async def open(self) -> None:
        # every connection opened (and warmed) now, not on a request's critical path
        self.pool = await asyncpg.create_pool(self.config.dsn, min_size=POOL_SIZE,
                                              max_size=POOL_SIZE, init=_warm,
                                              reset=_keep_session)
        self.cache = aiomcache.Client(self.config.cache_host, 11211, pool_size=16)
        self.http = httpx.AsyncClient(base_url=self.config.peer_url, timeout=10.0,
                                      limits=httpx.Limits(max_keepalive_connections=64))
        await self.cache.set(b"linkgrad:item", b"cached item")

    async def close(self) -> None:
        for closing in (self.pool.close() if self.pool else None,
                        self.cache.close() if self.cache else None,
                        self.http.aclose() if self.http else None):
            if closing is not None:
                await closing

    def _normal(self, mean: float, sd: float) -> float:
        return max(0.0, self.rng.gauss(mean, sd))

    async def query(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        assert self.pool is not None
        async with self.pool.acquire() as conn:
            t0 = time.time()
            rows = await conn.fetch(sql, *args)
            self.truth.call("db", conn, t0)
            return rows

    async def s2(self) -> None:
        """One database round trip that takes N(s2) at the server."""
        await self.query(SLEEP, self._normal(self.config.s2_mean_s, self.config.s2_sd_s))

    async def s3(self) -> None:
        """One HTTP round trip to the peer app server's /svc/work."""
        assert self.http is not None
        response = await self.http.get("/svc/work")
        response.raise_for_status()

    def in_background(self, call: Any) -> None:
        task = asyncio.create_task(call)
        self.background.add(task)
        task.add_done_callback(self.background.discard)


def _id(request: Request, name: str = "id", default: int = 1) -> int:
    return int(request.query_params.get(name, default))


def build_app(config: AppConfig) -> Any:
    truth = Truth(config.truth_log)
    b = Backends(config, truth)

    async def health(_: Request) -> PlainTextResponse:
        return PlainTextResponse(f"ok {config.name}")

    async def view_item(request: Request) -> JSONResponse:  # 2 round trips to db
        item = await b.query(ITEM, _id(request))
        bids = await b.query(ITEM_BIDS, _id(request))
        return JSONResponse({"item": item[0]["name"] if item else None, "bids": bids[0][0]})

    async def put_bid_auth(request: Request) -> JSONResponse:  # 1 round trip
        user = _id(request, "user")
        rows = await b.query(AUTH, f"user{user}", f"password{user}")
        return JSONResponse({"authenticated": bool(rows)})

    async def put_bid(request: Request) -> JSONResponse:  # 3 round trips
        user = _id(request, "user")
        await b.query(AUTH, f"user{user}", f"password{user}")
        item = await b.query(ITEM_PRICE, _id(request))
        top = await b.query(TOP_BID, _id(request))
        return JSONResponse({"item": item[0]["name"] if item else None, "max": str(top[0][0])})

    async def store_bid(request: Request) -> JSONResponse:  # BEGIN, INSERT, UPDATE, COMMIT
        assert b.pool is not None
        # a random item unless one is named: bids on one row would queue on its lock, and the
        # gradient would then hold lock waits, not just the four crossings
        item = _id(request, default=b.rng.randint(1, 5000))
        user = _id(request, "user")
        async with b.pool.acquire() as conn, conn.transaction():  # its BEGIN and COMMIT are
            await conn.execute(INSERT_BID, user, item)  # not in the truth log: a benchmark
            await conn.execute(COUNT_BID, item)  # of paths leaves StoreBid out
        return JSONResponse({"stored": True})

    async def single(_: Request) -> PlainTextResponse:
        await b.s2()
        return PlainTextResponse("single")

    async def sequential(_: Request) -> PlainTextResponse:
        for _ in range(config.sequential_m):
            await b.s2()
        return PlainTextResponse("sequential")

    async def cache(_: Request) -> PlainTextResponse:
        assert b.cache is not None
        await b.cache.get(b"linkgrad:item")
        if b.rng.random() < config.cache_miss_p:  # a miss: to the database, refill later
            await b.s2()
            b.in_background(b.cache.set(b"linkgrad:item", b"cached item"))
        return PlainTextResponse("cache")

    async def parallel_all(_: Request) -> PlainTextResponse:
        await asyncio.gather(b.s2(), b.s3())
        return PlainTextResponse("parallel_all")

    async def parallel_first(_: Request) -> PlainTextResponse:
        calls = [asyncio.create_task(b.s2()), asyncio.create_task(b.s3())]
        _, pending = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:  # let it finish: cancelling mid-query would break the connection
            b.background.add(task)
            task.add_done_callback(b.background.discard)
        return PlainTextResponse("parallel_first")

    async def fire_and_forget(_: Request) -> PlainTextResponse:
        b.in_background(b.s2())
        return PlainTextResponse("async")

    async def svc_work(_: Request) -> PlainTextResponse:  # S3, on the peer
        await asyncio.sleep(b._normal(config.s3_mean_s, config.s3_sd_s))
        return PlainTextResponse("work")

    def with_extra_query(handler: Any) -> Any:
        """The planted regression: one more query (a release that added one) before the
        transaction's own work, on its critical path."""
        async def extra(request: Request) -> Any:
            await b.query(ITEM_PRICE, _id(request))
            return await handler(request)
        return extra

    transactions = {  # testbed.transactions' names
        "/rubis/ViewItem": ("ViewItem", view_item), "/rubis/PutBidAuth": ("PutBidAuth",
                                                                        put_bid_auth),
        "/rubis/PutBid": ("PutBid", put_bid), "/rubis/StoreBid": ("StoreBid", store_bid),
        "/pattern/single": ("single", single), "/pattern/sequential": ("sequential", sequential),
        "/pattern/cache": ("cache", cache), "/pattern/parallel_all": ("parallel_all",
                                                                      parallel_all),
        "/pattern/parallel_first": ("parallel_first", parallel_first),
        "/pattern/async": ("async", fire_and_forget), "/lb/single": ("balanced", single),
    }
    unknown = set(config.extra_query) - {name for name, _ in transactions.values()}
    if unknown:
        raise ValueError(f"--extra-query: no transaction {', '.join(sorted(unknown))}")
    routes = [Route("/health", health), Route("/svc/work", svc_work)]
    routes += [Route(path, with_extra_query(handler) if name in config.extra_query else handler)
               for path, (name, handler) in transactions.items()]
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await b.open()
        try:
            yield
        finally:
            await b.close()

    return truth.middleware(Starlette(routes=routes, lifespan=lifespan))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dsn-file", required=True, type=Path,
                        help="file holding the PostgreSQL DSN (root's, 0600)")
    parser.add_argument("--cache", required=True)
    parser.add_argument("--peer", required=True, help="base URL of the S3 server")
    for knob in ("s2_mean_ms", "s2_sd_ms", "s3_mean_ms", "s3_sd_ms"):
        parser.add_argument(f"--{knob.replace('_', '-')}", type=float, required=True)
    parser.add_argument("--cache-miss-p", type=float, required=True)
    parser.add_argument("--sequential-m", type=int, required=True)
    parser.add_argument("--truth-log", type=Path,
                        help="log each request's database calls (ports, times) here, to check "
                        "inferred causal paths against")
    parser.add_argument("--extra-query", action="append", default=[], metavar="TRANSACTION",
                        help="a planted regression: TRANSACTION (ViewItem, PutBid, single, ...) "
                        "makes one more database round trip (repeatable)")
    args = parser.parse_args()
    config = AppConfig(args.name, args.dsn_file.read_text().strip(), args.cache, args.peer,
                       args.s2_mean_ms / 1e3, args.s2_sd_ms / 1e3, args.s3_mean_ms / 1e3,
                       args.s3_sd_ms / 1e3, args.cache_miss_p, args.sequential_m,
                       args.truth_log, tuple(args.extra_query))
    uvicorn.run(build_app(config), host=args.listen, port=args.port, log_level="warning",
                access_log=False, http="h11", loop="asyncio", timeout_keep_alive=75)


if __name__ == "__main__":
    main()

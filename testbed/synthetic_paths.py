"""Message traces with known causal paths, for testing and benchmarking path inference.

An application is a set of services on nodes (replicas on hosts). A request to a service
runs its *behaviour*: stages in sequence, each stage's calls in parallel (waiting for every
answer), an exponential amount of work before each stage and before the reply. Clients
send requests to a front service at Poisson times. Calls between two nodes share a pool of
persistent connections (a connection carries one call at a time; a new one opens when all
are busy), so requests and replies alternate on each connection as on real ones.

The truth: every message's parent by WAP5's causality model (§2.4) — the last message the
sender received for the same request before sending it (−1 for a client's request), and
its request's id. Clocks: each host's offset is added to the times it records; an untraced
host records nil (NaN). Network delay per host pair: a symmetric base plus exponential
jitter.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

import numpy as np

from linkgrad.paths.messages import NO_THREAD, Connections, Messages, Trace


@dataclass(frozen=True)
class Behaviour:
    """What a service does with a request: stages of parallel calls, `work_s` (mean) before
    each stage and before the reply."""

    service: str
    stages: tuple[tuple[Behaviour, ...], ...] = ()
    work_s: float = 0.001


@dataclass(frozen=True)
class Application:
    """services: name -> (node names of its replicas, its port); node_host: node -> host;
    requests: (weight, behaviour of the front service) mixes; clients: client node names."""

    services: dict[str, tuple[tuple[str, ...], int]]
    node_host: dict[str, str]
    requests: tuple[tuple[float, Behaviour], ...]
    clients: tuple[str, ...]
    base_delay_s: dict[frozenset[str], float] = field(default_factory=dict)
    default_delay_s: float = 0.0005
    jitter_s: float = 0.00005
    # the spread of each piece of work: lognormal with this coefficient of variation around
    # its mean (service times have a typical value); 0: exponential (memoryless)
    work_cv: float = 0.5
    # services whose nodes serve one request per worker thread (Apache prefork, PHP-FPM):
    # each request a free worker, its messages sent and received by that thread; the other
    # services' nodes are one event loop (one thread for everything); clients: unknown
    threaded: frozenset[str] = frozenset()


@dataclass(frozen=True, eq=False)
class SyntheticTrace:
    trace: Trace
    true_parent: np.ndarray  # per message of trace (its order), −1 for a request's root
    request: np.ndarray  # per message, the request it belongs to
    offsets_s: dict[str, float]  # per host, the clock offset put in


class _Builder:
    def __init__(self, app: Application, rng: random.Random) -> None:
        self.app, self.rng = app, rng
        self.rows: list[tuple[float, float, int, int, int, int]] = []  # send, recv, src, dst,
        # parent row, request
        self.calls: list[tuple[int, int]] = []  # (request row, reply row) of each call
        self.node_index = {name: i for i, name in enumerate(app.node_host)}
        # each request a node served: (node, its request's row, the rows it sent and
        # received for it; its reply is added by the caller, last)
        self.servings: list[tuple[str, int, list[int], list[int]]] = []

    def delay(self, a: str, b: str) -> float:
        ha, hb = self.app.node_host[a], self.app.node_host[b]
        base = self.app.base_delay_s.get(frozenset((ha, hb)), self.app.default_delay_s)
        return base + self.rng.expovariate(1 / self.app.jitter_s)

    def work(self, mean_s: float) -> float:
        cv = self.app.work_cv
        if cv <= 0:
            return self.rng.expovariate(1 / mean_s)
        sigma2 = math.log1p(cv * cv)
        return self.rng.lognormvariate(math.log(mean_s) - sigma2 / 2, math.sqrt(sigma2))

    def message(self, send: float, src: str, dst: str, parent: int, request: int) -> int:
        recv = send + self.delay(src, dst)
        self.rows.append((send, recv, self.node_index[src], self.node_index[dst], parent,
                          request))
        return len(self.rows) - 1

    def serve(self, behaviour: Behaviour, node: str, arrived: int, request: int) -> int:
        """Run `behaviour` at `node` for the request message row `arrived`; return the row of
        the last message `node` received for it (the parent of its reply) and its time."""
        latest = arrived
        t = self.rows[arrived][1]
        sent: list[int] = []
        received = [arrived]
        self.servings.append((node, arrived, sent, received))
        for stage in behaviour.stages:
            t += self.work(behaviour.work_s)
            answers = []
            for k, call in enumerate(stage):
                replicas, _ = self.app.services[call.service]
                callee = self.rng.choice(replicas)
                call_row = self.message(t + k * 1e-6, node, callee, latest, request)
                sent.append(call_row)
                serving = len(self.servings)
                inner = self.serve(call, callee, call_row, request)
                t_reply = self.rows[inner][1] + self.work(call.work_s)
                reply = self.message(t_reply, callee, node, inner, request)
                self.servings[serving][2].append(reply)
                self.calls.append((call_row, reply))
                answers.append(reply)
                received.append(reply)
            latest = max(answers, key=lambda r: self.rows[r][1])
            t = self.rows[latest][1]
        return latest


def generate(app: Application, rate_per_s: float, duration_s: float, *, seed: int = 1,
             offsets_s: dict[str, float] | None = None, untraced: frozenset[str] = frozenset(),
             start_s: float = 1_700_000_000.0) -> SyntheticTrace:
    """A trace of `duration_s` of Poisson requests at `rate_per_s` (module doc)."""
    rng = random.Random(seed)
    b = _Builder(app, rng)
    weights = [w for w, _ in app.requests]
    front = [beh for _, beh in app.requests]
    t, request = 0.0, 0
    while True:
        t += rng.expovariate(rate_per_s)
        if t >= duration_s:
            break
        behaviour = rng.choices(front, weights)[0]
        client = rng.choice(app.clients)
        server = rng.choice(app.services[behaviour.service][0])
        sent = b.message(t, client, server, -1, request)
        serving = len(b.servings)
        inner = b.serve(behaviour, server, sent, request)
        reply = b.message(b.rows[inner][1] + b.work(behaviour.work_s), server,
                          client, inner, request)
        b.servings[serving][2].append(reply)
        b.calls.append((sent, reply))
        request += 1
    return _finish(app, b, offsets_s or {}, untraced, start_s)


def _finish(app: Application, b: _Builder, offsets_s: dict[str, float],
            untraced: frozenset[str], start_s: float) -> SyntheticTrace:
    rows = np.array(b.rows, dtype=float).reshape(-1, 6)
    send, recv = rows[:, 0] + start_s, rows[:, 1] + start_s
    src, dst = rows[:, 2].astype(np.int64), rows[:, 3].astype(np.int64)
    conn, connections = _connections(app, b, send, recv)
    nodes = tuple(app.node_host)
    hosts = tuple(dict.fromkeys(app.node_host.values()))
    node_host = np.array([hosts.index(app.node_host[n]) for n in nodes])
    theta = np.array([offsets_s.get(h, 0.0) for h in hosts])
    traced = np.array([h not in untraced for h in hosts])
    send_rec = np.where(traced[node_host[src]], send + theta[node_host[src]], np.nan)
    recv_rec = np.where(traced[node_host[dst]], recv + theta[node_host[dst]], np.nan)
    send_thread, recv_thread = _threads(app, b, len(src))
    messages = Messages(send_rec, recv_rec, src, dst, conn, np.full(len(src), 100),
                        send_thread, recv_thread)
    trace = Trace.sorted(messages, connections, nodes, node_host, hosts)
    # the order Trace.sorted chose, to carry the truth along
    key = np.where(np.isnan(send_rec), recv_rec, send_rec)
    order = np.argsort(key, kind="stable")
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    parent = rows[:, 4].astype(np.int64)
    true_parent = np.where(parent >= 0, position[np.maximum(parent, 0)], -1)[order]
    return SyntheticTrace(trace, true_parent, rows[:, 5].astype(np.int64)[order],
                          {h: offsets_s.get(h, 0.0) for h in hosts})


def _threads(app: Application, b: _Builder, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each message's sending and receiving thread: a threaded service's node gives each
    request the free worker that has been idle longest (a new one when all are busy), an
    event loop node has one thread; clients' are unknown."""
    send_thread, recv_thread = np.full(n, NO_THREAD), np.full(n, NO_THREAD)
    threaded = {node for name, (replicas, _) in app.services.items()
                if name in app.threaded for node in replicas}
    workers: dict[str, list[tuple[float, int]]] = {}  # node -> (free since, thread)
    made: dict[str, int] = {}
    servings = sorted(b.servings, key=lambda s: b.rows[s[1]][1])  # by arrival
    index = {name: i for i, name in enumerate(app.node_host)}
    for node, arrived, sent, received in servings:
        if node in threaded:
            pool = workers.setdefault(node, [])
            start = b.rows[arrived][1]
            if pool and pool[0][0] <= start:
                _, thread = heapq.heappop(pool)
            else:
                thread = 1000 * (index[node] + 1) + made.get(node, 0)
                made[node] = made.get(node, 0) + 1
            heapq.heappush(pool, (b.rows[sent[-1]][0], thread))  # free once it replied
        else:
            thread = 1000 * (index[node] + 1)
        send_thread[sent] = thread
        recv_thread[received] = thread
    return send_thread, recv_thread


def _connections(app: Application, b: _Builder, send: np.ndarray, recv: np.ndarray
                 ) -> tuple[np.ndarray, Connections]:
    """Each call on a pooled connection between its two nodes: the longest idle free one, or
    a new one when all are busy."""
    conn = np.full(len(send), -1, dtype=np.int64)
    pools: dict[tuple[int, int], list[tuple[float, int]]] = {}
    client_node, server_node, client_port, server_port = [], [], [], []
    port_of = {}
    for replicas, port in app.services.values():
        for r in replicas:
            port_of[r] = port
    nodes = list(app.node_host)
    for request, reply in sorted(b.calls, key=lambda c: send[c[0]]):
        a, s = b.rows[request][2], b.rows[request][3]
        pool = pools.setdefault((a, s), [])
        if pool and pool[0][0] <= send[request]:
            _, c = heapq.heappop(pool)
        else:
            c = len(client_node)
            client_node.append(a)
            server_node.append(s)
            client_port.append(32768 + c % 28000)
            server_port.append(port_of[nodes[s]])
        conn[request] = conn[reply] = c
        heapq.heappush(pool, (recv[reply], c))
    return conn, Connections(client_node, server_node, client_port, server_port)


def three_tier(clients: int = 1, apps: int = 1) -> Application:
    """The testbed's shape: clients → web (nginx) → app → db, with ViewItem's two sequential
    queries, PutBid's three, a single query, and a call to a peer in parallel with a query."""
    query = Behaviour("db", (), 0.0005)
    peer = Behaviour("peer", (), 0.02)
    def on_app(*stages: tuple[Behaviour, ...]) -> Behaviour:
        return Behaviour("web", ((Behaviour("app", stages, 0.0003),),), 0.0001)
    app_nodes = tuple(f"app{i + 1}" for i in range(apps))
    node_host = {**{f"client{i}": f"client{i}" for i in range(clients)}, "web": "web",
                 **{a: a for a in app_nodes}, "db": "db", "peer": "peer"}
    return Application(
        services={"web": (("web",), 80), "app": (app_nodes, 8000), "db": (("db",), 5432),
                  "peer": (("peer",), 8000)},
        node_host=node_host,
        requests=((1.0, on_app((query,), (query,))), (1.0, on_app((query,), (query,), (query,))),
                  (1.0, on_app((query,))), (0.5, on_app((query, peer)))),
        clients=tuple(f"client{i}" for i in range(clients)))


def busy_server(open_contexts: float, rate_per_s: float, queries: int = 40,
                query_s: float = 0.0003) -> Application:
    """A PHP-like server with many workers: clients → web, each request `queries` sequential
    database queries with work before each, spaced so that the web node holds
    `open_contexts` requests open at once on average (Little's law: rate × time in system)."""
    delay_s, jitter_s = 0.0002, 0.00005
    per_query_s = query_s + 2 * (delay_s + jitter_s)
    in_system_s = open_contexts / rate_per_s
    work_s = (in_system_s - queries * per_query_s) / (queries + 1)
    if work_s <= 0:
        raise ValueError(f"{open_contexts=} at {rate_per_s=} leaves no time for work between "
                         f"{queries} queries of {per_query_s * 1e3:.2f} ms")
    query = Behaviour("db", (), query_s)
    page = Behaviour("web", tuple((query,) for _ in range(queries)), work_s)
    return Application(
        services={"web": (("web",), 80), "db": (("db",), 3306)},
        node_host={"client": "client", "web": "web", "db": "db"},
        requests=((1.0, page),), clients=("client",), default_delay_s=delay_s,
        jitter_s=jitter_s, threaded=frozenset({"web"}))


def handed_to_workers(s: SyntheticTrace, server: str, offset: int = 500) -> SyntheticTrace:
    """`s` as if `server` handed each request to a worker process over a Unix socket the
    trace cannot see (Passenger, PHP-FPM): its calls leave from, and their answers reach, a
    node of its own on the same host (`server`-worker, listening nowhere), on a worker
    thread that serves that one request (the server's thread + `offset`)."""
    t = s.trace
    m, c = t.messages, t.connections
    at = t.nodes.index(server)
    worker = len(t.nodes)
    is_reply = t.is_reply()
    called = c.client_node == at
    call = ~is_reply & (m.src == at)
    answer = is_reply & called[m.conn]
    src = np.where(call, worker, m.src)
    dst = np.where(answer, worker, m.dst)
    send_thread = np.where(call, m.send_thread + offset, m.send_thread)
    recv_thread = np.where(answer, m.recv_thread + offset, m.recv_thread)
    messages = Messages(m.send_s, m.recv_s, src, dst, m.conn, m.size_bytes, send_thread,
                        recv_thread)
    connections = Connections(np.where(called, worker, c.client_node), c.server_node,
                              c.client_port, c.server_port, c.opened)
    trace = Trace(messages, connections, (*t.nodes, f"{server}-worker"),
                  np.append(t.node_host, t.node_host[at]), t.hosts)
    return SyntheticTrace(trace, s.true_parent, s.request, s.offsets_s)

"""A generated microservice application (`linkgrad testbed up --services N`, issue 31): N
services calling one another by a call graph drawn from a seed, and every transaction's true
gradient for every one-way link, from the graph alone.

The shapes are the thesis's (Table 2.1): sequential calls (a call made `repeat` times in a
row), parallel calls (wait for all: only the slowest branch is on the critical path), and
caches (a call made only on a miss, with probability `miss_p`). A transaction is an endpoint
of the front service; every other service has one behaviour, whoever calls it.

The truth is the expected number of times a request of the transaction crosses each link on
its critical path (thesis §2.1): a call crosses caller->callee and callee->caller once per
request-response, and a cache's miss probability weighs its whole subtree. Two rules keep it
exact rather than approximate:
- a parallel step's branches are deterministic (no cache anywhere below them), so which branch
  is slowest is fixed;
- their durations (the services' own work along the branch) differ by at least
  `PARALLEL_MARGIN_MS` plus `TRUTH_DELAY_MS` for every time the faster branch crosses its
  busiest link, so a delay up to TRUTH_DELAY_MS on any one link never makes it the slower:
  experiments on a generated application keep `max_delay_ms` at or under it.
Pure: drawing and counting only. The servers that run a graph are
`testbed.service_server`.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["PARALLEL_MARGIN_MS", "TRUTH_DELAY_MS", "Call", "Service", "ServiceGraph", "Step",
           "apart", "busiest_link", "duration_ms", "generate", "graph_from_json",
           "graph_to_json", "service_name", "true_gradients"]

PARALLEL_MARGIN_MS = 4.0  # parallel branches' durations at least this far apart, and
TRUTH_DELAY_MS = 1.0  # this much more per crossing of the faster branch's busiest link
WORK_MS = (0.5, 3.0)  # a service's own work per request, drawn uniformly
MAX_DEPTH = 5  # calls deep below the front
MAX_FANOUT = 3  # distinct services one service calls
CACHE_SHARE = 0.25  # of sequential calls: made only on a miss
MISS_P = (0.2, 0.6)
PARALLEL_SHARE = 0.3  # of steps with two or more candidate targets


@dataclass(frozen=True)
class Call:
    target: str
    repeat: int = 1  # request-responses in a row
    miss_p: float = 1.0  # the call is made with this probability (a cache's miss), else not


@dataclass(frozen=True)
class Step:
    """One call, or several at once (wait for all)."""

    calls: tuple[Call, ...]

    @property
    def parallel(self) -> bool:
        return len(self.calls) > 1


@dataclass(frozen=True)
class Service:
    name: str
    work_ms: float  # its own work per request, before its calls
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True)
class ServiceGraph:
    front: str
    services: dict[str, Service]  # every service but the front's transactions
    transactions: dict[str, tuple[Step, ...]]  # the front's endpoints: what each calls
    seed: int | None = None
    layers: dict[str, int] = field(default_factory=dict)  # depth below the front

    def calls_of(self, name: str) -> tuple[Step, ...]:
        return self.services[name].steps


def graph_to_json(graph: ServiceGraph) -> str:
    """The graph as the servers read it (`graph_from_json`)."""
    return json.dumps(asdict(graph), sort_keys=True)


def graph_from_json(text: str) -> ServiceGraph:
    data = json.loads(text)

    def steps(raw: list[dict[str, Any]]) -> tuple[Step, ...]:
        return tuple(Step(tuple(Call(**c) for c in step["calls"])) for step in raw)

    return ServiceGraph(
        front=data["front"],
        services={n: Service(s["name"], s["work_ms"], steps(s["steps"]))
                  for n, s in data["services"].items()},
        transactions={n: steps(t) for n, t in data["transactions"].items()},
        seed=data.get("seed"), layers=data.get("layers", {}))


def service_name(i: int) -> str:
    return f"s{i}"


def duration_ms(graph: ServiceGraph, name: str) -> float:
    """A deterministic service's time per request: its work, then its steps (a parallel
    step as long as its slowest branch). Network time is left out: on one machine it is
    tens of microseconds against milliseconds of work."""
    s = graph.services[name]
    return s.work_ms + sum(_step_ms(graph, step) for step in s.steps)


def _step_ms(graph: ServiceGraph, step: Step) -> float:
    return max(c.repeat * duration_ms(graph, c.target) for c in step.calls)


def true_gradients(graph: ServiceGraph, client: str = "client") -> dict[str, dict[str, float]]:
    """Per transaction, per one-way link "a->b" it may cross: the expected crossings on its
    critical path (0 for a link the graph has that this transaction never crosses). The
    client's link counts once each way, as in `testbed.transactions`."""
    links = {f"{a}->{b}" for a, b in _edges(graph)} | {f"{client}->{graph.front}",
                                                        f"{graph.front}->{client}"}
    out = {}
    for name, steps in graph.transactions.items():
        crossed = _steps_crossings(graph, graph.front, steps)
        crossed[f"{client}->{graph.front}"] += 1.0
        crossed[f"{graph.front}->{client}"] += 1.0
        out[name] = {link: float(crossed.get(link, 0.0)) for link in sorted(links)}
    return out


def _steps_crossings(graph: ServiceGraph, caller: str, steps: tuple[Step, ...]) -> Counter:
    total: Counter = Counter()
    for step in steps:
        calls = step.calls
        if step.parallel:  # deterministic branches: the slowest alone is critical
            calls = (max(calls, key=lambda c: c.repeat * duration_ms(graph, c.target)),)
        for c in calls:
            one = _steps_crossings(graph, c.target, graph.calls_of(c.target))
            one[f"{caller}->{c.target}"] += 1.0
            one[f"{c.target}->{caller}"] += 1.0
            for link, n in one.items():
                total[link] += c.miss_p * c.repeat * n
    return total


def busiest_link(graph: ServiceGraph, service: str) -> float:
    """The most times one call of `service` crosses any one link (its caller's link once)."""
    return max([1.0, *_steps_crossings(graph, service, graph.calls_of(service)).values()])


def apart(graph: ServiceGraph, a: str, b: str) -> bool:
    """Two deterministic branches far enough apart for the slower to stay critical under a
    delay of TRUTH_DELAY_MS on any one link."""
    slow, fast = sorted((a, b), key=lambda n: duration_ms(graph, n), reverse=True)
    return duration_ms(graph, slow) - duration_ms(graph, fast) >= (
        PARALLEL_MARGIN_MS + TRUTH_DELAY_MS * busiest_link(graph, fast))


def _edges(graph: ServiceGraph) -> set[tuple[str, str]]:
    out = set()
    for caller, steps in [(graph.front, s) for s in graph.transactions.values()] + [
            (n, s.steps) for n, s in graph.services.items()]:
        for step in steps:
            for c in step.calls:
                out |= {(caller, c.target), (c.target, caller)}
    return out


def generate(services: int, seed: int = 1, transactions: int = 4) -> ServiceGraph:
    """`services` services, s0 the front with `transactions` endpoints, the others in layers
    below it (a service calls only deeper ones: no cycles), each called by someone. Drawn
    bottom-up so every service's duration and determinism are known when a caller is drawn."""
    if services < 2:
        raise ValueError(f"a generated application needs 2 services or more, not {services}")
    if transactions < 1:
        raise ValueError(f"transactions must be 1 or more, not {transactions}")
    rng = random.Random(seed)
    names = [service_name(i) for i in range(1, services)]
    depth = min(MAX_DEPTH, max(1, round(services ** 0.5)))
    layers = {n: 1 + min(depth - 1, i * depth // len(names)) for i, n in enumerate(names)}
    built: dict[str, Service] = {}
    deterministic: dict[str, bool] = {}
    graph = ServiceGraph(service_name(0), built, {}, seed, layers)
    called: set[str] = set()
    for name in reversed(names):  # deepest first
        below = [n for n in names if layers[n] > layers[name]]
        # the next layer's services no one calls yet come first, so all are reached
        nxt = [n for n in below if layers[n] == layers[name] + 1 and n not in called]
        picks = nxt[:MAX_FANOUT] or []
        rest = [n for n in below if n not in picks]
        extra = rng.randint(0, max(0, MAX_FANOUT - len(picks)))
        picks += rng.sample(rest, min(extra, len(rest)))
        steps = _draw_steps(rng, picks, graph, deterministic)
        built[name] = Service(name, round(rng.uniform(*WORK_MS), 2), steps)
        deterministic[name] = all(c.miss_p == 1.0 and deterministic[c.target]
                                  for s in steps for c in s.calls)
        called |= set(picks)
    top = [n for n in names if layers[n] == 1]
    uncalled = [n for n in top if n not in called]
    for i in range(transactions):
        # each top-layer service no one calls gets an endpoint; the others draw freely
        picks = uncalled[i::transactions] or rng.sample(top, min(len(top),
                                                                 rng.randint(1, MAX_FANOUT)))
        graph.transactions[f"t{i}"] = _draw_steps(rng, picks, graph, deterministic)
    return graph


def _draw_steps(rng: random.Random, targets: list[str], graph: ServiceGraph,
                deterministic: dict[str, bool]) -> tuple[Step, ...]:
    """Steps calling each target once: some pairs of deterministic targets whose durations
    differ by PARALLEL_MARGIN_MS in parallel, the rest sequential, some of those a cache."""
    pending = list(targets)
    rng.shuffle(pending)
    steps = []
    while pending:
        first = pending.pop()
        partner = None
        if deterministic[first] and rng.random() < PARALLEL_SHARE:
            partner = next((t for t in pending if deterministic[t]
                            and apart(graph, first, t)), None)
        if partner is not None:
            pending.remove(partner)
            steps.append(Step((Call(first), Call(partner))))
        elif rng.random() < CACHE_SHARE:
            steps.append(Step((Call(first, miss_p=round(rng.uniform(*MISS_P), 2)),)))
        else:
            steps.append(Step((Call(first, repeat=rng.choice((1, 1, 2, 3))),)))
    return tuple(steps)

"""Path instances aggregated into path patterns (WAP5 §2.5.1, §5.1 step 3, §5.2, §6.6).

Instances with the same structure over the same names are one pattern. Names are WAP5's
client aggregation: every client node (one that never listens) is CLIENT, and a message is
labelled by its two nodes and the server's (fixed) port, the client's ephemeral port left
out: `web->app1:8000` for a request, `app1:8000->web` for its reply. Children are ordered by
label, then time, so two parallel calls make one pattern whichever left first.

Per pattern: the count of instances, the score (the sum of their probabilities: the expected
number of times it occurred, §6.6), the highest probability, and per hop the mean node delay
(the sender's time from its parent's arrival to this departure, §5.2) and network delay
(receive − send with the clock offsets taken out), weighted by the instances' probabilities;
and the crossings of each host-to-host link on the critical path (the chain of parents back
from the message that ends the path: the last one into the root's sender).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from coordinator.paths.candidates import departure_and_arrival
from coordinator.paths.clocks import ClockOffsets
from coordinator.paths.instances import PathInstance
from coordinator.paths.messages import Trace

CLIENT = "CLIENT"


@dataclass(frozen=True)
class Hop:
    """One message of a pattern, in pre-order; `parent` is a position (−1: the root)."""

    label: str
    parent: int
    link: str  # "src host->dst host"
    node_delay_s: float  # NaN: the sender was not traced (its delay is in the network's)
    network_delay_s: float  # NaN: an end was not traced, or the clocks not related
    critical: float  # the share of instances (by probability) with it on the critical path


@dataclass(frozen=True)
class PathPattern:
    key: str
    count: int
    score: float
    max_probability: float
    hops: tuple[Hop, ...]
    crossings: dict[str, float]  # host link -> mean crossings on the critical path
    response_s: float  # mean end-to-end time at the root's sender (NaN: not traced)
    roots: tuple[int, ...] = field(repr=False)  # the root message of each instance


class PatternNames:
    """Each message's label, built once per distinct (nodes, port, direction)."""

    def __init__(self, trace: Trace) -> None:
        m, c = trace.messages, trace.connections
        is_reply = trace.is_reply()
        port = c.server_port[m.conn]
        names = [CLIENT if client else name for name, client in zip(trace.nodes, trace.clients,
                                                                      strict=True)]
        key = np.stack([m.src, m.dst, port, is_reply.astype(np.int32)], axis=1)
        unique, self.label_id = np.unique(key, axis=0, return_inverse=True)
        self.label_id = self.label_id.ravel()
        self.labels = [f"{names[s]}:{p}->{names[d]}" if r else f"{names[s]}->{names[d]}:{p}"
                       for s, d, p, r in unique.tolist()]
        hosts = trace.hosts
        src_host, dst_host = trace.src_host(), trace.dst_host()
        self.link = [f"{hosts[a]}->{hosts[b]}" for a, b in zip(src_host.tolist(),
                                                               dst_host.tolist(), strict=True)]

    def label(self, msg: int) -> str:
        return self.labels[self.label_id[msg]]


def canonical(instance: PathInstance, names: PatternNames) -> tuple[list[int], list[int]]:
    """The instance's messages in canonical pre-order and each one's parent position."""
    children: dict[int, list[int]] = {}
    for msg, parent in zip(instance.messages, instance.parents, strict=True):
        if parent >= 0:
            children.setdefault(parent, []).append(msg)
    order, parents = [], []
    todo = [(instance.root, -1)]
    while todo:
        msg, parent_pos = todo.pop()
        order.append(msg)
        parents.append(parent_pos)
        kids = sorted(children.get(msg, ()), key=lambda k: (names.label(k), k))
        todo.extend((k, len(order) - 1) for k in reversed(kids))
    return order, parents


def critical_path(instance: PathInstance, trace: Trace, arrival: Sequence[float]) -> list[int]:
    """The messages from the root to the last one into the root's sender (or, if none comes
    back, the last to arrive), root first. `arrival`: each message's arrival, −inf unknown."""
    m = trace.messages
    root_node = m.src[instance.root]
    parent_of = dict(zip(instance.messages, instance.parents, strict=True))
    back = [x for x in instance.messages if m.dst[x] == root_node]
    end = max(back or instance.messages, key=lambda x: (arrival[x], x))
    chain = [end]
    while parent_of[chain[-1]] >= 0:
        chain.append(parent_of[chain[-1]])
    return chain[::-1]


def aggregate(instances: Iterable[PathInstance], trace: Trace, offsets: ClockOffsets
              ) -> list[PathPattern]:
    """Patterns from instances, highest score first."""
    names = PatternNames(trace)
    out_t, in_t, _, _ = departure_and_arrival(trace)
    arrival = np.where(np.isnan(in_t), -np.inf, in_t).tolist()  # plain floats: read per hop
    out_list, in_list = out_t.tolist(), in_t.tolist()
    network = offsets.network_delay_s(trace).tolist()
    nil_send = np.isnan(trace.messages.send_s).tolist()
    src, dst = trace.messages.src.tolist(), trace.messages.dst.tolist()
    groups: dict[str, _Group] = {}
    for inst in instances:
        order, parents = canonical(inst, names)
        key = " ".join(f"{p}:{names.label(x)}" for x, p in zip(order, parents, strict=True))
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(order, parents, names)
        chain = critical_path(inst, trace, arrival)
        critical = set(chain)
        node = [math.nan if (p < 0 or nil_send[x]) else out_list[x] - in_list[order[p]]
                for x, p in zip(order, parents, strict=True)]
        crossings: dict[str, int] = {}
        for x in chain:
            crossings[names.link[x]] = crossings.get(names.link[x], 0) + 1
        end = chain[-1]
        response = in_list[end] - out_list[inst.root] if dst[end] == src[inst.root] \
            else math.nan
        group.add(inst, node, [network[x] for x in order], [x in critical for x in order],
                  crossings, response)
    patterns = [g.pattern(k) for k, g in groups.items()]
    patterns.sort(key=lambda p: (-p.score, p.key))
    return patterns


class _Group:
    """Running probability-weighted sums of one pattern's instances."""

    def __init__(self, order: list[int], parents: list[int], names: PatternNames) -> None:
        n = len(order)
        self.labels = [names.label(x) for x in order]
        self.links = [names.link[x] for x in order]
        self.parents = parents
        self.count, self.score, self.max_p = 0, 0.0, 0.0
        self.node = np.zeros(n)
        self.node_w = np.zeros(n)
        self.net = np.zeros(n)
        self.net_w = np.zeros(n)
        self.critical = np.zeros(n)
        self.crossings: dict[str, float] = {}
        self.response, self.response_w = 0.0, 0.0
        self.roots: list[int] = []

    def add(self, inst: PathInstance, node: list[float], net: list[float],
            critical: list[bool], crossings: dict[str, int], response: float) -> None:
        w = inst.probability
        self.count += 1
        self.score += w
        self.max_p = max(self.max_p, w)
        self.roots.append(inst.root)
        for values, total, weight in ((node, self.node, self.node_w),
                                      (net, self.net, self.net_w)):
            v = np.asarray(values, dtype=float)
            known = np.isfinite(v)
            total[known] += w * v[known]
            weight[known] += w
        self.critical += w * np.asarray(critical, dtype=float)
        for link, k in crossings.items():
            self.crossings[link] = self.crossings.get(link, 0.0) + w * k
        if np.isfinite(response):
            self.response += w * response
            self.response_w += w

    def pattern(self, key: str) -> PathPattern:
        w = self.score if self.score > 0 else np.nan
        with np.errstate(invalid="ignore", divide="ignore"):
            node = self.node / self.node_w
            net = self.net / self.net_w
        hops = tuple(Hop(label, parent, link, float(nd), float(nt), float(c / w))
                     for label, parent, link, nd, nt, c in zip(
                         self.labels, self.parents, self.links, node, net, self.critical,
                         strict=True))
        crossings = {link: v / w for link, v in sorted(self.crossings.items())}
        response = self.response / self.response_w if self.response_w else np.nan
        return PathPattern(key, self.count, self.score, self.max_p, hops, crossings,
                           float(response), tuple(self.roots))

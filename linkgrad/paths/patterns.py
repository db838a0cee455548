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
from the message that ends the path, the last one into the root's sender, or from what its
last byte waited for), as a packet capture counts them: a connection's set-up (SYN, SYN-ACK,
and the ACK a server that speaks first waits for) is on its first message's path. A hop's
link is the one its message took in the pattern's first instance.

All instances' messages are handled as one flat array (a CoDeeN-sized trace has a million
instances). Instances of one *shape* (the same tree, each message's children in the same
order by label, messages in time order; the labels themselves left out, so shapes are few)
share their canonical order, worked out once per shape; instances with the same canonical
tree and labels are one pattern. The sums per pattern and hop are bincounts over the
instances in the order given, so every float is the one adding instance by instance gives.
An instance that is not a tree of its messages from its root is a ValueError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, pairwise
from operator import attrgetter

import numpy as np

from linkgrad.paths.candidates import departure_and_arrival
from linkgrad.paths.clocks import ClockOffsets
from linkgrad.paths.instances import PathInstance
from linkgrad.paths.messages import Trace
from linkgrad.paths.no_gc import no_cycle_collection

__all__ = ["CLIENT", "Hop", "PathPattern", "PatternNames", "aggregate", "canonical"]

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
    reply: bool  # sent by its connection's server end


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
    """Each message's label, as its rank among the distinct label texts (equal texts, equal
    ranks: children sort by it), and its host link as a code (text built on demand)."""

    def __init__(self, trace: Trace) -> None:
        m, c = trace.messages, trace.connections
        texts = [CLIENT if client else name for name, client in zip(trace.nodes, trace.clients,
                                                                      strict=True)]
        name_ids: dict[str, int] = {}
        name = np.array([name_ids.setdefault(t, len(name_ids)) for t in texts], dtype=np.int64)
        ports, port = np.unique(c.server_port, return_inverse=True)
        n_names, n_ports, ports = len(name_ids), len(ports), ports.tolist()
        code = ((name[m.src] * n_names + name[m.dst]) * n_ports + port.ravel()[m.conn]) * 2 \
            + trace.is_reply()
        unique, label = _dense(code, n_names * n_names * n_ports * 2)
        names = list(name_ids)
        labels = []
        for x in unique.tolist():
            rest, r = divmod(x, 2)
            rest, p = divmod(rest, n_ports)
            s, d = divmod(rest, n_names)
            p = ports[p]
            labels.append(f"{names[s]}:{p}->{names[d]}" if r else f"{names[s]}->{names[d]}:{p}")
        self.texts = sorted(set(labels))
        rank_of = {t: i for i, t in enumerate(self.texts)}
        self.rank = np.array([rank_of[t] for t in labels], dtype=np.int64)[label]
        self.hosts = trace.hosts
        self.link = trace.src_host().astype(np.int64) * len(trace.hosts) + trace.dst_host()
        self.set_up = trace.set_up_crossings()
        self.reply = trace.is_reply()
        self._link_texts: dict[int, str] = {}

    def link_text(self, code: int) -> str:
        text = self._link_texts.get(code)
        if text is None:
            a, b = divmod(code, len(self.hosts))
            text = self._link_texts[code] = f"{self.hosts[a]}->{self.hosts[b]}"
        return text


def _dense(code: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(code, return_inverse=True), by a table where the codes' range is small."""
    if span > 4 * len(code) + 1024:
        unique, inverse = np.unique(code, return_inverse=True)
        return unique, inverse.ravel()
    present = np.zeros(span, dtype=bool)
    present[code] = True
    unique = np.flatnonzero(present)
    table = np.cumsum(present) - 1
    return unique, table[code]


@dataclass(frozen=True, eq=False)
class _Flat:
    """The instances' messages in one array, instance after instance, each in time order."""

    root: np.ndarray  # per instance: its root message
    probability: np.ndarray
    start: np.ndarray  # per instance, where its elements begin (length + 1)
    owner: np.ndarray  # per element: its instance
    msg: np.ndarray  # per element: its message
    parent: np.ndarray  # per element: its parent's element (−1: none)
    root_at: np.ndarray  # per instance: its root's element


def _flatten(instances: Sequence[PathInstance], n_messages: int) -> _Flat:
    """The instances as one _Flat, checked: every root and parent among its messages."""
    k = len(instances)
    messages = list(map(attrgetter("messages"), instances))
    size = np.fromiter(map(len, messages), np.int64, k)
    total = int(size.sum())
    msg = np.fromiter(chain.from_iterable(messages), np.int64, total)
    up = np.fromiter(chain.from_iterable(map(attrgetter("parents"), instances)), np.int64,
                     total)
    root = np.fromiter(map(attrgetter("root"), instances), np.int64, k)
    start = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(size, out=start[1:])
    owner = np.repeat(np.arange(k), size)
    if np.any((msg < 0) | (msg >= n_messages)):
        raise ValueError(f"instance messages out of range 0..{n_messages - 1}")
    key = owner * n_messages + msg
    if np.any(np.diff(key) <= 0):  # instances_from gives them in time order; others may not
        order = np.argsort(key, kind="stable")
        key, msg, up = key[order], msg[order], up[order]
        if np.any(np.diff(key) == 0):
            raise ValueError("a message is twice in one path instance")
    has = up >= 0
    parent = np.full(total, -1, dtype=np.int64)
    parent[has] = _find(key, owner[has] * n_messages + up[has], "a parent")
    root_at = _find(key, np.arange(k) * n_messages + root, "the root")
    if np.any(parent[root_at] >= 0):
        raise ValueError("a path instance's root has a parent")
    return _Flat(root, np.fromiter(map(attrgetter("probability"), instances), np.float64, k),
                 start, owner, msg, parent, root_at)


def _find(key: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    """Where each wanted code is in the sorted `key`; every one must be there."""
    at = np.minimum(np.searchsorted(key, wanted), len(key) - 1)
    if np.any(key[at] != wanted):
        raise ValueError(f"{what} of a path instance is not among its messages")
    return at


def canonical(parents: Sequence[int], ranks: Sequence[int], root: int
              ) -> tuple[list[int], list[int]]:
    """Positions (into time-ordered messages) in canonical pre-order, children by rank (their
    labels' order) then time, and each one's parent's place in that order (−1: the root)."""
    children: dict[int, list[int]] = {}
    for pos, parent in enumerate(parents):
        if parent >= 0:
            children.setdefault(parent, []).append(pos)
    order, placed = [], []
    todo = [(root, -1)]
    while todo:
        pos, parent_at = todo.pop()
        order.append(pos)
        placed.append(parent_at)
        kids = sorted(children.get(pos, ()), key=ranks.__getitem__)  # stable: then time
        todo.extend((kid, len(order) - 1) for kid in reversed(kids))
    return order, placed


class _Shapes:
    """Each instance's pattern, and its canonical order worked out once per shape. Per
    element, instance after instance, each in canonical order: `canon`, the element (of
    _Flat) in that place, and `up`, its parent's place (−1: the root). Per pattern: `first`,
    its first instance, and `size`, its hops."""

    def __init__(self, flat: _Flat, rank: np.ndarray) -> None:
        start, size = flat.start, np.diff(flat.start)
        tree = (np.where(flat.parent >= 0, flat.parent - start[flat.owner], -1),
                _sibling_order(flat.parent, rank))
        self.pattern = np.empty(len(size), dtype=np.int64)
        self.canon = np.empty(len(flat.msg), dtype=np.int64)
        self.up = np.empty(len(flat.msg), dtype=np.int64)
        self.structs: dict[tuple[int, ...], int] = {}  # canonical parent places -> id
        first: list[np.ndarray] = []
        by_size = np.argsort(size, kind="stable")
        for which in np.split(by_size, np.flatnonzero(np.diff(size[by_size])) + 1):
            first.append(self._add(which, flat, rank, tree, sum(map(len, first))))
        self.first = np.concatenate(first)
        self.size = size[self.first]

    def _add(self, which: np.ndarray, flat: _Flat, rank: np.ndarray,
             tree: tuple[np.ndarray, np.ndarray], n: int) -> np.ndarray:
        """The instances `which`, all of one size, their patterns numbered from `n`; returns
        each new pattern's first instance. `tree`: per element, its parent's position in
        its instance and its place among its siblings."""
        first = flat.start[which]
        at = first[:, None] + np.arange(flat.start[which[0] + 1] - first[0])
        up, sibling = tree[0][at], tree[1][at]
        rows = np.concatenate([(flat.root_at[which] - first)[:, None],
                               (up + 1) * (int(sibling.max()) + 1) + sibling], axis=1)
        shape, reps = _row_groups(rows)
        order, placed = np.empty((2, len(reps), at.shape[1]), dtype=np.int64)
        struct = np.empty(len(reps), dtype=np.int64)
        for i, rep in enumerate(reps.tolist()):
            o, p = canonical(up[rep].tolist(), sibling[rep].tolist(), int(rows[rep, 0]))
            if len(o) < at.shape[1]:
                raise ValueError("a path instance has messages its root does not lead to")
            order[i], placed[i] = o, p
            struct[i] = self.structs.setdefault(tuple(p), len(self.structs))
        canon = first[:, None] + order[shape]
        self.canon[at] = canon
        self.up[at] = placed[shape]
        pattern, reps = _row_groups(np.concatenate([struct[shape][:, None], rank[canon]], axis=1))
        self.pattern[which] = pattern + n
        return which[reps]


def _sibling_order(parent: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Per element, its place among its parent's children by label rank, then time (0 for
    roots)."""
    kids = np.flatnonzero(parent >= 0)
    kids = kids[np.argsort(parent[kids] * (int(rank.max()) + 1) + rank[kids], kind="stable")]
    family = parent[kids]
    new = np.ones(len(kids), dtype=bool)
    new[1:] = family[1:] != family[:-1]
    out = np.zeros(len(parent), dtype=np.int64)
    out[kids] = np.arange(len(kids)) - np.maximum.accumulate(np.where(new, np.arange(len(kids)),
                                                                      0))
    return out


def _row_groups(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row (of non-negative ints) the id of its distinct value, and the first row of
    each id."""
    keys = _packed(rows)
    order = np.lexsort(keys[::-1])  # stable: a group's first row is its earliest
    new = np.zeros(len(order), dtype=bool)
    new[0] = True
    for key in keys:
        ordered = key[order]
        new[1:] |= ordered[1:] != ordered[:-1]
    ids = np.empty(len(order), dtype=np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids, order[new]


def _packed(rows: np.ndarray) -> list[np.ndarray]:
    """The columns packed into as few int64 as hold them, in the same lexical order."""
    bits = max(int(rows.max()).bit_length(), 1)
    per = max(62 // bits, 1)
    keys = []
    for j in range(0, rows.shape[1], per):
        key = rows[:, j].copy()
        for column in rows[:, j + 1:j + per].T:
            key <<= bits
            key |= column
        keys.append(key)
    return keys


def _critical(flat: _Flat, trace: Trace, in_t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per element, whether it is on its instance's critical path; per instance, the element
    that ends it: the last (by arrival, then time) into the root's sender, else the last.
    The path runs back from it to what its last byte waited for (`_finished_after`), then
    from parent to parent."""
    m, first, owner = trace.messages, flat.start[:-1], flat.owner
    back = m.dst[flat.msg] == m.src[flat.root][owner]
    candidate = back | ~np.logical_or.reduceat(back, first)[owner]
    arrival = np.where(np.isnan(in_t), -np.inf, in_t)[flat.msg]
    latest = np.maximum.reduceat(np.where(candidate, arrival, -np.inf), first)
    last = candidate & (arrival == latest[owner])
    end = np.maximum.reduceat(np.where(last, np.arange(len(owner)), -1), first)
    on = np.zeros(len(owner), dtype=bool)
    on[end] = True
    at = _finished_after(flat, trace, arrival, end)
    at = at[at >= 0]
    while len(at):  # one step up every chain at a time
        on[at] = True
        at = flat.parent[at]
        at = at[at >= 0]
    return on, end




def _finished_after(flat: _Flat, trace: Trace, arrival: np.ndarray, end: np.ndarray
                    ) -> np.ndarray:
    """Per instance, the element its end's last byte waited for: the last of the instance's
    messages into the end's sender after the end's first byte left and before its last did
    (a page sent in parts, the rest after one more query: MediaWiki's), else the end's
    parent. Where the sender's last byte is not known, the parent."""
    m, first, owner = trace.messages, flat.start[:-1], flat.owner
    ends = flat.msg[end]
    sender, began, done = m.src[ends], m.send_s[ends], m.send_end_s[ends]
    with np.errstate(invalid="ignore"):  # NaN (not known) compares false
        meanwhile = ((m.dst[flat.msg] == sender[owner]) & (arrival > began[owner])
                     & (arrival < done[owner]))
    meanwhile[end] = False
    latest = np.maximum.reduceat(np.where(meanwhile, arrival, -np.inf), first)
    pick = meanwhile & (arrival == latest[owner])
    waited = np.maximum.reduceat(np.where(pick, np.arange(len(owner)), -1), first)
    return np.where(waited >= 0, waited, flat.parent[end])


def aggregate(instances: Iterable[PathInstance], trace: Trace, offsets: ClockOffsets
              ) -> list[PathPattern]:
    """Patterns from instances, highest score first."""
    instances = list(instances)
    if not instances:
        return []
    with no_cycle_collection():
        return _aggregate(instances, trace, offsets)


def _aggregate(instances: list[PathInstance], trace: Trace, offsets: ClockOffsets
               ) -> list[PathPattern]:
    names = PatternNames(trace)
    flat = _flatten(instances, len(trace.messages))
    shapes = _Shapes(flat, names.rank[flat.msg])
    out_t, in_t, _, _ = departure_and_arrival(trace)
    on, end = _critical(flat, trace, in_t)
    pattern, w, n = shapes.pattern, flat.probability, len(shapes.first)
    score = np.bincount(pattern, w, n)
    max_p = np.zeros(n)
    np.fmax.at(max_p, pattern, w)
    m = trace.messages
    last = flat.msg[end]
    response = np.where(m.dst[last] == m.src[flat.root], in_t[last] - out_t[flat.root], np.nan)
    known = np.isfinite(response)
    weight = np.bincount(pattern[known], w[known], n)
    with np.errstate(invalid="ignore", divide="ignore"):
        response = np.where(weight != 0, np.bincount(pattern[known], (w * response)[known], n)
                            / weight, np.nan)
    keys, hops = _hops(flat, shapes, names, on, (out_t, in_t, np.isnan(m.send_s),
                                                  offsets.network_delay_s(trace)), score)
    roots = flat.root[np.argsort(pattern, kind="stable")].tolist()
    count = np.bincount(pattern, minlength=n).tolist()
    ends = np.cumsum(count).tolist()
    patterns = list(map(PathPattern, keys, count, score.tolist(), max_p.tolist(), hops,
                        _crossings(flat, pattern, names, on, score), response.tolist(),
                        [tuple(roots[e - c:e]) for c, e in zip(count, ends, strict=True)]))
    patterns.sort(key=lambda p: (-p.score, p.key))
    return patterns


def _hops(flat: _Flat, shapes: _Shapes, names: PatternNames, on: np.ndarray,
          times: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], score: np.ndarray
          ) -> tuple[list[str], list[tuple[Hop, ...]]]:
    """Each pattern's key and hops: the delays are means weighted by probability over the
    instances where they are known; the link is the first instance's. `times`: per message,
    departure, arrival, whether the send is nil, and the network delay."""
    out_t, in_t, nil_send, network = times
    owner, size = flat.owner, shapes.size
    base = np.zeros(len(size) + 1, dtype=np.int64)
    np.cumsum(size, out=base[1:])
    n_hops = int(base[-1])
    hop = base[shapes.pattern[owner]] + np.arange(len(owner)) - flat.start[owner]
    msg, up, w = flat.msg[shapes.canon], shapes.up, flat.probability[owner]
    parent = msg[np.where(up >= 0, flat.start[owner] + up, 0)]
    node = np.where((up < 0) | nil_send[msg], np.nan, out_t[msg] - in_t[parent])
    columns = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for v in (node, network[msg]):
            known = np.isfinite(v)  # the unknown add 0.0: no change to any sum
            columns.append((np.bincount(hop, np.where(known, w * v, 0.0), n_hops)
                            / np.bincount(hop, np.where(known, w, 0.0), n_hops)).tolist())
    on = on[shapes.canon]
    of = np.repeat(np.arange(len(size)), size)
    critical = np.bincount(hop[on], w[on], n_hops) / np.where(score > 0, score, np.nan)[of]
    at = flat.start[shapes.first][of] + np.arange(n_hops) - base[of]  # the first instance's
    rank, up = names.rank[msg[at]], up[at]
    n_texts = len(names.texts)
    pieces = _texts((up + 1) * n_texts + rank,
                    lambda c: f"{c // n_texts - 1}:{names.texts[c % n_texts]}")
    every = list(map(Hop, np.array(names.texts, dtype=object)[rank].tolist(), up.tolist(),
                     _texts(names.link[msg[at]], names.link_text), *columns,
                     critical.tolist(), names.reply[msg[at]].tolist()))
    ends = base.tolist()
    spans = list(pairwise(ends))
    return [" ".join(pieces[a:b]) for a, b in spans], [tuple(every[a:b]) for a, b in spans]


def _crossings(flat: _Flat, pattern: np.ndarray, names: PatternNames, on: np.ndarray,
               score: np.ndarray) -> list[dict[str, float]]:
    """Per pattern, each host link's mean crossings on the critical path, by link: every
    instance adds its probability times its count, in the instances' order. A message that
    opened its connection adds the set-up's crossings (`Trace.set_up_crossings`). A message
    between two processes of one host (over loopback) crosses no link."""
    n_hosts = len(names.hosts)
    at = np.flatnonzero(on)
    at = at[names.link[flat.msg[at]] % (n_hosts + 1) != 0]  # within one host: no link crossed
    msg, owner = flat.msg[at], flat.owner[at]
    forward = names.link[msg]
    back = forward % n_hosts * n_hosts + forward // n_hosts
    same, other = names.set_up[0][msg], names.set_up[1][msg]
    s, o = same > 0, other > 0
    codes, code = _dense(np.concatenate([forward, forward[s], back[o]]), n_hosts ** 2)
    owner = np.concatenate([owner, owner[s], owner[o]])
    weight = np.concatenate([np.ones(len(at)), same[s], other[o]])
    texts = [names.link_text(c) for c in codes.tolist()]
    order = sorted(set(texts))  # links by their text (hosts' names could repeat one)
    rank_of = {t: i for i, t in enumerate(order)}
    link = np.array([rank_of[t] for t in texts], dtype=np.int64)[code]
    n_links = len(order)
    pairs, which = np.unique(owner * n_links + link, return_inverse=True)
    k = np.bincount(which.ravel(), weight, minlength=len(pairs))
    inst = pairs // n_links
    cells, cell = np.unique(pattern[inst] * n_links + pairs % n_links, return_inverse=True)
    of = cells // n_links
    mean = (np.bincount(cell.ravel(), flat.probability[inst] * k)
            / np.where(score > 0, score, np.nan)[of]).tolist()
    items = list(zip(np.array(order, dtype=object)[cells % n_links].tolist(), mean,
                     strict=True))
    return [dict(items[a:b]) for a, b in pairwise(np.searchsorted(of, np.arange(len(score) + 1))
                                                  .tolist())]


def _texts(codes: np.ndarray, text_of: Callable[[int], str]) -> list[str]:
    """text_of(code) per code, built once per distinct code."""
    unique, inverse = _dense(codes, int(codes.max()) + 1)
    return np.array([text_of(c) for c in unique.tolist()], dtype=object)[inverse].tolist()

"""Clock offsets between traced hosts from the messages themselves (WAP5 §5.2, after Paxson,
"On calibrating measurements of packet transit times", SIGMETRICS 1998).

A message a→b shows recv_b − send_a = delay_ab + (θ_b − θ_a), θ being each host's clock
error. With the network's least delays equal both ways, the least of each direction gives
θ_b − θ_a = (min_ab − min_ba) / 2. Every pair of hosts with messages both ways is one such
equation; the offsets are their least-squares solution with the first host's θ = 0 (each
connected set of hosts gets its own reference). Skew (clock rates) is ignored, as WAP5 does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from linkgrad.paths.messages import Trace

__all__ = ["ClockOffsets", "clock_offsets"]


@dataclass(frozen=True, eq=False)
class ClockOffsets:
    """offset_s[h]: host h's clock minus its reference host's (NaN: no estimate, no message
    both ways with a traced host); reference[h]: that host (−1 with no estimate);
    pairs: the (a, b, θ_b − θ_a, messages a→b, messages b→a) each estimate rests on."""

    offset_s: np.ndarray
    reference: np.ndarray
    pairs: tuple[tuple[int, int, float, int, int], ...]

    def network_delay_s(self, trace: Trace) -> np.ndarray:
        """Per message, receive minus send time with the two clocks' offset taken out (NaN
        where a timestamp is nil or an offset unknown)."""
        m = trace.messages
        a, b = trace.src_host(), trace.dst_host()
        raw = m.recv_s - m.send_s
        known = (self.reference[a] == self.reference[b]) & (self.reference[a] >= 0)
        corrected = np.where(known, raw - (self.offset_s[b] - self.offset_s[a]), np.nan)
        return np.where(a == b, raw, corrected)


def clock_offsets(trace: Trace) -> ClockOffsets:
    """Each host's clock offset from the messages seen both ways between hosts."""
    n_hosts = len(trace.hosts)
    m = trace.messages
    a, b = trace.src_host().astype(np.int64), trace.dst_host().astype(np.int64)
    one_way = m.recv_s - m.send_s
    ok = np.isfinite(one_way) & (a != b)
    least = np.full(n_hosts * n_hosts, np.inf)
    np.minimum.at(least, a[ok] * n_hosts + b[ok], one_way[ok])
    count = np.bincount(a[ok] * n_hosts + b[ok], minlength=n_hosts * n_hosts)
    least = least.reshape(n_hosts, n_hosts)
    count = count.reshape(n_hosts, n_hosts)
    pairs = [(i, j, float(least[i, j] - least[j, i]) / 2, int(count[i, j]), int(count[j, i]))
             for i in range(n_hosts) for j in range(i + 1, n_hosts)
             if count[i, j] and count[j, i]]
    offset, reference = _solve(n_hosts, pairs)
    return ClockOffsets(offset, reference, tuple(pairs))


def _solve(n_hosts: int, pairs: list[tuple[int, int, float, int, int]]
           ) -> tuple[np.ndarray, np.ndarray]:
    """Least squares per connected component of the pair graph, its lowest host at 0."""
    reference = np.full(n_hosts, -1, dtype=np.int64)
    offset = np.full(n_hosts, np.nan)
    neighbours: dict[int, list[int]] = {}
    for i, j, *_ in pairs:
        neighbours.setdefault(i, []).append(j)
        neighbours.setdefault(j, []).append(i)
    for start in sorted(neighbours):
        if reference[start] >= 0:
            continue
        component, todo = [], [start]
        reference[start] = start
        while todo:
            h = todo.pop()
            component.append(h)
            for k in neighbours[h]:
                if reference[k] < 0:
                    reference[k] = start
                    todo.append(k)
        column = {h: c for c, h in enumerate(sorted(component))}
        rows = [(i, j, d) for i, j, d, *_ in pairs if i in column]
        system = np.zeros((len(rows) + 1, len(column)))
        rhs = np.zeros(len(rows) + 1)
        for r, (i, j, d) in enumerate(rows):
            system[r, column[j]], system[r, column[i]], rhs[r] = 1.0, -1.0, d
        system[-1, column[start]] = 1.0  # the reference's own offset is 0
        solution = np.linalg.lstsq(system, rhs, rcond=None)[0]
        for h, c in column.items():
            offset[h] = solution[c]
    return offset, reference

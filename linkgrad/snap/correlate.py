"""SNAP's correlation across connections sharing a resource (§2.3, Average Correlation
Coefficient).

Per connection c, the performance vector P_T(c, t) holds, for each aggregation bin k of width t
in the window T and each of the five problems p1..p5 (footnote 4: not app-limited), the time c
had that problem in bin k. A set S of connections has a common problem when the mean Pearson
correlation over its pairs (ACC) exceeds α. The groups are the hosts a socket sends from and
into, the path (host pair, one way) and the application process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from linkgrad.snap.classify import PROBLEMS, Classes

__all__ = [
    "CONSTANT_RTOL",
    "MAX_CELLS",
    "PerformanceVectors",
    "ResourceScore",
    "average_correlation",
    "performance_vectors",
    "rank_resources",
    "shared_resources",
]

# The largest vector store performance_vectors builds (256 MiB of float64; about four times
# that at the peak while building): more is a window too long for its bin width.
MAX_CELLS = 1 << 25
# A vector whose spread is this small relative to its size is constant (rounding, not signal).
CONSTANT_RTOL = 1e-12


@dataclass(frozen=True, eq=False)
class PerformanceVectors:
    """P_T(c, t) of §2.3 for each connection observed in the window [from_s, from_s + T).

    connections: sorted connection ids, one per vector.
    seconds: (connections, bins, 5) time with each problem (PROBLEMS order) in each bin.
    """

    connections: np.ndarray
    seconds: np.ndarray
    from_s: float
    aggregation_s: float

    def rows(self, ids: Sequence[int]) -> np.ndarray:
        """Positions of those `ids` that were observed in the window (others are left out)."""
        ids = np.asarray(ids, dtype=np.int64)
        at = np.searchsorted(self.connections, ids)
        found = at < len(self.connections)
        found[found] = self.connections[at[found]] == ids[found]
        return np.unique(at[found])


def performance_vectors(classes: Classes, connection: ArrayLike, start_s: ArrayLike,
                        end_s: ArrayLike, *, from_s: float, to_s: float,
                        aggregation_s: float = 2.0) -> PerformanceVectors:
    """Build P_T(c, t) (§2.3) from classified intervals, one row per (connection, interval).

    An interval flagged with a problem adds its overlap with each bin it spans; the last bin
    is shorter when T is no multiple of t. A connection with no interval overlapping the
    window is left out: unobserved is not healthy.
    """
    _check_window(from_s, to_s, aggregation_s)
    connection = np.asarray(connection, dtype=np.int64)
    start, end = np.asarray(start_s, dtype=float), np.asarray(end_s, dtype=float)
    _check_rows(len(classes), connection=connection, start_s=start, end_s=end)
    inside = (end > from_s) & (start < to_s)
    ids, conn = np.unique(connection[inside], return_inverse=True)
    n_bins = max(1, math.ceil((to_s - from_s) / aggregation_s - 1e-9))  # not 3.0000001 → 4
    if len(ids) * n_bins * len(PROBLEMS) > MAX_CELLS:
        raise ValueError(f"{len(ids)} connections × {n_bins} bins × {len(PROBLEMS)} problems "
                         f"exceed {MAX_CELLS} cells: widen aggregation_s or shorten the window")
    problems = classes.problem_matrix()[inside]
    sick = problems.any(axis=1)  # healthy rows add nothing: skip them (most rows, usually)
    s = np.clip(start[inside][sick], from_s, to_s)
    e = np.clip(end[inside][sick], from_s, to_s)
    seconds = _bin_overlaps(conn[sick], s, e, problems[sick].astype(float), len(ids), n_bins,
                            from_s, aggregation_s)
    return PerformanceVectors(ids, seconds, float(from_s), float(aggregation_s))


def _bin_overlaps(conn: np.ndarray, s: np.ndarray, e: np.ndarray, flags: np.ndarray,
                  n_conn: int, n_bins: int, from_s: float, t: float) -> np.ndarray:
    """Overlap of each [s, e) with each bin, summed per (connection, bin, problem).

    Each interval adds its partial first and last bins directly and its full bins in between
    as +t at the first full bin and −t after the last, summed up by a cumulative sum: cost in
    rows plus cells, however many bins an interval spans. Column n_bins absorbs e == to_s.
    """
    first_bin = np.minimum(np.floor((s - from_s) / t), n_bins - 1).astype(np.int64)
    last_bin = np.maximum(np.minimum(np.floor((e - from_s) / t), n_bins).astype(np.int64),
                          first_bin)
    spans = last_bin > first_bin
    head = np.minimum(e, from_s + (first_bin + 1) * t) - s
    tail = np.where(spans, e - (from_s + last_bin * t), 0.0)
    shape = (n_conn, n_bins + 1, flags.shape[1])
    partial = _scatter(shape, conn, first_bin, np.maximum(head, 0.0)[:, None] * flags)
    partial += _scatter(shape, conn, last_bin, np.maximum(tail, 0.0)[:, None] * flags)
    full = flags[spans] * t
    steps = _scatter(shape, conn[spans], first_bin[spans] + 1, full)
    steps -= _scatter(shape, conn[spans], last_bin[spans], full)
    return (partial + np.cumsum(steps, axis=1))[:, :n_bins]


def _scatter(shape: tuple[int, int, int], conn: np.ndarray, bin_: np.ndarray,
             values: np.ndarray) -> np.ndarray:
    """Sum `values` (rows, problems) into an array of `shape` at (conn, bin_) per row."""
    cell = conn * shape[1] + bin_
    columns = [np.bincount(cell, weights=values[:, p], minlength=shape[0] * shape[1])
               for p in range(shape[2])]  # bincount: far faster than np.add.at
    return np.stack(columns, axis=-1).reshape(shape)


def average_correlation(vectors: ArrayLike) -> float | None:
    """ACC of §2.3: the mean Pearson correlation over all pairs of rows of `vectors`.

    Pearson's r is the standard one, Σ(x−x̄)(y−ȳ) / √(Σ(x−x̄)²·Σ(y−ȳ)²); the paper's printed
    denominator, √Σ(x−x̄)²(y−ȳ)², is a typo. With each row standardised to z (centred, unit
    norm), r(i, j) = z_i·z_j and the sum over pairs i ≠ j is |Σz|² − Σ|z|², so the mean over
    n(n−1) ordered pairs (the same as over unordered ones) costs O(n·len), not O(n²·len):
    10,000 connections are 5·10⁷ pairs.

    A constant row (a connection always healthy: all zeros) has no defined correlation; its z
    is 0, so each of its pairs counts 0, "no common problem", and an all-healthy set scores 0.
    None for fewer than two rows: a set of one has no pairs.
    """
    x = np.asarray(vectors, dtype=float)
    if x.ndim < 2:
        raise ValueError(f"vectors must have one row per connection, got shape {x.shape}")
    n = len(x)
    if n < 2:
        return None
    x = x.reshape(n, -1)  # (connections, bins, problems) -> one vector per connection
    centred = x - x.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(centred, axis=1)
    constant = norms <= CONSTANT_RTOL * np.linalg.norm(x, axis=1)
    z = np.divide(centred, norms[:, None], out=np.zeros_like(centred),
                  where=~constant[:, None])
    total = z.sum(axis=0)
    pair_sum = total @ total - np.einsum("ij,ij->", z, z)
    return float(pair_sum / (n * (n - 1)))


@dataclass(frozen=True)
class ResourceScore:
    """One shared resource: its connections observed in the window, their ACC, the time
    summed over them with each problem, and whether ACC > α (a common problem, §2.3)."""

    resource: str
    kind: str
    connections: tuple[int, ...]
    acc: float | None
    problems: dict[str, float]
    above_alpha: bool


def rank_resources(groups: Mapping[str, Sequence[int]], vectors: PerformanceVectors,
                   alpha: float = 0.4) -> list[ResourceScore]:
    """Score every group (name "kind:what", from `shared_resources`) by ACC, highest first
    and groups with no ACC last; α = 0.4 as in §4.1."""
    if not (math.isfinite(alpha) and -1.0 <= alpha <= 1.0):
        raise ValueError(f"{alpha=} must be a correlation, in [-1, 1]")
    scores = [_score(name, ids, vectors, alpha) for name, ids in groups.items()]
    return sorted(scores, key=lambda r: (r.acc is None, -(r.acc or 0.0), r.resource))


def _score(name: str, ids: Sequence[int], vectors: PerformanceVectors,
           alpha: float) -> ResourceScore:
    rows = vectors.rows(ids)
    seconds = vectors.seconds[rows]
    acc = average_correlation(seconds)
    totals = seconds.sum(axis=(0, 1))
    return ResourceScore(resource=name, kind=name.partition(":")[0],
                         connections=tuple(vectors.connections[rows].tolist()), acc=acc,
                         problems={p: float(v) for p, v in zip(PROBLEMS, totals, strict=True)},
                         above_alpha=acc is not None and acc > alpha)


def shared_resources(conn_host: Mapping[int, str], conn_peer: Mapping[int, str],
                     conn_process: Mapping[int, str]) -> dict[str, list[int]]:
    """SNAP's sets S (§2.3) from connection id -> the host sending on it, the host it sends
    to, and the sending process.

    Table 2 judges a socket as a sender (its send buffer, its retransmissions, the RTT and
    window its peer gives it), so each socket is evidence about the direction it sends:
    "from:H" holds the sockets H sends on (a host short of send buffer), "to:H" those that
    send into H (a congested link into it, an incast, a starved receiver), "path:A->B" those
    from A to B (without topology, a host pair stands for the path), "process:P" P's. Grouping
    both ends of each connection under a host instead adds the receiving end's zero vector
    to every pair and cuts ACC about four times (benchmarks/snap_correlation.py: 0.14 against
    0.58 for loss into one host). A missing or empty peer or process leaves the socket out of
    those groups.
    """
    groups: dict[str, list[int]] = {}
    for conn, host in conn_host.items():
        peer, process = conn_peer.get(conn), conn_process.get(conn)
        names = [f"from:{host}"]
        if peer:
            names += [f"to:{peer}", f"path:{host}->{peer}"]
        if process:
            names.append(f"process:{process}")
        for name in names:
            groups.setdefault(name, []).append(int(conn))
    return groups


def _check_window(from_s: float, to_s: float, aggregation_s: float) -> None:
    if not (math.isfinite(aggregation_s) and aggregation_s > 0):
        raise ValueError(f"{aggregation_s=} must be positive and finite")
    if not (math.isfinite(from_s) and math.isfinite(to_s) and to_s > from_s):
        raise ValueError(f"the window [{from_s=}, {to_s=}) must be finite and not empty")


def _check_rows(n: int, **columns: np.ndarray) -> None:
    for name, column in columns.items():
        if column.shape != (n,):
            raise ValueError(f"{name} has shape {column.shape}, expected ({n},) like classes")
    bad = ~(np.isfinite(columns["start_s"]) & np.isfinite(columns["end_s"]))
    if bad.any():
        raise ValueError(f"start_s/end_s not finite at rows {np.flatnonzero(bad)[:5].tolist()}")
    if (columns["end_s"] < columns["start_s"]).any():
        raise ValueError("end_s < start_s in some rows")

"""The packet trace of benchmarks/snap_delayed_ack.py: each client data segment's ACK delay,
the truth d_t, and §4.2's count on the trace's own RTT sum (pure: a pcap in, numbers out)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scapy.layers.inet import IP, TCP
from scapy.utils import PcapReader

from linkgrad.snap.classify import SnapThresholds, delayed_ack_count
from linkgrad.snap.intervals import IntervalStats

# the ACK-delay histogram's bin edges, ms
HISTOGRAM_MS = (0, 0.1, 0.3, 1, 3, 10, 20, 30, 36, 40, 44, 48, 60, 100, 200, 1e9)
SENSITIVITY_MS = (3, 10, 20, 30, 36, 40)  # d_t at these thresholds too


@dataclass(frozen=True, eq=False)
class Segments:
    """TCP segments of one connection in capture order: times (s), who sent them, sequence
    and acknowledgement numbers as offsets in the client's sequence space (the client's seq,
    the server's ack; the others are not used), payload bytes, the ACK flag."""

    time_s: np.ndarray
    from_client: np.ndarray
    seq: np.ndarray
    ack: np.ndarray
    payload: np.ndarray
    has_ack: np.ndarray


def read_pcap(path: Path, client: tuple[str, int], server: tuple[str, int]) -> Segments:
    """The connection's segments in the pcap (scapy's IP and TCP layers; the payload from the
    IP total length, since a short frame may carry Ethernet padding)."""
    rows = []
    with PcapReader(str(path)) as packets:
        for p in packets:
            if IP not in p or TCP not in p:
                continue
            ip, tcp = p[IP], p[TCP]
            src, dst = (ip.src, tcp.sport), (ip.dst, tcp.dport)
            if {src, dst} != {client, server}:
                continue
            rows.append((float(p.time), src == client, tcp.seq, tcp.ack,
                         ip.len - 4 * ip.ihl - 4 * tcp.dataofs, bool(tcp.flags.A)))
    t, out, seq, ack, payload, has_ack = (np.array(c) for c in zip(*rows, strict=True))
    # the client's sequence space: its own seq numbers, the server's ack numbers
    origin = int(seq[out][0])
    return Segments(t, out, _unwrap(seq, origin), _unwrap(ack, origin), payload, has_ack)


def _unwrap(numbers: np.ndarray, origin: int) -> np.ndarray:
    """32-bit sequence numbers as signed offsets from `origin` (a connection of this length
    moves far less than 2 GB)."""
    offset = (numbers.astype(np.int64) - origin) % (1 << 32)
    return np.where(offset >= 1 << 31, offset - (1 << 32), offset)


@dataclass(frozen=True, eq=False)
class AckDelays:
    """Each client data segment: when it left, how long its ACK took (NaN: never acked in the
    trace), and whether that ACK carried data (piggybacked on a reply)."""

    sent_s: np.ndarray
    delay_s: np.ndarray
    piggybacked: np.ndarray
    retransmitted: int


def ack_delays(s: Segments) -> AckDelays:
    """The first server segment after each client data segment whose ACK covers its end. The
    server's acks only grow, so two searches find it (vectorised, no per-segment loop)."""
    data = s.from_client & (s.payload > 0)
    back = ~s.from_client & s.has_ack
    # the client's ack numbers are of the server's sequence space and vice versa
    sent, end = s.time_s[data], s.seq[data] + s.payload[data]
    t_back, acks = s.time_s[back], np.maximum.accumulate(s.ack[back])
    j = np.maximum(np.searchsorted(t_back, sent, side="right"),
                   np.searchsorted(acks, end, side="left"))
    acked = j < len(t_back)
    delay = np.full(len(sent), np.nan)
    delay[acked] = t_back[j[acked]] - sent[acked]
    piggy = np.zeros(len(sent), bool)
    piggy[acked] = s.payload[back][j[acked]] > 0
    seqs = s.seq[data]
    return AckDelays(sent, delay, piggy, int(len(seqs) - len(np.unique(seqs))))


def histogram(delay_s: np.ndarray) -> list[dict[str, Any]]:
    edges = np.array(HISTOGRAM_MS) / 1e3
    counts, _ = np.histogram(delay_s[~np.isnan(delay_s)], bins=edges)
    return [{"from_ms": lo, "to_ms": hi if hi < 1e9 else None, "count": int(n)}
            for lo, hi, n in zip(HISTOGRAM_MS[:-1], HISTOGRAM_MS[1:], counts, strict=True)]


def srtt_replay(sent_s: np.ndarray, delay_s: np.ndarray) -> dict[str, float]:
    """The kernel's smoothed RTT (tcp_rtt_estimator: first sample, then srtt += (m − srtt)/8)
    replayed over the trace's RTT samples in ACK order: its time average over the run (what
    polls at Poisson times see, PASTA) beside the samples' mean (what SumRTT / SampleRTT is)."""
    ok = ~np.isnan(delay_s)
    at, m = sent_s[ok] + delay_s[ok], delay_s[ok]
    order = np.argsort(at)
    at, m = at[order], m[order]
    srtt = np.empty(len(m))
    value = m[0]
    for i, sample in enumerate(m):  # a recurrence: sequential by nature, ~10^4 samples
        value = sample if i == 0 else value + (sample - value) / 8
        srtt[i] = value
    held = np.diff(at)  # srtt[i] holds from at[i] to at[i+1]
    return {"sample_mean_s": float(m.mean()),
            "srtt_time_mean_s": float(np.sum(srtt[:-1] * held) / np.sum(held)),
            "srtt_sample_mean_s": float(srtt.mean())}


def formula_on_trace(delay_s: np.ndarray, thresholds: SnapThresholds) -> float:
    """The shipped count (`delayed_ack_count`) per segment with the trace's own SumRTT and
    SampleRTT (one sample per segment, its ACK delay) and its least delay as min_rtt, the run
    as one interval: what an RTT tracer would give."""
    d = delay_s[~np.isnan(delay_s)]
    stats = IntervalStats.from_columns({
        "start_s": [0.0], "end_s": [1.0], "rtt_sum_us": [d.sum() * 1e6],
        "rtt_samples": [float(len(d))], "min_rtt_us": [d.min() * 1e6],
        "data_segs_out": [float(len(d))]})
    return float(delayed_ack_count(stats, thresholds)[0]) / len(d)


def truth(delays: AckDelays, threshold_s: float) -> dict[str, Any]:
    d = delays.delay_s
    ok = ~np.isnan(d)
    late = ok & (d >= threshold_s)
    early = ok & (d < threshold_s)
    return {"data_segments": len(d), "acked": int(ok.sum()), "late": int(late.sum()),
            "retransmitted": delays.retransmitted,
            "d_t": float(late.sum() / ok.sum()),
            "d_t_by_threshold_ms": {f"{ms:g}": float((ok & (d >= ms / 1e3)).sum() / ok.sum())
                                    for ms in SENSITIVITY_MS},
            "late_piggybacked": int((late & delays.piggybacked).sum()),
            "early_piggybacked": int((early & delays.piggybacked).sum()),
            "late_mean_ms": float(d[late].mean() * 1e3) if late.any() else None,
            "late_ms": quantiles(d[late]), "early_ms": quantiles(d[early]),
            "histogram": histogram(d), "srtt_replay": srtt_replay(delays.sent_s, d)}


def matched_thresholds(true: dict[str, Any], max_queuing_s: float,
                       shipped: SnapThresholds) -> SnapThresholds:
    """The diagnosis's thresholds: Table 2's MaxQueuingDelay this path's (the veth queues µs),
    and DelayedACKTimeout the delayed segments' measured mean ACK delay (what §4.2's division
    assumes each one adds; the shipped one where nothing was late); the charge per sample
    as shipped."""
    late_ms = true["late_mean_ms"]
    return SnapThresholds(max_queuing_delay_s=max_queuing_s,
                          delayed_ack_timeout_s=late_ms / 1e3 if late_ms
                          else shipped.delayed_ack_timeout_s,
                          small_write_fraction=shipped.small_write_fraction,
                          queuing_delay_s=shipped.queuing_delay_s)


def quantiles(x: np.ndarray) -> dict[str, float] | None:
    if not len(x):
        return None
    q = np.percentile(x, [0, 1, 50, 99, 100]) * 1e3
    return dict(zip(("min", "p1", "median", "p99", "max"), q.tolist(), strict=True))

"""The layout of the kernel's `struct tcp_info` (include/uapi/linux/tcp.h), version by version,
as numpy dtypes: one dtype per length the kernel returns, holding exactly the fields that length
covers, so a batch of sockets parses in one `np.frombuffer` and an older kernel gives fewer
fields, never garbage (the struct only grows at its end; the netlink attribute says how much
the kernel filled).

pyroute2's parser stops at the 5.4 layout (`snd_wnd`) and misses what SNAP needs most on
Linux: `total_rto` (6.7). Field names drop the `tcpi_` prefix.
"""

from __future__ import annotations

from functools import cache

import numpy as np

# (name, numpy type, offset, first kernel): the kernel release that added each field, from
# the log of include/uapi/linux/tcp.h (tcp_info's fields by kernel version).
# Bytes 6 and 7 are bitfields: `wscale` (snd low nibble, rcv high nibble) and `flags`
# (bit 0 delivery_rate_app_limited, 4.9; bits 1-2 fastopen_client_fail, 5.5).
_U8 = ("state", "ca_state", "retransmits", "probes", "backoff", "options", "wscale", "flags")
_U32_BASE = ("rto", "ato", "snd_mss", "rcv_mss", "unacked", "sacked", "lost", "retrans",
             "fackets", "last_data_sent", "last_ack_sent", "last_data_recv", "last_ack_recv",
             "pmtu", "rcv_ssthresh", "rtt", "rttvar", "snd_ssthresh", "snd_cwnd", "advmss",
             "reordering", "rcv_rtt", "rcv_space", "total_retrans")
_LATER: tuple[tuple[str, str, str], ...] = (
    ("pacing_rate", "u8", "3.15"), ("max_pacing_rate", "u8", "3.15"),
    ("bytes_acked", "u8", "4.1"), ("bytes_received", "u8", "4.1"),
    ("segs_out", "u4", "4.2"), ("segs_in", "u4", "4.2"),
    ("notsent_bytes", "u4", "4.6"), ("min_rtt", "u4", "4.6"),
    ("data_segs_in", "u4", "4.6"), ("data_segs_out", "u4", "4.6"),
    ("delivery_rate", "u8", "4.9"),
    ("busy_time", "u8", "4.10"), ("rwnd_limited", "u8", "4.10"),
    ("sndbuf_limited", "u8", "4.10"),
    ("delivered", "u4", "4.18"), ("delivered_ce", "u4", "4.18"),
    ("bytes_sent", "u8", "4.19"), ("bytes_retrans", "u8", "4.19"),
    ("dsack_dups", "u4", "4.19"), ("reord_seen", "u4", "4.19"),
    ("rcv_ooopack", "u4", "5.4"), ("snd_wnd", "u4", "5.4"),
    ("rcv_wnd", "u4", "6.2"), ("rehash", "u4", "6.2"),
    ("total_rto", "u2", "6.7"), ("total_rto_recoveries", "u2", "6.7"),
    ("total_rto_time", "u4", "6.7"),
    ("received_ce", "u4", "6.18"), ("delivered_e1_bytes", "u4", "6.18"),
    ("delivered_e0_bytes", "u4", "6.18"), ("delivered_ce_bytes", "u4", "6.18"),
    ("received_e1_bytes", "u4", "6.18"), ("received_e0_bytes", "u4", "6.18"),
    ("received_ce_bytes", "u4", "6.18"), ("accecn_flags", "u4", "6.18"),
)


def _layout() -> tuple[tuple[str, str, int, str], ...]:
    fields = [(name, "u1", i, "2.6") for i, name in enumerate(_U8)]
    fields += [(name, "u4", 8 + 4 * i, "2.6") for i, name in enumerate(_U32_BASE)]
    offset = 8 + 4 * len(_U32_BASE)
    for name, kind, since in _LATER:
        size = int(kind[1])
        offset += -offset % size  # natural alignment, as the C compiler lays it out
        fields.append((name, kind, offset, since))
        offset += size
    return tuple(fields)


LAYOUT = _layout()
FULL_SIZE = LAYOUT[-1][2] + int(LAYOUT[-1][1][1])  # 280 bytes on 6.18
SINCE = {name: since for name, _, _, since in LAYOUT}


@cache
def dtype_for(length: int) -> np.dtype:
    """The fields a `length`-byte tcp_info holds, at their offsets, in native byte order."""
    if length <= 0:
        raise ValueError(f"{length=} must be positive")
    kept = [(n, k, o) for n, k, o, _ in LAYOUT if o + int(k[1]) <= length]
    return np.dtype({"names": [n for n, _, _ in kept], "formats": ["=" + k for _, k, _ in kept],
                     "offsets": [o for _, _, o in kept], "itemsize": length})


def parse(blobs: bytes, length: int) -> np.ndarray:
    """`len(blobs) // length` tcp_info payloads of `length` bytes each, laid end to end, as one
    structured array."""
    if len(blobs) % length:
        raise ValueError(f"{len(blobs)=} is not a multiple of {length=}")
    return np.frombuffer(blobs, dtype=dtype_for(length))


def has(info: np.ndarray, name: str) -> bool:
    """Whether the kernel filled field `name` (false on kernels older than `SINCE[name]`)."""
    return info.dtype.names is not None and name in info.dtype.names

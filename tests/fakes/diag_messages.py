"""sock_diag replies as the kernel sends them, built from fields: what the raw parser
(`sniffer.sockdiag`) is tested on without a kernel, for any tcp_info length (older kernels)."""

from __future__ import annotations

import ipaddress
import socket
import struct

import numpy as np

from sniffer import tcp_info
from sniffer.sockdiag import DIAG_MSG, INET_DIAG_INFO, INET_DIAG_SKMEMINFO, SOCK_DIAG_BY_FAMILY


def _raw(addr: str) -> bytes:
    return ipaddress.ip_address(addr).packed.ljust(16, b"\0")


def _attribute(kind: int, payload: bytes) -> bytes:
    size = 4 + len(payload)
    return struct.pack("=HH", size, kind) + payload + bytes(-size % 4)


def diag_message(src: str, sport: int, dst: str, dport: int, *, inode: int = 1,
                 state: int = 1, cookie: int = 1, info: dict[str, int] | None = None,
                 info_len: int = tcp_info.FULL_SIZE, skmem: tuple[int, ...] | None = None,
                 family: int | None = None, seq: int = 0) -> bytes:
    """One SOCK_DIAG_BY_FAMILY message; `info` None: no INET_DIAG_INFO (TIME_WAIT)."""
    if family is None:
        family = socket.AF_INET6 if ":" in src else socket.AF_INET
    header = np.zeros(1, dtype=DIAG_MSG)
    header[0] = (family, state, 0, 0, sport, dport, _raw(src), _raw(dst), 0, cookie, 0, 0, 0,
                 0, inode)
    body = header.tobytes()
    if info is not None:
        blob = np.zeros(1, dtype=tcp_info.dtype_for(info_len))
        for name, value in info.items():
            blob[name] = value
        body += _attribute(INET_DIAG_INFO, blob.tobytes())
    if skmem is not None:
        body += _attribute(INET_DIAG_SKMEMINFO, struct.pack(f"={len(skmem)}I", *skmem))
    return struct.pack("=IHHII", 16 + len(body), SOCK_DIAG_BY_FAMILY, 0, seq, 0) + body


def done(seq: int) -> bytes:
    return struct.pack("=IHHIIi", 20, 3, 0, seq, 0, 0)

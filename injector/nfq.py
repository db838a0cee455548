"""Binding an NFQUEUE with netfilterqueue, and setting the queue's fail-open flag.

netfilterqueue has no call for queue flags, so NFQA_CFG_F_FAIL_OPEN is sent as one raw
nfnetlink config message on the queue's own socket (the kernel only accepts a queue's config
from the socket bound to it). With it, a full queue lets packets through instead of dropping.
"""

from __future__ import annotations

import os
import socket
import struct
import warnings
from collections.abc import Callable
from typing import Any

from linkgrad.errors import RuntimeFailure

NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_CONFIG = 2
NLM_F_REQUEST = 1
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQA_CFG_F_FAIL_OPEN = 1


def fail_open_message(queue_num: int) -> bytes:
    """nlmsghdr + nfgenmsg + NFQA_CFG_MASK + NFQA_CFG_FLAGS, both FAIL_OPEN (big-endian u32)."""
    attrs = b"".join(
        struct.pack("=HH", 8, kind) + struct.pack("!I", NFQA_CFG_F_FAIL_OPEN)
        for kind in (NFQA_CFG_MASK, NFQA_CFG_FLAGS)
    )
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", queue_num) + attrs
    header = struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_CONFIG,
                         NLM_F_REQUEST, 0, 0)
    return header + body


MISSING = ("netfilterqueue is missing: a host that injects needs linkgrad's injector extra, a C "
           "build: apt install build-essential python3-dev libnetfilter-queue-dev, then pip "
           "install 'linkgrad[injector]' (scripts/setup does both)")


def require_netfilterqueue() -> None:
    """RuntimeFailure saying exactly what to install if netfilterqueue cannot be imported (it
    is an extra: a coordinator or a notebook needs no compiler)."""
    try:
        import netfilterqueue  # noqa: F401
    except ImportError as e:
        raise RuntimeFailure(f"{MISSING} ({e})") from e


def bind_queue(queue_num: int, callback: Callable[[Any], None], max_len: int = 4096) -> Any:
    """A bound NetfilterQueue with fail-open set; clear errors for the usual failures."""
    require_netfilterqueue()
    from netfilterqueue import NetfilterQueue
    queue = NetfilterQueue()
    with warnings.catch_warnings(record=True):  # rcvbuf capped by net.core.rmem_max: harmless
        warnings.simplefilter("always")
        try:
            queue.bind(queue_num, callback, max_len=max_len)
        except OSError as e:
            raise RuntimeFailure(
                f"cannot bind NFQUEUE {queue_num}: it is in use by another process, or this "
                "is not root (CAP_NET_ADMIN)") from e
    sock = socket.socket(fileno=os.dup(queue.get_fd()))  # the same socket, hence portid
    try:
        sock.send(fail_open_message(queue_num))
    finally:
        sock.close()
    return queue


NFQNL_MSG_VERDICT_BATCH = 3
NFQA_VERDICT_HDR = 2
NF_ACCEPT = 1


def accept_batch_message(queue_num: int, max_id: int) -> bytes:
    """A batch verdict: accept every packet of the queue whose id is `max_id` or before it
    (the kernel compares ids modulo 2^32, so the newest id covers every one waiting).

    The kernel takes it only from the socket bound to the queue; a process that holds that
    socket's file (passed over a Unix socket) is that socket, so the watchdog can send it
    while the daemon is stopped."""
    attr = struct.pack("=HH", 12, NFQA_VERDICT_HDR) + struct.pack("!II", NF_ACCEPT,
                                                                  max_id & 0xFFFFFFFF)
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", queue_num) + attr
    header = struct.pack("=IHHII", 16 + len(body),
                         (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT_BATCH, NLM_F_REQUEST, 0, 0)
    return header + body

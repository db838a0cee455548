"""A disk-to-disk transfer of linkgrad's own over TCP, with calipers on each resource (Kissel
et al. §V.C, as their instrumented GridFTP): disk read and network send on the sender, network
receive and disk write on the receiver. One JSON line per interval and side: each resource's
calipers over that interval (`linkgrad.bottleneck` reads their mean rates), then a last line.

The disks are read and written with O_DIRECT, so a disk's own speed is measured rather than the
page cache's (and the blkio throttle of a host's cgroup applies: it limits direct I/O). Where
the file system refuses O_DIRECT (tmpfs), the line says so and the cache is used.

    python -m sniffer.transfer receive --port P --path FILE [--interval-s 1]
    python -m sniffer.transfer send --to ADDR:PORT --path FILE [--size BYTES] [--interval-s 1]
"""

from __future__ import annotations

import argparse
import errno
import json
import mmap
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from linkgrad.calipers import Calipers

__all__ = ["BLOCK", "Meter", "main", "receive", "send"]

BLOCK = 1 << 20  # bytes per read and write: GridFTP's 256 KiB ×4, a multiple of any sector
ALIGN = 4096  # O_DIRECT's buffer, offset and length alignment (a page covers every sector)


class Meter:
    """Per-resource calipers, emitted as one line every interval and at the end."""

    def __init__(self, side: str, resources: tuple[str, ...], out: IO[str], interval_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.side, self.resources, self.out, self.interval_s = side, resources, out, interval_s
        self.clock = clock
        self.calipers = {r: Calipers() for r in resources}
        self.since = clock()
        self.notes: list[str] = []

    def time(self, resource: str, nbytes: int, start_s: float, end_s: float) -> None:
        self.calipers[resource].time(float(nbytes), start_s, end_s)
        if end_s - self.since >= self.interval_s:
            self.emit()

    def emit(self, event: str = "calipers", **extra: object) -> None:
        now = self.clock()
        line = {"event": event, "side": self.side, "from_s": self.since, "to_s": now,
                "resources": {r: c.summary().model_dump() for r, c in self.calipers.items()},
                **({"notes": self.notes} if self.notes else {}), **extra}
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()
        self.calipers = {r: Calipers() for r in self.resources}
        self.since = now


def _open_direct(path: Path, flags: int, meter: Meter) -> tuple[int, bool]:
    try:
        return os.open(path, flags | os.O_DIRECT, 0o600), True
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        meter.notes.append(f"{path}: the file system refuses O_DIRECT: the page cache is "
                           "measured, not the disk")
        return os.open(path, flags, 0o600), False


def _make_source(path: Path, size: int) -> None:
    """A file of `size` bytes to send, written through the cache and synced to the disk (it is
    then read back with O_DIRECT, from the disk)."""
    block = os.urandom(BLOCK)  # not zeros: nothing on the way may compress or skip them
    with path.open("wb") as f:
        left = size
        while left > 0:
            left -= f.write(block[:min(left, BLOCK)])
        f.flush()
        os.fsync(f.fileno())


def send(address: tuple[str, int], path: Path, size: int | None, out: IO[str],
         interval_s: float = 1.0) -> int:
    """Send `path` (made first, of `size` bytes, if `size` is given); the bytes sent."""
    meter = Meter("send", ("disk.read", "network.send"), out, interval_s)
    if size is not None:
        _make_source(path, size)
    total = path.stat().st_size
    fd, _ = _open_direct(path, os.O_RDONLY, meter)
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
    sent = 0
    started = time.time()
    try:
        with socket.create_connection(address, timeout=30) as sock:
            sock.sendall(total.to_bytes(8, "big"))
            while sent < total:
                t0 = time.time()
                n = os.readv(fd, [buf])
                t1 = time.time()
                if n == 0:
                    break
                meter.time("disk.read", n, t0, t1)
                sock.sendall(memoryview(buf)[:n])
                meter.time("network.send", n, t1, time.time())
                sent += n
            sock.shutdown(socket.SHUT_WR)
            sock.recv(1)  # the receiver's close: everything is on its disk
    finally:
        os.close(fd)
        buf.close()
    meter.emit("done", bytes=sent, seconds=time.time() - started)
    return sent


def receive(port: int, path: Path, out: IO[str], interval_s: float = 1.0,
            ready: Callable[[int], None] | None = None) -> int:
    """Take one transfer on `port` (0: any; `ready` gets the port) into `path`."""
    meter = Meter("receive", ("network.receive", "disk.write"), out, interval_s)
    with socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True) as srv:
        if ready is not None:
            ready(srv.getsockname()[1])
        conn, _ = srv.accept()
    fd, direct = _open_direct(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, meter)
    buf = mmap.mmap(-1, BLOCK)
    view = memoryview(buf)
    got = filled = 0
    started = time.time()
    try:
        with conn:
            total = int.from_bytes(_exactly(conn, 8), "big")
            while got < total:
                t0 = time.time()
                n = conn.recv_into(view[filled:], BLOCK - filled)
                if n == 0:
                    break
                meter.time("network.receive", n, t0, time.time())
                filled, got = filled + n, got + n
                if filled == BLOCK or got == total:
                    # O_DIRECT writes whole aligned blocks; the file is cut to size after
                    length = -(-filled // ALIGN) * ALIGN if direct else filled
                    t1 = time.time()
                    os.write(fd, view[:length])
                    meter.time("disk.write", filled, t1, time.time())
                    filled = 0
            os.ftruncate(fd, got)
            os.fsync(fd)
            conn.sendall(b"k")
    finally:
        view.release()
        buf.close()
        os.close(fd)
    meter.emit("done", bytes=got, seconds=time.time() - started)
    return got


def _exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the sender closed before saying the size")
        data += chunk
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sniffer.transfer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="side", required=True)
    r = sub.add_parser("receive")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--path", type=Path, required=True)
    s = sub.add_parser("send")
    s.add_argument("--to", required=True, metavar="ADDR:PORT")
    s.add_argument("--path", type=Path, required=True)
    s.add_argument("--size", type=int, default=None)
    for p in (r, s):
        p.add_argument("--interval-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    if args.side == "receive":
        receive(args.port, args.path, sys.stdout, args.interval_s,
                ready=lambda port: print(json.dumps({"event": "ready", "port": port}),
                                         flush=True))
    else:
        host, _, port = args.to.rpartition(":")
        send((host.strip("[]"), int(port)), args.path, args.size, sys.stdout, args.interval_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A disk-to-disk transfer of linkgrad's own over TCP, with calipers on each resource (Kissel
et al. §IV.C, as their instrumented GridFTP): disk read and network send on the sender, network
receive and disk write on the receiver, and each side's CPU. One JSON line per interval and
side (`linkgrad.protocol.transfer`): each resource's calipers over that interval, which
`linkgrad.bottleneck` tests; then a last line, or an error line.

Each side runs its disk and its network in two threads with DEPTH blocks between them, as
GridFTP overlaps them: the slowest resource is then busy all the time and the others wait for
it. (One thread doing both in turn would leave the disk idle while it sends, and an idle
throttled disk reads fast when it next runs.) What each resource is charged, so that it counts
the resource at work and not waiting for the others (the paper's *instantaneous throughput*;
`sniffer.transfer_meter` on waits for a CPU):

- disk.read, disk.write: the read or write call, with O_DIRECT, so a disk's own speed is
  measured rather than the page cache's (and the blkio throttle of a host's cgroup applies: it
  limits direct I/O). Where the file system refuses O_DIRECT (tmpfs) the line says so.
- network.receive: from the first bytes of a block being there (the wait for them is the
  sender's time) until the whole block has come: a slow network stretches it, a slow sender
  does not (it sends each block whole).
- network.send: the send call. It blocks while the receiver's window is full, so it is slow
  whenever anything after it is; shown, not tested (`linkgrad.bottleneck.UNTESTED`).
- cpu.sender, cpu.receiver: per block, both threads' time on a CPU and waiting for one.

The receiver listens on the address it is given and takes the first connection that says the
coordinator's token (`--token`, on both sides' command lines), closing any other, for up to
`--accept-timeout-s`; it refuses a size larger than `--max-bytes`. Each file is opened once
(never through a symbolic link) and used by its descriptor.

The receiver makes its file new (never over an existing one) before it says `ready`; the
sender makes its source when given `--size` and there is none (with `--new`, one that exists
is refused; without, it is sent). A file a side made is removed when the
transfer fails or is stopped (SIGTERM, SIGHUP: the lease `injector.leased` ends), and after
it succeeds with `--remove`; a file it did not make is never removed. Exit status 0 done, 2 a
path that cannot be used, 1 any other failure, each failure said in an `error` line.

    python -m sniffer.transfer receive --listen ADDR --port P --token T --path FILE
        [--max-bytes N] [--accept-timeout-s 60] [--interval-s 1] [--remove]
    python -m sniffer.transfer send --to ADDR:PORT --token T --path FILE
        [--size BYTES [--new]] [--interval-s 1] [--remove]
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hmac
import mmap
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from linkgrad.protocol.transfer import TransferFailed, TransferReady
from sniffer.transfer_files import (
    BLOCK,
    PathProblem,
    create,
    go_direct,
    open_source,
    remove_file,
    write_source,
)
from sniffer.transfer_meter import Meter, ThreadClock, write_line

__all__ = ["BLOCK", "Listen", "PathProblem", "Stopped", "main", "receive", "send"]

ALIGN = 4096  # O_DIRECT's buffer, offset and length alignment (a page covers every sector)
DEPTH = 4  # blocks in flight between a side's disk and network threads, as GridFTP keeps several
QUIET_S = 120.0  # no byte from the peer for this long: the transfer is dead
ACCEPT_TIMEOUT_S = 60.0  # default wait for the sender that has the token
TOKEN_TIMEOUT_S = 5.0  # a connection has this long to say the token, or it is closed
MAX_BYTES = 1 << 50  # the largest size a receiver takes when not told less


class Stopped(Exception):
    """SIGTERM or SIGHUP: the lease ended; files made are removed on the way out."""


def send(address: tuple[str, int], path: Path, size: int | None, out: IO[str],
         interval_s: float = 1.0, remove: bool = False, new: bool = False, *,
         token: str) -> int:
    """Send `path`, made first (`size` bytes) if it does not exist and `size` is given; with
    `new`, one that exists is refused rather than sent. `token` is said first: the receiver
    takes no transfer without it. The bytes sent."""
    meter = Meter("send", ("disk.read", "network.send"), "cpu.sender", out, interval_s)
    made = False
    try:
        if size is not None and (new or not os.path.lexists(path)):
            fd = create(path, os.O_RDWR)
            made = True  # from here on `path` is ours
            try:
                write_source(fd, size)
            except BaseException:
                os.close(fd)
                raise
        else:
            fd = open_source(path)
        sent = _send(address, fd, path, meter, token)
    except BaseException:
        if made:
            remove_file(path)
        raise
    if made and remove:
        remove_file(path)
    return sent


class _Handoff:
    """Blocks between a side's two threads: `free` buffers, `full` ones as (buffer, bytes,
    the CPU seconds the first thread spent on it). None in either queue ends the other
    thread; a worker thread's exception is kept for the main thread to raise."""

    def __init__(self) -> None:
        self.free: queue.Queue[mmap.mmap | None] = queue.Queue()
        for _ in range(DEPTH):
            self.free.put(mmap.mmap(-1, BLOCK))  # page-aligned, as O_DIRECT needs
        self.full: queue.Queue[tuple[mmap.mmap, int, float] | None] = queue.Queue()
        self.error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.free.put(None)
        self.full.put(None)

    def raise_error(self) -> None:
        raise self.error or RuntimeError("the other thread stopped")


def _send(address: tuple[str, int], fd: int, path: Path, meter: Meter, token: str) -> int:
    """The file open at `fd` sent (the descriptor is closed)."""
    handoff = _Handoff()
    sent = 0
    try:
        go_direct(fd, path, meter.notes)
        total = os.fstat(fd).st_size
        with socket.create_connection(address, timeout=QUIET_S) as sock:
            sock.sendall(token.encode() + total.to_bytes(8, "big"))
            meter.start()
            threading.Thread(target=_read_blocks, args=(fd, total, path, handoff, meter),
                             name="disk.read", daemon=True).start()
            clock = ThreadClock()
            while sent < total:
                item = handoff.full.get()  # the disk's time, not the network's
                if item is None:
                    handoff.raise_error()
                buf, n, read_cpu_s = item  # type: ignore[misc]
                clock.mark()
                with memoryview(buf) as view:
                    sock.sendall(view[:n])
                meter.time("network.send", n, clock.lap())
                handoff.free.put(buf)
                sent += n
                meter.block(n, read_cpu_s + clock.cpu_lap())
            sock.shutdown(socket.SHUT_WR)
            if sock.recv(1) != b"k":  # the receiver's word: everything is on its disk
                raise ConnectionError("the receiver closed without confirming the file")
    finally:
        handoff.free.put(None)  # the reader stops, if it has not
        os.close(fd)
    meter.emit("done", sent, meter.clock() - meter.started)
    return sent


def _read_blocks(fd: int, total: int, path: Path, handoff: _Handoff, meter: Meter) -> None:
    """The sender's disk thread: reads block after block into free buffers."""
    clock = ThreadClock()
    try:
        left = total
        while left > 0:
            buf = handoff.free.get()  # the network's time, not the disk's
            if buf is None:
                return
            clock.mark()
            n = os.readv(fd, [buf])
            if n == 0:
                raise RuntimeError(f"{path} ended {left} bytes short (it shrank)")
            meter.time("disk.read", n, clock.lap())
            handoff.full.put((buf, n, clock.cpu_lap()))
            left -= n
    except BaseException as e:
        handoff.fail(e)
    finally:
        clock.close()


@dataclass(frozen=True)
class Listen:
    """Where and from whom the receiver takes its one transfer: `address` (the one the
    experiment gives its host; "" every address) and `port` (0: any free one); only a
    connection that first says `token`, within `timeout_s`; at most `max_bytes`."""

    token: str
    address: str = ""
    port: int = 0
    timeout_s: float = ACCEPT_TIMEOUT_S
    max_bytes: int = MAX_BYTES


def receive(listen: Listen, path: Path, out: IO[str], interval_s: float = 1.0,
            ready: Callable[[int], None] | None = None, remove: bool = False) -> int:
    """Make `path` (new), then take one transfer as `listen` says (`ready` gets the port)
    into it; the bytes received. The file is removed if the transfer fails."""
    meter = Meter("receive", ("network.receive", "disk.write"), "cpu.receiver", out,
                  interval_s)
    fd = create(path)
    try:
        try:
            direct = go_direct(fd, path, meter.notes)
            got = _receive(listen, fd, direct, meter, ready)
        finally:
            os.close(fd)
    except BaseException:
        remove_file(path)
        raise
    if remove:
        remove_file(path)
    return got


def _receive(listen: Listen, fd: int, direct: bool, meter: Meter,
             ready: Callable[[int], None] | None) -> int:
    conn = _accept(listen, ready)
    handoff = _Handoff()
    got = 0
    try:
        with conn:
            conn.settimeout(QUIET_S)
            total = int.from_bytes(_exactly(conn, 8), "big")
            if total > listen.max_bytes:
                raise ValueError(f"the sender announced {total} bytes, more than the "
                                 f"{listen.max_bytes} this receiver takes")
            meter.start()
            writer = threading.Thread(target=_write_blocks,
                                      args=(fd, direct, total, handoff, meter),
                                      name="disk.write", daemon=True)
            writer.start()
            clock = ThreadClock()
            while got < total:
                buf = handoff.free.get()  # the disk's time, not the network's
                if buf is None:
                    handoff.raise_error()
                _wait_readable(conn)  # the sender's time, not the network's
                clock.mark()
                with memoryview(buf) as view:  # type: ignore[arg-type]
                    filled = _fill(conn, view, min(BLOCK, total - got))
                meter.time("network.receive", filled, clock.lap(less_cpu_waits=False))
                handoff.full.put((buf, filled, clock.cpu_lap()))  # type: ignore[arg-type]
                got += filled
            writer.join()
            if handoff.error is not None:
                handoff.raise_error()
            os.ftruncate(fd, got)
            os.fsync(fd)
            conn.sendall(b"k")
    finally:
        handoff.full.put(None)  # the writer stops, if it has not
    meter.emit("done", got, meter.clock() - meter.started)
    return got


def _write_blocks(fd: int, direct: bool, total: int, handoff: _Handoff, meter: Meter) -> None:
    """The receiver's disk thread: writes each full buffer, in order."""
    clock = ThreadClock()
    try:
        written = 0
        while written < total:
            item = handoff.full.get()  # the network's time, not the disk's
            if item is None:
                return
            buf, n, receive_cpu_s = item
            # O_DIRECT writes whole aligned blocks; the file is cut to size after
            length = -(-n // ALIGN) * ALIGN if direct else n
            clock.mark()
            with memoryview(buf) as view:
                if os.write(fd, view[:length]) != length:
                    raise OSError(errno.ENOSPC, "a short write: the disk is full")
            meter.time("disk.write", n, clock.lap())
            handoff.free.put(buf)
            written += n
            meter.block(n, receive_cpu_s + clock.cpu_lap())
    except BaseException as e:
        handoff.fail(e)
    finally:
        clock.close()


def _server(listen: Listen) -> socket.socket:
    if not listen.address:
        return socket.create_server(("", listen.port), family=socket.AF_INET6,
                                    dualstack_ipv6=True)
    family, *_, where = socket.getaddrinfo(listen.address, listen.port,
                                           type=socket.SOCK_STREAM)[0]
    return socket.create_server(where[:2], family=family)


def _accept(listen: Listen, ready: Callable[[int], None] | None) -> socket.socket:
    """The first connection that says the token; any other is closed and the wait goes on,
    until `listen.timeout_s`."""
    want = listen.token.encode()
    deadline = time.monotonic() + listen.timeout_s
    with _server(listen) as srv:
        if ready is not None:
            ready(srv.getsockname()[1])
        while (left := deadline - time.monotonic()) > 0:
            srv.settimeout(left)
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                break
            try:
                conn.settimeout(min(TOKEN_TIMEOUT_S, max(left, 0.01)))
                said = _exactly(conn, len(want))
            except OSError:
                said = b""
            if said and hmac.compare_digest(said, want):
                return conn
            conn.close()  # not the sender: a stray or hostile connection
    raise TimeoutError(f"no sender with this transfer's token connected in "
                       f"{listen.timeout_s:g} s")


def _wait_readable(conn: socket.socket) -> None:
    if not select.select([conn], [], [], QUIET_S)[0]:
        raise TimeoutError(f"no byte from the sender for {QUIET_S:g} s")


def _fill(conn: socket.socket, view: memoryview, want: int) -> int:
    filled = 0
    while filled < want:
        n = conn.recv_into(view[filled:want])
        if n == 0:
            raise ConnectionError("the sender closed before sending the whole file")
        filled += n
    return filled


def _exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the sender closed before saying the token and size")
        data += chunk
    return data


def _stop(signum: int, _frame: object) -> None:
    raise Stopped(f"stopped by {signal.Signals(signum).name}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sniffer.transfer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="side", required=True)
    r = sub.add_parser("receive")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--listen", required=True, metavar="ADDR",
                   help="the address to listen on (the one the experiment gives this host)")
    r.add_argument("--accept-timeout-s", type=float, default=ACCEPT_TIMEOUT_S,
                   help="how long to wait for the sender (default %(default)g)")
    r.add_argument("--max-bytes", type=int, default=MAX_BYTES,
                   help="refuse a transfer announced larger than this")
    r.add_argument("--path", type=Path, required=True)
    s = sub.add_parser("send")
    s.add_argument("--to", required=True, metavar="ADDR:PORT")
    s.add_argument("--path", type=Path, required=True)
    s.add_argument("--size", type=int, default=None,
                   help="make the file, of this many bytes, if it does not exist")
    s.add_argument("--new", action="store_true",
                   help="with --size: refuse a file that exists instead of sending it")
    for p in (r, s):
        p.add_argument("--token", required=True,
                       help="said by the sender first: the receiver takes no one without it")
        p.add_argument("--interval-s", type=float, default=1.0)
        p.add_argument("--remove", action="store_true",
                       help="remove the file this side made once the transfer is done")
    return parser


def main(argv: list[str] | None = None) -> int:
    """0 done; 2 a path that cannot be used; 1 anything else. A failure is one `error` line
    on stdout (the coordinator reads it there), never a traceback."""
    args = _parser().parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    try:
        if args.side == "receive":
            listen = Listen(args.token, args.listen.strip("[]"), args.port,
                            args.accept_timeout_s, args.max_bytes)
            receive(listen, args.path, sys.stdout, args.interval_s,
                    ready=lambda port: write_line(sys.stdout, TransferReady(port=port)
                                              .model_dump_json()), remove=args.remove)
        else:
            host, _, port = args.to.rpartition(":")
            send((host.strip("[]"), int(port)), args.path, args.size, sys.stdout,
                 args.interval_s, remove=args.remove, new=args.new, token=args.token)
    except PathProblem as e:
        return _failed("input", str(e), 2)
    except (OSError, RuntimeError, ValueError, Stopped) as e:
        return _failed("runtime", str(e) or type(e).__name__, 1)
    return 0


def _failed(kind: str, message: str, code: int) -> int:
    # nobody may read any more (the lease ended): then the exit status says it
    with contextlib.suppress(OSError):
        write_line(sys.stdout, TransferFailed(kind=kind, message=message)  # type: ignore[arg-type]
               .model_dump_json())
    return code


if __name__ == "__main__":
    sys.exit(main())

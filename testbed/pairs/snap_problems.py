"""SNAP's known problems (§4.1), one TCP connection per Table 2 class, run inside a namespace.

    snap_problems.py server KIND PORT SECONDS [--sndbuf BYTES] [--pace BYTES_PER_S]
    snap_problems.py client KIND HOST PORT SECONDS [--rcvbuf BYTES] [--read-bytes N]
                                                   [--read-gap-s S] [--gap-s S]

KIND says what the pair does (testbed/snap_workload.py describes each and what makes it):
  send_buffer, receiver_window, fast_retransmit   the server writes bulk, the client reads it
      (--sndbuf on the server: a small send buffer; --pace: TCP's own pacing, a steady
      flow; --rcvbuf, --read-bytes and --read-gap-s on the client: a small receive buffer
      read slowly)
  timeout, healthy     request/response, both ends TCP_NODELAY, the client --gap-s apart
  delayed_ack          the client writes a request in two small pieces with Nagle on, then
      reads the reply: the second piece waits for the server's delayed ACK of the first

The server takes one connection and serves it until the client closes; the client runs for
SECONDS. Each prints JSON lines {"t": unix s, "role", "kind", "event", ...}: "listening",
"connected" (both ports), "on" (the problem this program makes, with the socket options the
kernel granted), "slow" (a request that took over --slow-s, with its start and end: what a
blackout did), "off" and "done" (bytes, or requests with their latencies and the first few
one by one). The problems the injector makes (loss, blackout) are labelled by its schedule.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time

BULK = ("send_buffer", "receiver_window", "fast_retransmit")
REQUESTS = ("timeout", "delayed_ack", "healthy")
KINDS = (*BULK, *REQUESTS)
CHUNK = 65536  # bulk write and prompt read size
REQUEST_BYTES = 64  # the delayed-ACK client writes it in two halves
REPLY_BYTES = 64
FIRST = 8  # the first requests' latencies are reported one by one (quickack at the start)
SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux; Python may lack it


def say(role: str, kind: str, event: str, **fields: object) -> None:
    print(json.dumps({"t": time.time(), "role": role, "kind": kind, "event": event, **fields}),
          flush=True)


def buffers(sock: socket.socket) -> dict[str, int]:
    """What the kernel granted (Linux doubles a requested size for its bookkeeping)."""
    return {"sndbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            "rcvbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            "nodelay": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)}


def recv_exactly(sock: socket.socket, n: int) -> bool:
    """Read n bytes; False when the peer closed first."""
    while n > 0:
        data = sock.recv(n)
        if not data:
            return False
        n -= len(data)
    return True


def serve(args: argparse.Namespace) -> None:
    kind = args.kind
    srv = socket.create_server(("0.0.0.0", args.port), reuse_port=True)
    srv.settimeout(30)
    say("server", kind, "listening", port=args.port)
    conn, peer = srv.accept()
    srv.close()
    conn.settimeout(args.seconds + 30)  # a blackout stalls it for seconds, never for ever
    if args.sndbuf:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, args.sndbuf)
    if args.pace:  # TCP's own pacing (4.13): a steady flow at a rate the machine can bear
        conn.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, args.pace)
    if kind in REQUESTS:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    say("server", kind, "connected", local_port=args.port, peer_port=peer[1])
    with conn:
        if kind in BULK:
            sent = _write_bulk(conn, kind)
            say("server", kind, "done", bytes_sent=sent)
        else:
            served = _reply(conn)
            say("server", kind, "done", requests=served)


def _write_bulk(conn: socket.socket, kind: str) -> int:
    payload = b"x" * CHUNK
    sent = 0
    say("server", kind, "on", **buffers(conn))
    try:
        while True:
            sent += conn.send(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client has read for its time and closed
    say("server", kind, "off", bytes_sent=sent)
    return sent


def _reply(conn: socket.socket) -> int:
    reply = b"r" * REPLY_BYTES
    served = 0
    try:
        while recv_exactly(conn, REQUEST_BYTES):
            conn.sendall(reply)
            served += 1
    except ConnectionResetError:
        pass
    return served


def client(args: argparse.Namespace) -> None:
    kind = args.kind
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if args.rcvbuf:  # before connect: the window scale is chosen at the handshake
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
    if kind in ("timeout", "healthy"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(10)
    sock.connect((args.host, args.port))
    sock.settimeout(args.seconds + 30)
    say("client", kind, "connected", local_port=sock.getsockname()[1], peer_port=args.port)
    with sock:
        if kind in BULK:
            _read_bulk(sock, args)
        else:
            _requests(sock, args)


def _read_bulk(sock: socket.socket, args: argparse.Namespace) -> None:
    slow = args.read_gap_s > 0
    size = args.read_bytes if slow else CHUNK
    say("client", args.kind, "on" if slow else "reading", **buffers(sock),
        read_bytes=size, read_gap_s=args.read_gap_s)
    got = 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        data = sock.recv(size)
        if not data:
            break
        got += len(data)
        if slow:
            time.sleep(args.read_gap_s)
    say("client", args.kind, "off" if slow else "read", bytes_received=got)
    say("client", args.kind, "done", bytes_received=got)


def _request(sock: socket.socket, kind: str) -> None:
    if kind == "delayed_ack":  # write, write, read: Nagle holds the second half
        half = REQUEST_BYTES // 2
        sock.send(b"q" * half)
        sock.send(b"q" * (REQUEST_BYTES - half))
    else:
        sock.sendall(b"q" * REQUEST_BYTES)
    if not recv_exactly(sock, REPLY_BYTES):
        raise ConnectionError("the server closed mid-request")


def _requests(sock: socket.socket, args: argparse.Namespace) -> None:
    kind = args.kind
    latencies: list[float] = []
    say("client", kind, "on" if kind == "delayed_ack" else "requesting", **buffers(sock),
        gap_s=args.gap_s)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        start = time.time()
        _request(sock, kind)
        took = time.time() - start
        latencies.append(took)
        if took > args.slow_s:
            say("client", kind, "slow", start=start, end=start + took)
        if args.gap_s:
            time.sleep(args.gap_s)
    say("client", kind, "off" if kind == "delayed_ack" else "requested",
        requests=len(latencies))
    say("client", kind, "done", requests=len(latencies),
        mean_ms=1e3 * statistics.fmean(latencies) if latencies else None,
        median_ms=1e3 * statistics.median(latencies) if latencies else None,
        max_ms=1e3 * max(latencies) if latencies else None,
        first_ms=[round(1e3 * x, 3) for x in latencies[:FIRST]])


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    roles = parser.add_subparsers(dest="role", required=True)
    server = roles.add_parser("server", help="take one connection on PORT and serve KIND")
    server.add_argument("kind", choices=KINDS)
    server.add_argument("port", type=int)
    server.add_argument("seconds", type=float, help="how long the client will run")
    server.add_argument("--sndbuf", type=int, default=0, metavar="BYTES",
                        help="SO_SNDBUF of the accepted socket (0: the kernel's autotuning)")
    server.add_argument("--pace", type=int, default=0, metavar="BYTES_PER_S",
                        help="SO_MAX_PACING_RATE of the accepted socket (0: unpaced)")
    cli = roles.add_parser("client", help="connect to HOST:PORT and do KIND for SECONDS")
    cli.add_argument("kind", choices=KINDS)
    cli.add_argument("host")
    cli.add_argument("port", type=int)
    cli.add_argument("seconds", type=float)
    cli.add_argument("--rcvbuf", type=int, default=0, metavar="BYTES",
                     help="SO_RCVBUF, set before connect (0: the kernel's autotuning)")
    cli.add_argument("--read-bytes", type=int, default=1024, metavar="N",
                     help="bulk: bytes per slow read (default %(default)s)")
    cli.add_argument("--read-gap-s", type=float, default=0.0, metavar="S",
                     help="bulk: sleep between reads (0, the default: read promptly)")
    cli.add_argument("--gap-s", type=float, default=0.0, metavar="S",
                     help="requests: sleep between requests (default %(default)s)")
    cli.add_argument("--slow-s", type=float, default=0.2, metavar="S",
                     help="requests: print a request slower than this (default %(default)s)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse(argv)
    (serve if args.role == "server" else client)(args)


if __name__ == "__main__":
    main(sys.argv[1:])

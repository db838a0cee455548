"""TCP segments read off the wire by a packet socket, for the benchmarks' truths (a packet
capture where the testbed has no tcpdump): `tcp_segments` runs in a host's network namespace
as a child process that prints a JSON line per record; `InNamespace` starts it there and
keeps its lines."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Segment:
    src: str  # the sender's IPv4 address
    sport: int
    dport: int
    flags: int
    payload: bytes


def tcp_segments(port: int) -> Iterator[Segment]:
    """Every IPv4 TCP segment to or from `port` on any interface, until stdin closes; says
    `ready` on stdout once the socket is open."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
    sock.settimeout(0.2)
    threading.Thread(target=lambda: (sys.stdin.read(), sock.close()), daemon=True).start()
    print("ready", flush=True)
    while True:
        try:
            frame = sock.recv(65535)
        except TimeoutError:
            continue
        except OSError:
            return
        if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
            continue
        ihl = (frame[14] & 0x0F) * 4
        total = struct.unpack("!H", frame[16:18])[0]
        tcp = frame[14 + ihl:14 + total]  # an Ethernet frame's padding is no payload
        sport, dport = struct.unpack("!HH", tcp[:4])
        if port in (sport, dport):
            yield Segment(socket.inet_ntoa(frame[26:30]), sport, dport, tcp[13],
                          tcp[(tcp[12] >> 4) * 4:])


class InNamespace:
    """`python -m MODULE ARGS` in network namespace `namespace`, its JSON lines kept in
    `records` as they come; `stop` closes its stdin (its cue to end) and waits for it."""

    def __init__(self, namespace: str, module: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", namespace, sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            sys.exit(f"{module}: the packet socket in {namespace} did not start")
        self.records: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=lambda: self.records.extend(
            json.loads(line) for line in self.proc.stdout), daemon=True)  # type: ignore[union-attr]
        self.reader.start()

    def stop(self) -> list[dict[str, Any]]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=15)
        self.reader.join(timeout=5)
        return self.records

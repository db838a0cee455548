"""The processes of benchmarks/snap_delayed_ack.py: the application's server and client, the
packet capture (each run in a namespace as `python -m benchmarks.snap_delayed_ack_procs ROLE
...`), and the `python -m sniffer` processes with what their reports say of the client."""

from __future__ import annotations

import json
import queue
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.snap_delayed_ack_trace import quantiles
from linkgrad.snap.classify import SnapThresholds, delayed_ack_count
from linkgrad.snap.intervals import IntervalStats
from testbed.pairs.hosts import Hosts
from testbed.pairs.snap_problems import recv_exactly

ROOT = Path(__file__).parents[1]
REQUEST_BYTES = 64  # two_writes and mixed: a request; split in two halves when delayed
MESSAGE_BYTES = 32  # one_way
ONE_WAY_GAP_S = (0.05, 0.09)  # above the 40 ms delayed ACK, below the 200 ms minimum RTO
BUDGET = "0.5 budget"  # the sniffer with the shipped budget: problem connections polled faster


# ---------------------------------------------------------------- the roles (in a namespace)


def server(app: str, port: str) -> None:
    srv = socket.create_server(("0.0.0.0", int(port)), reuse_port=True)
    srv.settimeout(30)
    print("ready", flush=True)
    conn, _ = srv.accept()
    srv.close()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    size = MESSAGE_BYTES if app == "one_way" else REQUEST_BYTES
    with conn:
        while recv_exactly(conn, size):
            if app != "one_way":
                conn.sendall(b"r" * REQUEST_BYTES)


def client(app: str, host: str, port: str, duration_s: str, share: str, seed: str) -> None:
    """Nagle on (the default). Says its port, runs, says what it did, and keeps the connection
    open until stdin closes (the sniffers' last reads see it alive)."""
    rng = random.Random(int(seed))
    sock = socket.create_connection((host, int(port)), timeout=10)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    requests = split = 0
    end = time.monotonic() + float(duration_s)
    while time.monotonic() < end:
        if app == "one_way":
            sock.sendall(b"m" * MESSAGE_BYTES)
            time.sleep(rng.uniform(*ONE_WAY_GAP_S))
        else:
            if app == "two_writes" or rng.random() < float(share):
                half = REQUEST_BYTES // 2
                sock.send(b"q" * half)
                sock.send(b"q" * (REQUEST_BYTES - half))
                split += 1
            else:
                sock.sendall(b"q" * REQUEST_BYTES)
            if not recv_exactly(sock, REQUEST_BYTES):
                raise ConnectionError("the server closed mid-request")
        requests += 1
    print(json.dumps({"requests": requests, "split": split}), flush=True)
    sys.stdin.read()
    sock.close()


def capture(iface: str, pcap: str) -> None:
    """Every frame on `iface`, both directions, to a pcap until stdin closes. scapy's Linux
    listening socket asks for SO_TIMESTAMPNS, so each frame keeps the kernel's receive time
    however late the sniffing thread dissects it; this run needs ~100 frames/s, and scapy
    dissects and writes ~4,000/s on this machine (measured), with a 4 MiB socket buffer to
    ride out the scheduling gaps of a shared machine. Nothing lost is checked afterwards:
    the trace's data segments equal SNAP's data_segs_out."""
    from scapy.config import conf
    from scapy.sendrecv import AsyncSniffer
    from scapy.utils import PcapWriter

    conf.bufsize = 1 << 22
    with PcapWriter(pcap, nano=True) as out:
        sniffer = AsyncSniffer(iface=iface, store=False, prn=out.write,
                               started_callback=lambda: print("ready", flush=True))
        sniffer.start()
        sys.stdin.read()
        sniffer.stop()


# ---------------------------------------------------------------- the processes (from the root)


def role(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "benchmarks.snap_delayed_ack_procs", *args)


class Lines:
    """A child process in a namespace whose stdout a thread reads: a silent child fails after
    a timeout instead of hanging the run."""

    def __init__(self, hosts: Hosts, host: str, *argv: str) -> None:
        self.proc = hosts.popen(host, *argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                cwd=ROOT)
        self.what = f"{' '.join(argv[2:5])} in {host}"
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout_s: float = 30.0) -> str:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError(f"{self.what} said nothing in {timeout_s} s") from None
        if line is None:
            raise RuntimeError(f"{self.what} exited ({self.proc.wait(timeout=15)})")
        return line

    def expect(self, word: str) -> None:
        if (line := self.next().strip()) != word:
            raise RuntimeError(f"{self.what} said {line!r}, expected {word!r}")

    def close_input(self) -> None:
        assert self.proc.stdin is not None
        if not self.proc.stdin.closed:
            self.proc.stdin.close()


class Sniffer(Lines):
    """`python -m sniffer`: requests in, replies and events out."""

    def __init__(self, hosts: Hosts, host: str) -> None:
        super().__init__(hosts, host, sys.executable, "-m", "sniffer")
        self.events: list[dict[str, Any]] = []
        if (ready := json.loads(self.next()))["event"] != "ready":
            raise RuntimeError(f"the sniffer said {ready}")

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send `request`; the events before its reply go to `events`."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        while "event" in (message := json.loads(self.next())):
            self.events.append(message)
        if not message.get("ok"):
            raise RuntimeError(f"{request['cmd']}: {message}")
        return message["result"]

    def end(self) -> None:
        self.close_input()
        while (message := json.loads(self.next()))["event"] != "stopped":
            self.events.append(message)
        self.proc.wait(timeout=15)


def profile_request(interval: str, seed: int) -> dict[str, Any]:
    """A pinned table interval (no budget moves), or BUDGET: the shipped settings (table every
    0.5 s, a problem connection polled down to every 50 ms, §7). Sums with every report; no
    socket tracing (the estimate does not use it; six bpftrace processes would)."""
    request = {"id": 1, "cmd": "profile", "socket_calls": False, "seed": seed}
    if interval == BUDGET:
        return {**request, "report_interval_s": 1.0, "sums_interval_s": 1.0}
    interval_s = float(interval)
    report_s = max(1.0, 2 * interval_s)
    return {**request, "report_interval_s": report_s, "sums_interval_s": report_s,
            "table_interval_s": interval_s, "table_interval_max_s": interval_s,
            "fast_interval_min_s": interval_s}


def snap_result(events: list[dict[str, Any]], client: tuple[str, int], server_port: int,
                thresholds: SnapThresholds, matched: SnapThresholds) -> dict[str, Any]:
    """The sniffer's sums for the client's connection, and its problem records' estimate
    again under the shipped and the `matched` thresholds (records: the intervals with a
    problem only, which hold every interval the count is made in; `record_segs` segments)."""
    def mine(x: dict[str, Any]) -> bool:
        return (x["local"]["addr"], x["local"]["port"]) == client \
            and x["remote"]["port"] == server_port
    conns = [c for e in events if e["event"] == "snap" for c in e["connections"] if mine(c)]
    records = [r for e in events if e["event"] == "snap" for r in e["records"] if mine(r)]
    segs = sum(c["sums"].get("data_segs_out", 0) for c in conns)
    delayed = sum(c["delayed_acks"] for c in conns)
    stats = IntervalStats.from_columns({
        "start_s": [r["from"] for r in records], "end_s": [r["to"] for r in records],
        **{k: [r["tcp"].get(k, np.nan) for r in records]
           for k in ("rtt_us", "min_rtt_us", "data_segs_out")}}, n_rows=len(records))
    rec_segs = float(np.nansum(stats.data_segs_out))
    return {"polls": sum(c["polls"] for c in conns), "data_segs_out": segs,
            "delayed_acks": delayed, "d_s": delayed / segs if segs else None,
            "records": len(records), "record_segs": rec_segs,
            "srtt_at_polls_ms": quantiles(stats.rtt_us / 1e6) if len(records) else None,
            "srtt_poll_mean_ms": float(np.mean(stats.rtt_us) / 1e3) if len(records) else None,
            "min_rtt_ms": float(np.nanmin(stats.min_rtt_us) / 1e3) if len(records) else None,
            "record_delayed_acks": float(np.nansum(delayed_ack_count(stats, thresholds))),
            "matched_d_s": float(np.nansum(delayed_ack_count(stats, matched))) / segs
            if segs else None}


if __name__ == "__main__":
    {"server": server, "client": client, "capture": capture}[sys.argv[1]](*sys.argv[2:])

"""Which thread uses each TCP socket, from the kernel: the tid that sends or receives on a
socket, said only when it changes (vPath's observation: a server that gives each request a
process or thread of its own makes that request's calls from it).

One bpftrace program on `sock:sock_send_length` and `sock:sock_recv_length` (the caller's
context: `tid` is the thread making the call) keeps each socket's last thread in a map and
prints a line only when a call comes from another one: once per connection on a prefork
server (Apache, PHP-FPM, a worker's persistent database connection), once per hand-over on
a connection pool. A socket's entry is dropped when it closes (`sock:inet_sock_set_state`
to TCP_CLOSE), so a reused socket is said again. A printf per call would cost ~28 µs of CPU
a call (`sniffer.socket_calls`); a map lookup that finds the same thread costs well under
one.

`ThreadLog` turns the lines into each connection end's threads over time, and answers which
thread handled a message: the last change at or before its first segment (a send: the call
comes before the packet), else the first change after it (a connection's first message is
received before the thread's first recv call says who it is).
"""

from __future__ import annotations

import bisect
import json
import sys
from dataclasses import dataclass, field

from sniffer.links import plain_address
from sniffer.socket_call_summary import MARK, TICK_S

Endpoint = tuple[str, int]
TCP_CLOSE = 7
NO_THREAD = -1
MAP_KEYS_MAX = 65536  # sockets followed at once (one map entry each)

C = "$sk->__sk_common"


def build_program(netns_inode: int | None) -> str:
    """The bpftrace program (0.17 syntax) that says each socket's thread when it changes,
    for the sockets of network namespace `netns_inode` (None: all)."""
    where = "1" if netns_inode is None else f"{C}.skc_net.net->ns.inum == {netns_inode}"
    probe = "\n".join([
        "tracepoint:sock:sock_send_length, tracepoint:sock:sock_recv_length",
        "/args->protocol == 6/ {",
        # args-> fields first: bpftrace 0.17 reads them after a map update through a moved
        # context pointer, and the verifier refuses the program
        "  $fam = args->family; $sk = (struct sock *)args->sk;",
        f"  if ({where} && @t[(uint64)$sk] != tid) {{",
        "    @t[(uint64)$sk] = tid;",
        f"    if ($fam == 2) {{ $la = ntop(2, {C}.skc_rcv_saddr); $ra = ntop(2, {C}.skc_daddr); }}",
        f"    else {{ $la = ntop(10, {C}.skc_v6_rcv_saddr.in6_u.u6_addr8);"
        f" $ra = ntop(10, {C}.skc_v6_daddr.in6_u.u6_addr8); }}",
        f'    printf("{MARK}thread %lld %d %d %s %d %s %d\\n", nsecs, tid, pid, $la,'
        f" {C}.skc_num, $ra, {C}.skc_dport);",
        "  }\n}"])
    return "\n".join([
        f'BEGIN {{ printf("{MARK}start %lld\\n", nsecs); }}',
        probe,
        f"tracepoint:sock:inet_sock_set_state /args->protocol == 6 && args->newstate == "
        f"{TCP_CLOSE}/ {{ delete(@t[(uint64)args->skaddr]); }}",
        # the first tick says the probes are attached; a line a second after, so that
        # bpftrace ends (writing to a closed pipe) soon after its reader did
        f"interval:ms:{round(TICK_S * 1000)} {{ @tick = @tick + 1; if (@tick == 1) {{"
        f' printf("{MARK}ready %lld\\n", nsecs); }}',
        f'  if (@tick % {round(1 / TICK_S)} == 0) {{ printf("{MARK}tick\\n"); }} }}',
        "END { clear(@t); clear(@tick); }", ""])


@dataclass(frozen=True)
class ThreadChange:
    """From `time_s` (unix) on, `thread` (a tid) of process `pid` uses the socket whose
    ends are `local` and `remote`."""

    time_s: float
    thread: int
    pid: int
    local: Endpoint
    remote: Endpoint


@dataclass
class ThreadChangeParser:
    """bpftrace's `-f json` lines in, thread changes out (the interface of
    `socket_call_summary.SummaryParser`, for `socket_calls.SocketCallTracer`)."""

    wall_offset_s: float  # unix time minus CLOCK_MONOTONIC (bpftrace's `nsecs`)
    ready: bool = False
    lost_events: int = 0
    dropped_calls: int = 0  # (none: a full map only makes more lines)
    unparsed: list[str] = field(default_factory=list)

    def feed(self, line: str) -> list[ThreadChange]:
        if not line.strip():
            return []
        try:
            message = json.loads(line)
            kind, data = message["type"], message["data"]
            if kind == "printf" and data.startswith(MARK):
                return self._marker(data[len(MARK):].removesuffix("\n"))
            if kind == "lost_events":
                self.lost_events += int(data["events"])
        except (ValueError, LookupError, TypeError, AttributeError):
            self.unparsed = [*self.unparsed[-4:], line.rstrip("\n")]
        return []

    def _marker(self, text: str) -> list[ThreadChange]:
        word, _, rest = text.partition(" ")
        if word == "ready":
            self.ready = True
        elif word == "thread":
            ns, tid, pid, la, lp, ra, rp = rest.split()
            # skc_dport is in network order, printed as a host-order number
            remote_port = int.from_bytes(int(rp).to_bytes(2, sys.byteorder), "big")
            return [ThreadChange(int(ns) / 1e9 + self.wall_offset_s, int(tid), int(pid),
                                 (plain_address(la), int(lp)),
                                 (plain_address(ra), remote_port))]
        return []


class ThreadLog:
    """Each connection end's thread changes over time, kept for `keep_s` after its last."""

    def __init__(self, keep_s: float = 600.0) -> None:
        self.keep_s = keep_s
        self.changes: dict[tuple[Endpoint, Endpoint], tuple[list[float], list[int]]] = {}

    def add(self, changes: list[ThreadChange]) -> None:
        for c in changes:
            times, threads = self.changes.setdefault((c.local, c.remote), ([], []))
            at = bisect.bisect_right(times, c.time_s)  # lines come in order, but per CPU
            times.insert(at, c.time_s)
            threads.insert(at, c.thread)

    def thread_at(self, local: Endpoint, remote: Endpoint, time_s: float) -> int:
        """The thread that handled a message at this end that began at `time_s`."""
        found = self.changes.get((local, remote))
        if found is None:
            return NO_THREAD
        times, threads = found
        at = bisect.bisect_right(times, time_s)
        return threads[at - 1] if at else threads[0]

    def forget_before(self, time_s: float) -> None:
        """Let go of the connection ends silent since before `time_s - keep_s`."""
        cutoff = time_s - self.keep_s
        for key in [k for k, (times, _) in self.changes.items() if times[-1] < cutoff]:
            del self.changes[key]

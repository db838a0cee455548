"""Socket-call logs (SNAP §2.1: ReadBytes / WriteBytes per call) summarised per socket, pure:
`build_program` writes the bpftrace program, `SummaryParser` reads its `-f json` lines.

Calls are counted in kernel maps keyed by (pid, 4-tuple, comm), printed and cleared every
interval: a few map updates per call, whatever the interval. Two sets of maps alternate: the
interval probe flips `@epoch` in the kernel, then bpftrace's user space prints and clears the
set no probe writes any more (with one set, the calls made while it walks the map are lost).

The wire format, checked on bpftrace 0.17: a multi-key map's key is one string, its parts
joined by commas and JSON-escaped (`"4711,10.0.0.1,5000,10.0.0.2,34835,nginx"`), so `comm`,
which may hold commas, goes last; an empty keyed map prints nothing at all, a map without
keys its bare value; `skc_dport` is in network byte order; `nsecs` is CLOCK_MONOTONIC.
"""

from __future__ import annotations

import collections
import json
import math
import socket
import sys
from dataclasses import dataclass, field
from functools import lru_cache

from sniffer.links import plain_address

TICK_S = 0.1  # the interval probe's period: flushes fall on ticks; the first tick says "ready"
MARK = "lg "  # our printf lines; anything else bpftrace prints is not ours
EAGAIN = 11
# writes' stats (count, total), log2 hist, small ones, would block; reads' stats; errors;
# and every call counted, to tell when full maps dropped some (bpftrace does not say)
MAPS = ("ws", "wh", "wm", "wb", "rs", "e", "n")
Key = tuple[int, str, str, int, str, int]  # pid, comm, local addr and port, remote ones


@dataclass(frozen=True)
class TraceSettings:
    interval_s: float = 1.0  # summaries cover this much time each
    small_write_bytes: int = 1448  # a write below this is "small": one Ethernet MSS
    netns_inode: int | None = None  # only sockets of this network namespace (None: all)
    map_keys_max: int = 4096  # entries a map holds (bpftrace's default): 2 per socket in a
    # stats(), 1 per (socket, bucket) in a hist(); calls that find their map full are dropped

    def __post_init__(self) -> None:
        ticks = self.interval_s / TICK_S
        if not (math.isfinite(ticks) and 1 <= round(ticks) <= 36000
                and abs(ticks - round(ticks)) < 1e-6):
            raise ValueError(f"{self.interval_s=} must be a multiple of {TICK_S} s, at most 1 h")
        if self.small_write_bytes < 1:
            raise ValueError(f"{self.small_write_bytes=} must be positive")
        if self.map_keys_max < 16:
            raise ValueError(f"{self.map_keys_max=} must be at least 16")


@dataclass(frozen=True)
class SocketCallSummary:
    """One socket's calls by one process over [from_s, to_s] (unix seconds). Writes and reads
    are calls that moved data (ret >= 0); `errors` those that failed, except EAGAIN (a
    non-blocking socket with nothing to read, or a full send buffer: `write_would_block`).
    `write_size_log2_hist[0]` counts 0-byte writes, `[k]` writes of 2**(k-1) to 2**k - 1 bytes
    (bpftrace's hist buckets), without trailing zeros."""

    pid: int
    comm: str
    family: int  # of the addresses as written: an IPv4-mapped socket is AF_INET
    local_addr: str
    local_port: int
    remote_addr: str
    remote_port: int
    from_s: float
    to_s: float
    writes: int = 0
    write_bytes: int = 0
    small_writes: int = 0
    write_would_block: int = 0
    reads: int = 0
    read_bytes: int = 0
    errors: int = 0
    write_size_log2_hist: tuple[int, ...] = ()


C = "$sk->__sk_common"
KEY = "[pid, $la, $lp, $ra, $rp, comm]"


def _counting(direction: str, s: TraceSettings, e: int) -> str:
    """One call into the maps of set `e`."""
    n = f"@n{e} = count();"
    if direction == "write":
        return (f"{n} if ($ret >= 0) {{ @ws{e}{KEY} = stats($ret); @wh{e}{KEY} = hist($ret);"
                f" if ($ret < {s.small_write_bytes}) {{ @wm{e}{KEY} = count(); }} }}"
                f" else {{ if ($ret == -{EAGAIN}) {{ @wb{e}{KEY} = count(); }}"
                f" else {{ @e{e}{KEY} = count(); }} }}")
    return (f"if ($ret >= 0) {{ @rs{e}{KEY} = stats($ret); {n} }}"
            f" else {{ if ($ret != -{EAGAIN}) {{ @e{e}{KEY} = count(); {n} }} }}")


def _probe(tracepoint: str, direction: str, s: TraceSettings) -> str:
    conditions = ["1"]
    if s.netns_inode is not None:
        conditions.append(f"{C}.skc_net.net->ns.inum == {s.netns_inode}")
    if direction == "read":
        conditions.append("($fl & 2) == 0")  # MSG_PEEK reads consume nothing
    return "\n".join([
        # args-> fields copied first: bpftrace 0.17 reads them after a map update through a
        # moved context pointer, and the verifier refuses the program
        f"tracepoint:sock:{tracepoint} /args->protocol == 6/ {{",
        "  $ret = args->ret; $fam = args->family; $fl = args->flags;",
        "  $sk = (struct sock *)args->sk;",
        f"  if ({' && '.join(conditions)}) {{",
        f"    if ($fam == 2) {{ $la = ntop(2, {C}.skc_rcv_saddr); $ra = ntop(2, {C}.skc_daddr); }}",
        f"    else {{ $la = ntop(10, {C}.skc_v6_rcv_saddr.in6_u.u6_addr8);"
        f" $ra = ntop(10, {C}.skc_v6_daddr.in6_u.u6_addr8); }}",
        f"    $lp = {C}.skc_num; $rp = {C}.skc_dport;",
        f"    if (@epoch == 0) {{ {_counting(direction, s, 0)} }}",
        f"    else {{ {_counting(direction, s, 1)} }}",
        "  }\n}\n"])


def _flush(e: int) -> str:
    return " ".join(f"{op}(@{m}{e});" for op in ("print", "clear") for m in MAPS)


def build_program(s: TraceSettings) -> str:
    """The bpftrace program (0.17 syntax: `args->field`) counting TCP socket calls for `s`."""
    return "\n".join([
        'BEGIN { printf("lg start %lld\\n", nsecs); }',
        _probe("sock_send_length", "write", s),
        _probe("sock_recv_length", "read", s),
        f"interval:ms:{round(TICK_S * 1000)} {{",
        '  @tick = @tick + 1; if (@tick == 1) { printf("lg ready %lld\\n", nsecs); }',
        f"  if (@tick % {round(s.interval_s / TICK_S)} == 0) {{",
        '    @epoch = 1 - @epoch; printf("lg flush %lld\\n", nsecs);',
        f"    if (@epoch == 1) {{ {_flush(0)} }} else {{ {_flush(1)} }}",
        '    printf("lg done\\n");',
        "  }\n}",
        # TERM or INT: the last partial interval, both sets (one is empty but for stragglers)
        'END { printf("lg flush %lld\\n", nsecs);',
        f"  {_flush(0)} {_flush(1)}",
        '  printf("lg done\\n"); clear(@tick); clear(@epoch); }', ""])


@lru_cache(maxsize=1 << 16)  # the same sockets' keys come every interval: parsed once
def _key(key: str) -> Key:
    pid, la, lp, ra, rp, comm = key.split(",", 5)  # comm last: it may hold commas
    remote_port = int.from_bytes(int(rp).to_bytes(2, sys.byteorder), "big")  # network order
    return (int(pid), comm, plain_address(la), int(lp), plain_address(ra), remote_port)


def _hist(buckets: list[dict[str, int]]) -> list[int]:
    """bpftrace's hist buckets (from the lowest non-empty one; the negative one has no "min")
    as counts by index: 0 for 0, k for 2**(k-1) to 2**k - 1."""
    found = {b["min"].bit_length(): b["count"] for b in buckets if b.get("min", -1) >= 0}
    return [found.get(i, 0) for i in range(max(found, default=-1) + 1)]


COUNTERS = {"wm": "small_writes", "wb": "write_would_block", "e": "errors"}  # count() maps
STATS = {"ws": ("writes", "write_bytes"), "rs": ("reads", "read_bytes")}  # stats() maps


@dataclass
class SummaryParser:
    """bpftrace's `-f json` lines in, summaries out. `wall_offset_s`: unix time minus
    CLOCK_MONOTONIC (bpftrace's `nsecs`), in seconds."""

    wall_offset_s: float
    ready: bool = False
    lost_events: int = 0
    dropped_calls: int = 0  # counted by the kernel, missing from the maps: they were full
    unparsed: list[str] = field(default_factory=list)  # the last few lines not understood
    _since_ns: int | None = None
    _flush_ns: int | None = None
    _calls: int = 0  # the kernel's count of this flush's calls
    _counts: dict[Key, collections.Counter[str]] = field(default_factory=dict)
    _hists: dict[Key, list[int]] = field(default_factory=dict)

    def feed(self, line: str) -> list[SocketCallSummary]:
        """Summaries of the interval this line ends; a line not understood goes to `unparsed`."""
        if not line.strip():
            return []  # bpftrace ends with blank lines (its exit-time print of empty maps)
        try:
            message = json.loads(line)
            kind, data = message["type"], message["data"]
            if kind == "printf" and data.startswith(MARK):
                return self._marker(data[len(MARK):].removesuffix("\n"))
            if kind in ("map", "stats", "hist") and self._flush_ns is not None:
                for name, entries in data.items():
                    self._add(name.lstrip("@").rstrip("01"), entries)
            elif kind == "lost_events":
                self.lost_events += int(data["events"])
        except (ValueError, LookupError, TypeError, AttributeError):
            self._unparsed(line.rstrip("\n"))
        return []

    def _unparsed(self, what: str) -> None:
        self.unparsed = [*self.unparsed[-4:], what]

    def _wall(self, ns: int) -> float:
        return ns / 1e9 + self.wall_offset_s

    def _marker(self, text: str) -> list[SocketCallSummary]:
        word, _, rest = text.partition(" ")
        if word == "start":
            self._since_ns = int(rest)
        elif word == "ready":
            self.ready = True
        elif word == "flush":
            self._flush_ns, self._calls, self._counts, self._hists = int(rest), 0, {}, {}
        elif word == "done" and self._flush_ns is not None:
            return self._summaries()
        return []

    def _add(self, name: str,
             entries: dict[str, dict[str, int] | list[dict[str, int]] | int] | int) -> None:
        """One map's entries by key: a stats() map's {count, average, total}, a hist()'s
        buckets, a count()'s number (as decoded: a value of another shape is skipped)."""
        if isinstance(entries, int):  # a map without keys prints its value, not a dict
            self._calls += entries if name == "n" else 0
            return
        for key, value in entries.items():
            try:
                k = _key(key)
            except (ValueError, OverflowError):
                self._unparsed(f"@{name} key {key!r}")
                continue
            counts = self._counts.setdefault(k, collections.Counter())
            match name, value:
                case ("ws" | "rs"), {"count": int(n), "total": int(total)}:
                    calls, nbytes = STATS[name]
                    counts[calls] += n
                    counts[nbytes] += total
                case "wh", list(buckets):
                    new, hist = _hist(buckets), self._hists.setdefault(k, [])
                    hist += [0] * (len(new) - len(hist))
                    hist[:len(new)] = [a + b for a, b in zip(hist, new, strict=False)]
                case ("wm" | "wb" | "e"), int(n):
                    counts[COUNTERS[name]] += n

    def _summaries(self) -> list[SocketCallSummary]:
        assert self._flush_ns is not None
        since = self._since_ns if self._since_ns is not None else self._flush_ns
        counted = sum(c["writes"] + c["write_would_block"] + c["reads"] + c["errors"]
                      for c in self._counts.values())
        self.dropped_calls += max(0, self._calls - counted)
        out = [self._summary(k, counts, since) for k, counts in sorted(self._counts.items())]
        self._since_ns, self._flush_ns = self._flush_ns, None
        return out

    def _summary(self, k: Key, counts: dict[str, int], since_ns: int) -> SocketCallSummary:
        pid, comm, la, lp, ra, rp = k
        family = socket.AF_INET6 if ":" in la else socket.AF_INET
        return SocketCallSummary(pid, comm, int(family), la, lp, ra, rp, self._wall(since_ns),
                                 self._wall(self._flush_ns or since_ns), **counts,
                                 write_size_log2_hist=tuple(self._hists.get(k, ())))

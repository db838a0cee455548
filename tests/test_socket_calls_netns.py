"""The socket-call collector on real sockets: bpftrace on the kernel's tracepoints (root)."""

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from linkgrad.errors import RuntimeFailure
from sniffer.socket_call_summary import SocketCallSummary, TraceSettings
from sniffer.socket_calls import SocketCallTracer, TracerConfig, probe
from testbed.pairs.hosts import make_pair
from tests.marks import NETNS, needs_tool

pytestmark = [*NETNS, needs_tool("bpftrace")]


def tracefs_mounts() -> list[str]:
    """This mount namespace's tracefs mounts (mount point and options)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return sorted(" ".join(ln.split()[4:6]) for ln in lines if " - tracefs " in ln)


def config(settings: TraceSettings | None = None) -> TracerConfig:
    found = probe(settings)
    if isinstance(found, str):
        pytest.skip(found)  # a kernel or a host without what it takes: the reason says which
    return found


def our_bpftraces() -> list[int]:
    """bpftrace processes whose parent is this test process."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        fields = dict(ln.split(":\t", 1) for ln in status.splitlines() if ":\t" in ln)
        if fields.get("Name") == "bpftrace" and fields.get("PPid") == str(os.getpid()):
            pids.append(int(entry.name))
    return pids


COUNTS = ("writes", "write_bytes", "small_writes", "reads", "read_bytes", "errors")


def add_up(summaries: list[SocketCallSummary]) -> tuple[dict[str, int], tuple[int, ...]]:
    """Counts and write-size histogram over `summaries`."""
    counts = {name: sum(getattr(s, name) for s in summaries) for name in COUNTS}
    width = max((len(s.write_size_log2_hist) for s in summaries), default=0)
    hist = [sum(s.write_size_log2_hist[i] for s in summaries if i < len(s.write_size_log2_hist))
            for i in range(width)]
    return counts, tuple(hist)


def await_counts(tracer: SocketCallTracer, seen: list[SocketCallSummary],
                 wanted: Callable[[SocketCallSummary], bool],
                 until: Callable[[dict[str, int]], bool], timeout_s: float = 15.0) -> None:
    """Drains into `seen` until the counts of the summaries `wanted` satisfy `until`."""
    deadline = time.monotonic() + timeout_s
    while not until(counts := add_up([s for s in seen if wanted(s)])[0]):
        assert time.monotonic() < deadline, f"only {counts} after {timeout_s} s"
        assert tracer.running(), tracer.reason()
        time.sleep(0.05)  # polls drain; the loop awaits the counts, with a timeout
        seen += tracer.drain()


def ends(s: SocketCallSummary) -> tuple[object, ...]:
    return (s.pid, s.local_addr, s.local_port, s.remote_addr, s.remote_port)


def test_the_writes_and_reads_of_one_connection_are_counted_exactly():
    before = tracefs_mounts()
    tracer = SocketCallTracer(config(TraceSettings(interval_s=0.2, netns_inode=os.stat(
        "/proc/self/ns/net").st_ino)))
    seen: list[SocketCallSummary] = []
    with tracer, socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        reads = [0, 0]  # calls, bytes

        def read() -> None:  # concurrently, so that no send blocks and splits
            while reads[1] < 100 * 2000 + 20 * 100:
                reads[1] += len(peer.recv(65536))
                reads[0] += 1

        reader = threading.Thread(target=read)
        reader.start()
        with client, peer:
            for size in [2000] * 100 + [100] * 20:  # 2000 >= 1448 > 100: 20 small writes
                assert client.send(b"x" * size) == size
            reader.join(timeout=10)
            out_ends = (os.getpid(), *client.getsockname(), *server.getsockname())
            back_ends = (os.getpid(), *peer.getsockname(), *client.getsockname())
            await_counts(tracer, seen, lambda s: ends(s) == out_ends,
                         lambda c: c["writes"] >= 120)
            await_counts(tracer, seen, lambda s: ends(s) == back_ends,
                         lambda c: c["read_bytes"] >= reads[1])
        pid = tracer.proc.pid
    seen += tracer.drain()  # the last interval, flushed on stop: nothing more came
    out, hist = add_up([s for s in seen if ends(s) == out_ends])
    back, _ = add_up([s for s in seen if ends(s) == back_ends])
    assert out == {"writes": 120, "write_bytes": 100 * 2000 + 20 * 100, "small_writes": 20,
                   "reads": 0, "read_bytes": 0, "errors": 0}
    assert hist == (0,) * 7 + (20, 0, 0, 0, 100)  # 64-127 bytes, 1024-2047 bytes
    assert (back["reads"], back["read_bytes"], back["writes"]) == (*reads, 0)
    assert {s.comm for s in seen if ends(s) in (out_ends, back_ends)} == {
        Path("/proc/self/comm").read_text().strip()}
    assert tracer.losses() is None
    assert not Path(f"/proc/{pid}").exists()
    assert our_bpftraces() == []
    assert tracefs_mounts() == before


def test_a_tracer_stopping_leaves_another_one_tracing():
    """Sniffers on one kernel (a testbed's hosts) each run bpftrace: where tracefs is not
    mounted, each tracer's mount is its own, never seen in this namespace, so no other
    process can unmount it under a bpftrace that is starting; one stopping leaves the other
    tracing."""
    before = tracefs_mounts()
    settings = TraceSettings(interval_s=0.2, netns_inode=os.stat("/proc/self/ns/net").st_ino)
    first, second = SocketCallTracer(config(settings)), SocketCallTracer(config(settings))
    with second:
        with first:
            assert tracefs_mounts() == before  # mounted where only bpftrace sees it, if at all
        seen: list[SocketCallSummary] = []
        with socket.create_server(("127.0.0.1", 0)) as server:
            client = socket.create_connection(server.getsockname())
            peer, _ = server.accept()
            with client, peer:
                for _ in range(10):
                    client.sendall(b"x" * 100)
                out_ends = (os.getpid(), *client.getsockname(), *server.getsockname())
                await_counts(second, seen, lambda s: ends(s) == out_ends,
                             lambda c: c["writes"] >= 10)
    assert our_bpftraces() == []
    assert tracefs_mounts() == before


def test_only_the_namespace_asked_for_is_traced():
    """A testbed's hosts share one kernel, whose tracepoints fire for all of them: a tracer
    for host a sees a's sockets, not b's, nor the root namespace's."""
    hosts = make_pair()
    try:
        hosts.echo_servers("b", [7401], [])
        inode = os.stat(f"/run/netns/{hosts.ns('a')}").st_ino
        with SocketCallTracer(config(TraceSettings(interval_s=0.2, netns_inode=inode))) as tracer:
            with socket.create_server(("127.0.0.1", 0)) as server, \
                    socket.create_connection(server.getsockname()) as here:
                here.send(b"not in a")  # the root namespace: not traced
            hosts.probe("a", "tcp", hosts.addresses["b"], 7401, 10, 0.0)  # 10 x 32 bytes
            seen: list[SocketCallSummary] = []
            await_counts(tracer, seen, lambda s: s.remote_port == 7401,
                         lambda c: c["writes"] >= 10 and c["read_bytes"] >= 320)
        seen += tracer.drain()
    finally:
        hosts.remove()
    to_b, _ = add_up([s for s in seen if s.remote_port == 7401])
    assert (to_b["writes"], to_b["write_bytes"], to_b["small_writes"]) == (10, 320, 10)
    assert to_b["read_bytes"] == 320
    assert {s.local_addr for s in seen if s.remote_port == 7401} == {hosts.addresses["a"]}
    assert all(s.local_addr == hosts.addresses["a"] or s.local_port == 0 for s in seen)


def test_a_bpftrace_that_fails_says_why_and_leaves_nothing(tmp_path):
    before = tracefs_mounts()
    fake = tmp_path / "bpftrace"
    fake.write_text("#!/bin/sh\necho 'ERROR: something the kernel refused' >&2\nexit 1\n")
    fake.chmod(0o755)
    tracer = SocketCallTracer(TracerConfig(str(fake), config().settings))
    with pytest.raises(RuntimeFailure, match="did not start tracing: something the kernel"):
        tracer.start()
    assert our_bpftraces() == []
    assert tracefs_mounts() == before


def test_a_bpftrace_deaf_to_term_is_killed(tmp_path):
    """Silent, and ignoring TERM: start gives up after its timeout, stop escalates to KILL."""
    before = tracefs_mounts()
    fake = tmp_path / "bpftrace"
    fake.write_text("#!/bin/sh\ntrap '' TERM\nexec sleep 60\n")  # SIG_IGN survives exec
    fake.chmod(0o755)
    tracer = SocketCallTracer(TracerConfig(str(fake), config().settings), stop_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(RuntimeFailure, match=r"did not start tracing: nothing after 0.5 s"):
        tracer.start(timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert tracer.proc is not None
    assert tracer.proc.returncode == -9  # KILLed, and reaped
    assert not Path(f"/proc/{tracer.proc.pid}").exists()
    assert tracefs_mounts() == before


def test_a_late_bpftrace_is_kept_when_asked_and_drained_once_it_traces(tmp_path):
    """Fifty hosts of one machine compile at once: one still compiling after the timeout
    joins when it attaches instead of leaving its host untraced for the whole capture."""
    from sniffer.thread_changes import ThreadChangeParser

    fake = tmp_path / "bpftrace"
    ready = r'{"type": "printf", "data": "lg ready 1\n"}'
    change = r'{"type": "printf", "data": "lg thread 2000000000 7 7 10.0.0.1 80 10.0.0.2 2\n"}'
    fake.write_text(f"#!/bin/sh\nsleep 1.5\nprintf '%s\\n' '{ready}' '{change}'\n"
                    "exec sleep 60\n")
    fake.chmod(0o755)

    def tracer() -> SocketCallTracer:
        return SocketCallTracer(TracerConfig(str(fake), config().settings), program="x",
                                parser=ThreadChangeParser(wall_offset_s=0.0),
                                stop_timeout_s=0.5)

    with pytest.raises(RuntimeFailure, match=r"nothing after 0.5 s"):
        tracer().start(timeout_s=0.5)  # as before, unless asked
    late = tracer().start(timeout_s=0.5, keep_late=True)
    try:
        assert late.late
        assert late.running()
        deadline = time.monotonic() + 10
        seen: list = []
        while not seen and time.monotonic() < deadline:
            seen += late.drain()
            time.sleep(0.1)
        assert [(c.thread, c.local) for c in seen] == [(7, ("10.0.0.1", 80))]
    finally:
        late.stop()
    assert our_bpftraces() == []


def test_calls_that_full_maps_drop_are_reported():
    """bpftrace says nothing when a map is full; the kernel's count of all calls does."""
    settings = TraceSettings(interval_s=0.2, netns_inode=os.stat("/proc/self/ns/net").st_ino,
                             map_keys_max=16)  # a stats() map holds 8 sockets then
    with SocketCallTracer(config(settings)) as tracer, \
            socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        clients = [socket.create_connection(server.getsockname()) for _ in range(30)]
        for c in clients:
            c.send(b"x")
        deadline = time.monotonic() + 15
        while tracer.losses() is None:
            assert time.monotonic() < deadline, "no loss reported"
            time.sleep(0.05)  # polls; the loop awaits the report, with a timeout
        for c in clients:
            c.close()
    counted = sum(s.writes for s in tracer.drain() if s.remote_port == port)
    assert counted < 30
    assert tracer.parser.dropped_calls >= 30 - counted
    assert "calls not counted: the maps were full" in (tracer.losses() or "")

"""Which process holds a socket: /proc read for this namespace's processes only (a fake
/proc; the sniffer's netns tests read the real one)."""

import os
from pathlib import Path

from sniffer.kernel import Process, socket_owners


def _process(proc: Path, pid: int, comm: str, sockets: list[int], netns: Path | None) -> None:
    entry = proc / str(pid)
    (entry / "fd").mkdir(parents=True)
    (entry / "comm").write_text(comm + "\n")
    for fd, inode in enumerate(sockets):
        os.symlink(f"socket:[{inode}]", entry / "fd" / str(fd))
    os.symlink("/dev/null", entry / "fd" / str(len(sockets)))  # not a socket
    if netns is not None:
        (entry / "ns").mkdir()
        os.symlink(netns, entry / "ns" / "net")


def test_only_the_processes_of_this_namespace_are_read(tmp_path):
    ours, theirs = tmp_path / "net-ours", tmp_path / "net-theirs"
    ours.write_text("")
    theirs.write_text("")
    proc = tmp_path / "proc"
    _process(proc, 10, "nginx", [111, 112], ours)
    _process(proc, 20, "postgres", [222], theirs)  # another host of the testbed
    _process(proc, 30, "hidden", [333], None)  # its namespace not ours to read: looked at
    (proc / "self" / "ns").mkdir(parents=True)
    os.symlink(ours, proc / "self" / "ns" / "net")
    assert socket_owners(proc) == {111: Process(10, "nginx"), 112: Process(10, "nginx"),
                                   333: Process(30, "hidden")}
    assert set(socket_owners(proc, netns=None)) == {111, 112, 222, 333}
    assert set(socket_owners(proc, netns=theirs.stat().st_ino)) == {222, 333}

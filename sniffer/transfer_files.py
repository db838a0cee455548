"""The transfer's files (`sniffer.transfer`): each opened once, by a descriptor that is then
passed on (never reopened by name: a side runs as root, and a symbolic link swapped in between
would make it write elsewhere), made new (never over an existing file or a link), switched to
direct I/O where the file system allows it, filled with random bytes, removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path

__all__ = ["BLOCK", "SYNC_EVERY", "PathProblem", "create", "go_direct", "open_source",
           "remove_file", "write_source"]

BLOCK = 1 << 20  # bytes per read and write: GridFTP's 256 KiB ×4, a multiple of any sector
SYNC_EVERY = 64 << 20  # bytes of the source written between syncs: a stop is seen promptly
_NEW = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class PathProblem(Exception):
    """A side's file cannot be used as asked (the user's input: exit 2 on the host)."""


def create(path: Path, flags: int = os.O_WRONLY) -> int:
    """A new, empty file at `path` (O_EXCL, O_NOFOLLOW: never an existing file nor where a
    link points), opened with `flags`: its descriptor. PathProblem if it cannot be made."""
    try:
        return os.open(path, flags | _NEW, 0o600)
    except FileExistsError as e:
        what = "is a symbolic link" if path.is_symlink() else "exists"
        raise PathProblem(f"{path} {what}: linkgrad makes a new file, never writes over "
                          "one (give a path that does not exist)") from e
    except OSError as e:
        raise PathProblem(f"cannot make {path}: {e.strerror}") from e


def open_source(path: Path) -> int:
    """`path`, an existing regular file, opened to read (not through a symbolic link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as e:
        raise PathProblem(f"no file {path} to send") from e
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathProblem(f"{path} is a symbolic link: linkgrad does not follow one "
                              "(give the file itself)") from e
        raise PathProblem(f"cannot read {path}: {e.strerror}") from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PathProblem(f"{path} is not a file to send")
    return fd


def go_direct(fd: int, path: Path, notes: list[str]) -> bool:
    """O_DIRECT set on `fd` (blocking), and True; where the file system refuses it, the page
    cache is used, False, and a note says so."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
        return True
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
    fcntl.fcntl(fd, fcntl.F_SETFL, flags)
    notes.append(f"{path}: the file system refuses O_DIRECT: the page cache is measured, "
                 "not the disk")
    return False


def write_source(fd: int, size: int) -> None:
    """`size` bytes into the new file open at `fd`, written through the cache and synced to
    the disk every SYNC_EVERY bytes (so a stop is handled within the lease's grace, never
    after a sync of gigabytes), then rewound (they are read back with O_DIRECT)."""
    block = memoryview(os.urandom(BLOCK))  # not zeros: nothing may compress or skip them
    written = synced = 0
    while written < size:
        n = os.write(fd, block[:min(size - written, BLOCK)])
        if n == 0:
            raise OSError(errno.ENOSPC, "a short write: the disk is full")
        written += n
        if written - synced >= SYNC_EVERY:
            os.fdatasync(fd)
            synced = written
    os.fsync(fd)
    os.lseek(fd, 0, os.SEEK_SET)


def remove_file(path: Path) -> None:
    """`path` gone (it may be already)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()

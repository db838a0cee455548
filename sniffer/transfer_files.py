"""The transfer's files (`sniffer.transfer`): opened for direct I/O where the file system
allows it, made new (never over an existing file), filled with random bytes, removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

__all__ = ["BLOCK", "PathProblem", "create", "open_direct", "remove_file", "write_source"]

BLOCK = 1 << 20  # bytes per read and write: GridFTP's 256 KiB ×4, a multiple of any sector


class PathProblem(Exception):
    """A side's file cannot be used as asked (the user's input: exit 2 on the host)."""


def open_direct(path: Path, flags: int, notes: list[str]) -> tuple[int, bool]:
    """`path` opened with O_DIRECT, and True; where the file system refuses it, opened
    through the page cache, False, and a note saying so."""
    try:
        return os.open(path, flags | os.O_DIRECT, 0o600), True
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        notes.append(f"{path}: the file system refuses O_DIRECT: the page cache is measured, "
                     "not the disk")
        return os.open(path, flags, 0o600), False


def create(path: Path) -> None:
    """A new, empty file at `path` (O_EXCL): PathProblem if it exists or cannot be made."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError as e:
        raise PathProblem(f"{path} exists: linkgrad makes a new file, never writes over "
                          "one (give a path that does not exist)") from e
    except OSError as e:
        raise PathProblem(f"cannot make {path}: {e.strerror}") from e


def write_source(path: Path, size: int) -> None:
    """`size` bytes into the new file at `path`, written through the cache and synced to the
    disk (they are then read back with O_DIRECT, from the disk)."""
    block = os.urandom(BLOCK)  # not zeros: nothing on the way may compress or skip them
    with path.open("r+b") as f:
        left = size
        while left > 0:
            left -= f.write(block[:min(left, BLOCK)])
        f.flush()
        os.fsync(f.fileno())


def remove_file(path: Path) -> None:
    """`path` gone (it may be already)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()

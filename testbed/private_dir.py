"""The testbed's directory is root's: made exclusively, checked before every use, never
followed through a symlink.

Root runs what the directory holds (the undo list in state.json, the SSH identity, the configs
of every server), so a directory or file that another user could have planted or could replace
is refused, not used. The parent (`--root`, LINKGRAD_TESTBED_ROOT) is checked the same way up
to `/`: every directory on its real path must be root's and writable by no one else, unless it
is sticky (/var/tmp: others may add entries there but not rename or remove root's). The checked
real path is what is used from then on, so a symlink on the way cannot be re-pointed later.

Servers that run as their own users (postgres, www-data, mysql) get subdirectories of their own;
the testbed's directory is 0711, so they can reach those by name but list and replace nothing.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import shutil
import stat
from pathlib import Path

from linkgrad.errors import RuntimeFailure

TESTBED_MODE = 0o711  # traversable by the servers' users, listable and writable by root only
ROOT_UID = 0


def unsafe_reason(st: os.stat_result, owner_uid: int = ROOT_UID) -> str | None:
    """Why a path with this lstat() is not trustworthy, or None (pure: tested without root)."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if st.st_uid != owner_uid:
        return f"is owned by uid {st.st_uid}, not {owner_uid}"
    sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_mode & 0o022 and not sticky_dir:
        return f"is writable by its group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def trusted_parent(root: Path) -> Path:
    """The real path of `root` once it and every directory above it are root's alone."""
    real = Path(os.path.realpath(root))
    for path in (real, *real.parents):
        try:
            st = os.lstat(path)
        except OSError as e:
            raise RuntimeFailure(f"testbed root {root}: cannot use {path}: {e.strerror}") from e
        reason = unsafe_reason(st) or (None if stat.S_ISDIR(st.st_mode) else "is not a directory")
        if reason:
            raise RuntimeFailure(f"testbed root {root}: {path} {reason}: another user could "
                                 "replace the testbed's files; choose a root-owned directory")
    return real


def check_testbed_dir(directory: Path) -> bool:
    """Whether the testbed directory exists; raises if it exists but is not root's own (a
    planted directory is refused: nothing in it is read or run)."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return False
    reason = unsafe_reason(st) or (None if stat.S_ISDIR(st.st_mode) else "is not a directory")
    if reason:
        raise RuntimeFailure(f"{directory} {reason}: it is not this testbed's (another user "
                             "may have planted it); nothing in it was used. Check it and "
                             "remove it, or choose another --tag")
    return True


def make_testbed_dir(directory: Path) -> None:
    """Create the directory, failing if anything already has its name (no exist_ok)."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError as e:
        raise RuntimeFailure(f"{directory} appeared while the testbed was being made: "
                             "refusing to use it") from e
    set_owner_mode(directory, TESTBED_MODE)


def remove_testbed_dir(directory: Path) -> None:
    """Remove a checked testbed directory (rmtree works by file descriptors on Linux, so a
    symlink planted inside by a server's user is removed, not followed)."""
    if check_testbed_dir(directory):
        shutil.rmtree(directory)


def _ids(user: str | None, group: str | None) -> tuple[int, int]:
    uid = pwd.getpwnam(user).pw_uid if user else -1
    gid = grp.getgrnam(group).gr_gid if group else (pwd.getpwnam(user).pw_gid if user else -1)
    return uid, gid


def _open_no_symlink(path: Path) -> int:
    """A read-only descriptor of `path` itself (a symlink there is an error, not followed)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RuntimeFailure(f"{path} is a symbolic link: refusing to use it") from e
        raise


def set_owner_mode(path: Path, mode: int, user: str | None = None,
                   group: str | None = None) -> None:
    """chmod/chown `path` itself, never what a symlink there points to (O_NOFOLLOW)."""
    fd = _open_no_symlink(path)
    try:
        st = os.fstat(fd)
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise RuntimeFailure(f"{path} is neither a file nor a directory")
        if user or group:
            os.fchown(fd, *_ids(user, group))
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def ensure_dir(path: Path, mode: int, user: str | None = None, group: str | None = None
               ) -> Path:
    """A real directory at `path` (made if missing) with this owner and mode."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    if stat.S_ISLNK(os.lstat(path).st_mode):
        raise RuntimeFailure(f"{path} is a symbolic link: refusing to use it")
    set_owner_mode(path, mode, user, group)
    return path


def write_file(path: Path, text: str, mode: int = 0o600, user: str | None = None,
               group: str | None = None) -> None:
    """Replace `path` with `text` atomically: a fresh file (O_EXCL, O_NOFOLLOW) given its owner
    and mode before any byte is written, then renamed over the old name (a rename replaces a
    symlink there, it never writes through it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        if user or group:
            os.fchown(fd, *_ids(user, group))
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", closefd=False) as out:
            out.write(text)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def create_empty(path: Path, mode: int = 0o600) -> None:
    """An empty file of root's (a log a server's root process opens), kept if it is one."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        reason = unsafe_reason(os.fstat(fd))
        if reason:
            raise RuntimeFailure(f"{path} {reason}: refusing to use it")
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def read_trusted(path: Path) -> str | None:
    """The text of root's own regular file at `path` (None if there is none); a symlink, a
    file of another user's or one others may write is refused."""
    try:
        fd = _open_no_symlink(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise RuntimeFailure(f"cannot read {path}: {e.strerror}") from e
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        reason = unsafe_reason(st) or (None if stat.S_ISREG(st.st_mode) else "is not a file")
        if reason:
            raise RuntimeFailure(f"{path} {reason}: refusing to use it")
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RuntimeFailure(f"{path} is not UTF-8 text: {e}") from e

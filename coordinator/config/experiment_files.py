"""The local files an experiment names (ssh.config, ssh.known_hosts, each host's key) are
opened only when hosts are about to be reached, long after the experiment validated (a run
against the fake remote needs none of them). One that cannot be opened is the experiment's
mistake, so the problem is at the experiment's file, line and field, with the path as resolved
(relative to the experiment file) and the OS's reason."""

from __future__ import annotations

import os
from pathlib import Path

from coordinator.config.experiment import Experiment
from coordinator.config.yamlconf import line_of
from linkgrad.errors import InputError, Problem

Loc = tuple[str | int, ...]


def cannot_open(path: Path) -> str | None:
    """Why `path` cannot be opened for reading (the OS's words), or None. Non-blocking, so a
    FIFO does not hang the check."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return e.strerror or str(e)
    os.close(fd)
    return "it is a directory" if path.is_dir() else None


def local_files(experiment: Experiment) -> list[tuple[Path, str, Loc]]:
    """(path, what it is, the field naming it) of every local file the experiment names."""
    ssh = experiment.ssh
    out: list[tuple[Path, str, Loc]] = []
    if ssh is not None and ssh.config is not None:
        out.append((ssh.config, "the ssh_config", ("ssh", "config")))
    if ssh is not None and ssh.known_hosts is not None:
        out.append((ssh.known_hosts, "known_hosts", ("ssh", "known_hosts")))
    out += [(h.key, f"the key of host {h.name}", ("hosts", i, "key"))
            for i, h in enumerate(experiment.hosts) if h.key is not None]
    return out


def field_problem(experiment: Experiment, loc: Loc, message: str) -> Problem:
    """A problem at the experiment's field `loc`: at its file and line when it was read from
    one; a field a `testbed:` tag filled in is at that tag."""
    if experiment.testbed is not None and loc[0] in ("ssh", "hosts", "web_log"):
        loc, message = ("testbed",), f"{message} (the testbed's {'.'.join(map(str, loc))})"
    source = experiment.source
    try:
        line = line_of(source, loc) if source is not None else None
    except InputError:  # changed since it was read: the field still says where
        line = None
    return Problem(message, str(source) if source else None, line, ".".join(map(str, loc)))


def require_local_files(experiment: Experiment) -> None:
    """InputError at its field for every local file the experiment names that cannot be
    opened."""
    problems = [field_problem(experiment, loc, f"cannot read {path} ({what}): {reason}")
                for path, what, loc in local_files(experiment)
                if (reason := cannot_open(path)) is not None]
    if problems:
        raise InputError(problems)

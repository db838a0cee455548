"""Is the coordinator that wrote a `running` run.json still running? A coordinator killed with
SIGKILL never writes `interrupted`, so its journal says `running` forever; the next `run
--resume` and `report` ask this instead of believing it.

A pid alone proves nothing: pids are reused, and a reboot starts them over. The journal keeps
the machine, the boot (Linux's boot_id) and the process's start time (clock ticks since boot,
/proc/PID/stat field 22); the same pid with the same start in the same boot is the same
process. `state` is pure; the two readers of /proc are its thin shell.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from coordinator.config.run_records import Coordinator, RunJournal

State = Literal["alive", "gone", "unknown"]
PROC = Path("/proc")


def state(recorded: Coordinator | None, here: Coordinator,
          start_ticks_of: Callable[[int], int | None]) -> State:
    """`alive`: the recorded process still runs; `gone`: it does not (it died, or the machine
    rebooted); `unknown`: nothing recorded, or it ran on another machine."""
    if recorded is None or recorded.host != here.host:
        return "unknown"
    if recorded.boot_id is not None and here.boot_id is not None \
            and recorded.boot_id != here.boot_id:
        return "gone"
    ticks = start_ticks_of(recorded.pid)
    if ticks is None:
        return "gone"
    if recorded.start_ticks is not None and ticks != recorded.start_ticks:
        return "gone"  # the pid was reused by a later process
    return "alive"


def interrupted_reason(journal: RunJournal, here: Coordinator | None = None,
                       start_ticks_of: Callable[[int], int | None] | None = None) -> str | None:
    """Why a `running` journal is in fact interrupted (its coordinator is gone), or None
    when it is not (it did not say `running`, or its coordinator may still be running)."""
    if journal.status != "running":
        return None
    found = state(journal.coordinator, here or this_coordinator(),
                  start_ticks_of or process_start_ticks)
    if found != "gone":
        return None
    assert journal.coordinator is not None
    return (f"the coordinator (pid {journal.coordinator.pid}) ended without writing how the "
            "run ended: killed, or its machine stopped")


def still_running(journal: RunJournal) -> str | None:
    """A sentence when the journal's coordinator may still be writing this run directory
    (`alive`, or `unknown` for a journal of another machine); None when it is done or gone."""
    if journal.status != "running":
        return None
    c = journal.coordinator
    found = state(c, this_coordinator(), process_start_ticks)
    if found == "alive":
        assert c is not None
        return f"its coordinator (pid {c.pid}) is still running"
    if found == "unknown" and c is not None:
        return f"its coordinator ran on {c.host} (pid {c.pid}) and cannot be checked from here"
    return None


def this_coordinator() -> Coordinator:
    pid = os.getpid()
    return Coordinator(pid=pid, host=socket.gethostname(), boot_id=_boot_id(),
                       start_ticks=process_start_ticks(pid))


def _boot_id() -> str | None:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def process_start_ticks(pid: int) -> int | None:
    """The process's start (ticks since boot), or None when no such process lives."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: fields follow the last ')'
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19]) if fields[0] != "Z" else None  # a zombie is dead
    except (IndexError, ValueError):
        return None

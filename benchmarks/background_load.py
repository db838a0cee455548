"""Other work on this machine at random times, for measuring under "a machine with other work
running" (issue 12): a CPU hog, a disk writer, or both, in episodes of random length; and the
same work held steady, for measuring what an application does under each kind of it."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

KINDS = ("cpu", "disk", "both")


def start_work(kind: str, scratch: Path) -> list[subprocess.Popen[bytes]]:
    """The processes of one kind of other work: a busy Python (cpu), a dd loop with fsync
    (disk), or both; each in a process group of its own, so that stopping it stops the dd
    it is running too."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if kind in ("cpu", "both"):
            procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                          start_new_session=True))
        if kind in ("disk", "both"):
            procs.append(subprocess.Popen(
                ["sh", "-c", 'while :; do dd if=/dev/zero of="$0/fill" bs=1M count=256 '
                 "conv=fsync status=none; done", str(scratch)], start_new_session=True))
    except BaseException:
        stop_work(procs, scratch)
        raise
    return procs


def stop_work(procs: list[subprocess.Popen[bytes]], scratch: Path) -> None:
    """Ends what `start_work` started (by its process groups: every process in them is ours)
    and removes its file, whatever fails on the way."""
    try:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait(timeout=30)
    finally:
        (scratch / "fill").unlink(missing_ok=True)


@contextmanager
def steady_load(kind: str, scratch: Path, settle_s: float = 5.0) -> Iterator[None]:
    """One kind of the episodes' work ("none" for nothing) running throughout; entered
    `settle_s` after the work started (past the disk writer's first file)."""
    procs = start_work(kind, scratch) if kind != "none" else []
    try:
        if procs:
            time.sleep(settle_s)
        yield
    finally:
        stop_work(procs, scratch)


def busy_fractions(episodes: list[dict[str, Any]], start: float, end: float
                   ) -> dict[str, float]:
    """The share of [start, end) during which each kind of episode ran (episodes of a run do
    not overlap: each starts after the last has ended)."""
    out = dict.fromkeys(KINDS, 0.0)
    for e in episodes:
        out[e["kind"]] += max(0.0, min(end, e["at"] + e["length_s"]) - max(start, e["at"]))
    return {k: v / max(end - start, 1e-9) for k, v in out.items()}


class BackgroundLoad:
    """Episodes of other work at random times (gaps exponential with mean `mean_gap_s`,
    lengths uniform in 10-40 s): a CPU hog, a disk writer, or both (`start_work`). A context
    manager; `episodes` lists what ran when."""

    def __init__(self, seed: int, scratch: Path, mean_gap_s: float = 45.0) -> None:
        self.rng, self.scratch, self.mean_gap_s = random.Random(seed), scratch, mean_gap_s
        self.stop = threading.Event()
        self.episodes: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.started = 0.0

    def __enter__(self) -> BackgroundLoad:
        self.started = time.time()
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=120)

    def busy_fraction(self, start: float, end: float) -> float:
        """The share of [start, end) during which an episode ran."""
        return sum(busy_fractions(self.episodes, start, end).values())

    def _run(self) -> None:
        while not self.stop.wait(self.rng.expovariate(1 / self.mean_gap_s)):
            kind = self.rng.choice(list(KINDS))
            length = self.rng.uniform(10.0, 40.0)
            self.episodes.append({"at": time.time(), "kind": kind, "length_s": length})
            procs = start_work(kind, self.scratch)
            self.stop.wait(length)
            self.episodes[-1]["length_s"] = time.time() - self.episodes[-1]["at"]
            stop_work(procs, self.scratch)

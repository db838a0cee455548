"""Other work on this machine at random times, for measuring under "a machine with other work
running" (issue 12): a CPU hog, a disk writer, or both, in episodes of random length."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


class BackgroundLoad:
    """Episodes of other work at random times (gaps exponential with mean `mean_gap_s`,
    lengths uniform in 10-40 s): a CPU hog (a busy Python), a disk writer (dd with fsync), or
    both; every process is ours and is ended by its pid. A context manager; `episodes` lists
    what ran when."""

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
        busy = sum(max(0.0, min(end, e["at"] + e["length_s"]) - max(start, e["at"]))
                   for e in self.episodes)
        return busy / max(end - start, 1e-9)

    def _run(self) -> None:
        while not self.stop.wait(self.rng.expovariate(1 / self.mean_gap_s)):
            kind = self.rng.choice(["cpu", "disk", "both"])
            length = self.rng.uniform(10.0, 40.0)
            self.episodes.append({"at": time.time(), "kind": kind, "length_s": length})
            procs = []
            if kind in ("cpu", "both"):
                procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
            if kind in ("disk", "both"):
                procs.append(subprocess.Popen(
                    ["sh", "-c", f"while :; do dd if=/dev/zero of={self.scratch}/fill bs=1M "
                     "count=256 conv=fsync status=none; done"]))
            self.stop.wait(length)
            self.episodes[-1]["length_s"] = time.time() - self.episodes[-1]["at"]
            for p in procs:
                p.send_signal(signal.SIGKILL if p.args[0] == sys.executable else signal.SIGTERM)
                p.wait(timeout=30)
            (self.scratch / "fill").unlink(missing_ok=True)

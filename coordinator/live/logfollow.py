"""The web log, followed over SSH from the moment the run starts (`tail -n 0 -F`).

Lines are kept as they arrive (the raw samples go to the run's output, so `linkgrad gradient`
can recompute any link offline) and parsed on demand with the same parser as files.
"""

from __future__ import annotations

import bisect
import threading
from pathlib import Path

from coordinator.live.clock import SYSTEM, Clock
from linkgrad.protocol.jsonlines import Channel
from linkgrad.watch import FLUSH_S, LAG_S, WATCH_S, judged_window
from linkgrad.weblog.model import RequestLog
from linkgrad.weblog.read import choose_format, line_parser


def follow_argv(python: str, path: str) -> list[str]:
    """`tail -F` of the log, leased: on a quiet log it would outlive the channel otherwise.
    `--` ends tail's options: a path that starts with `-` is still a path."""
    return [python, "-m", "injector.leased", "--", "tail", "-n", "0", "-F", "--", path]


class LogFollower:
    def __init__(self, channel: Channel, source: str, fmt: str, log_format: str | None,
                 clock: Clock = SYSTEM) -> None:
        self.what = f"log follower of {source}"
        self.source = source
        self.clock = clock
        self.parse, _ = line_parser(choose_format(Path(source), fmt, log_format), log_format)
        self.lines: list[str] = []
        self.arrivals: list[float] = []  # when each line came in (sorted)
        self._lag_s = LAG_S
        self._lock = threading.Lock()
        self.channel = channel
        self.reader = threading.Thread(target=self._read, name=self.what, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.channel.lines():
            self._take(line)

    def _take(self, line: str) -> None:
        now = self.clock.time()
        with self._lock:
            self.lines.append(line)
            self.arrivals.append(now)

    def judged(self) -> RequestLog:
        """The requests the abort limits judge: those that started in a window ending a lag
        ago (`linkgrad.watch.judged_window`), so every one of them has been logged by now."""
        recent = self.recent(WATCH_S + self._lag_s + 2 * FLUSH_S)
        judged, self._lag_s = judged_window(recent, self.clock.time())
        return judged

    def recent(self, window_s: float) -> RequestLog:
        """The requests logged over the last `window_s`, parsed (a few thousand lines)."""
        since = self.clock.time() - window_s
        with self._lock:
            lines = self.lines[bisect.bisect_left(self.arrivals, since):]
        return self.parse(lines, self.source)

    def snapshot(self) -> RequestLog:
        with self._lock:
            lines = list(self.lines)
        return self.parse(lines, self.source)

    def save(self, path: Path) -> None:
        with self._lock:
            path.write_text("".join(line + "\n" for line in self.lines), errors="surrogateescape")

    def close(self) -> None:
        self.channel.close()  # EOF first: the lease ends

"""A child process's pipes as a daemon `Channel` (`linkgrad.protocol.jsonlines`): the testbed's
daemons started locally or in a namespace, for the pairs, SNAP's validation and benchmarks.
Here, not in the pure library, because it waits on and kills processes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator


class ProcessChannel:
    """A child process's pipes as a Channel (a daemon started locally or in a namespace)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.stdin is None or proc.stdout is None:
            raise ValueError("a ProcessChannel needs the child's stdin and stdout as pipes")
        self.proc = proc
        self.stdin, self.stdout = proc.stdin, proc.stdout

    def send(self, data: bytes) -> None:
        self.stdin.write(data)
        self.stdin.flush()

    def lines(self) -> Iterator[str]:
        for raw in self.stdout:  # bad bytes kept as they came: a log parser counts the line
            yield raw.decode(errors="surrogateescape").rstrip("\n")

    def close_input(self) -> None:
        if not self.stdin.closed:
            self.stdin.close()

    def exit_status(self, timeout_s: float) -> int | None:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        """EOF first; a child still running after that is killed (its lease has ended), so
        closing its stdout never waits on a reader blocked in it."""
        self.close_input()
        if self.exit_status(5.0) is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.stdout.close()

"""The live layer's clock: the system's, or a fake one that tests advance by hand.

Every wait of a run (training, a wave, the tail of the log) goes through the session's clock,
so a test can run the whole loop in virtual time against a fake remote.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float: ...  # unix seconds (the web log's and the injector's clock)

    def monotonic(self) -> float: ...  # for waits: a step of the wall clock moves no wait

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM = SystemClock()


def sleep_checking(clock: Clock, seconds: float, check: Callable[[], None] | None = None,
                   step: float = 1.0) -> None:
    """Sleep, calling `check` every `step` s (it raises to stop: a limit crossed)."""
    end = clock.monotonic() + seconds
    while (left := end - clock.monotonic()) > 0:
        clock.sleep(min(step, left))
        if check is not None:
            check()

"""The cyclic garbage collector paused while a big trace's objects are made.

Linking, instances and patterns make millions of small tuples, dicts and dataclasses that
hold no reference cycles; each collection they set off walks every live object (the whole
trace's events too), so on a CoDeeN-sized trace the collector alone costs tens of seconds.
Reference counting still frees everything as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["no_cycle_collection"]


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

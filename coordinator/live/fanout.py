"""Many hosts at once, at most `limit` at a time: each host's result or its failure, and one
error naming every host that failed beside those that did not.

fabric's `ThreadingGroup` and `GroupResult` are the model (a result per host, one
`GroupException` holding every failure), but fabric itself is not used here: its group starts
one thread per host with no bound, and behind a bastion sshd's `MaxStartups` (10 by default)
refuses every unauthenticated connection beyond the tenth; and its `Connection` would replace
`ssh.Connection`, which gives paramiko only host keys and ssh_config entries checked first
(never auto-added). A bounded thread pool over our own connections does both.

    >>> done = each_host(["a", "b", "c"], lambda n: int("x" if n == "b" else "1"), limit=2)
    >>> done.succeeded, sorted(done.failed)
    ({'a': 1, 'c': 1}, ['b'])
    >>> print(HostsFailed("connect", done.failed, done.succeeded))
    connect: 1 of 3 host(s) failed: b: invalid literal for int() with base 10: 'x' (a, c did not)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from linkgrad.errors import RuntimeFailure

__all__ = ["DEFAULT_PARALLEL", "HostResults", "HostsFailed", "each_host"]

T = TypeVar("T")

DEFAULT_PARALLEL = 10  # sshd's MaxStartups default: more at once are refused behind a bastion


@dataclass
class HostResults(Generic[T]):
    """Per host, what `work` gave or what it raised, in the order the hosts were given."""

    succeeded: dict[str, T] = field(default_factory=dict)
    failed: dict[str, Exception] = field(default_factory=dict)

    def raise_failed(self, what: str, optional: Collection[str] = ()) -> None:
        """HostsFailed naming every failed host, if any did that is not `optional`."""
        if set(self.failed) - set(optional):
            raise HostsFailed(what, self.failed, self.succeeded)


class HostsFailed(RuntimeFailure):
    """`what` failed on some hosts: each named with its reason, the others listed too."""

    def __init__(self, what: str, failed: dict[str, Exception], succeeded: Iterable[str] = ()
                 ) -> None:
        self.what, self.failed, self.succeeded = what, dict(failed), tuple(succeeded)
        total = len(self.failed) + len(self.succeeded)
        reasons = "; ".join(f"{name}: {_reason(name, e)}" for name, e in self.failed.items())
        others = f" ({', '.join(self.succeeded)} did not)" if self.succeeded else ""
        super().__init__(f"{what}: {len(self.failed)} of {total} host(s) failed: {reasons}"
                         f"{others}")


def _reason(name: str, e: Exception) -> str:
    """The exception's text without the host's name again where it leads with it."""
    text = str(e) or type(e).__name__
    for lead in (f"{name}: ", f"ssh {name} "):
        if text.startswith(lead):
            return text[len(lead):].lstrip()
    return text


def each_host(names: Iterable[str], work: Callable[[str], T], limit: int = DEFAULT_PARALLEL,
              keep: Callable[[str, T], None] | None = None) -> HostResults[T]:
    """`work(name)` for every host, at most `limit` at once. An Exception is that host's
    failure; anything else (KeyboardInterrupt in this thread, a bug's BaseException in
    `work`) stops the hosts not yet started, waits for those under way (each bounded by its
    own timeouts) and is raised. `keep(name, result)` is called here, in the caller's thread,
    as each host succeeds, also on the way out of an interrupt: what was opened is known to
    whoever must close it."""
    order = list(dict.fromkeys(names))
    failed: dict[str, Exception] = {}
    succeeded: dict[str, T] = {}
    if not order:
        return HostResults()
    limit = max(1, min(limit, len(order)))
    pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="host")
    submitted: dict[Future[T], str] = {}  # every host started, never forgotten
    handed: set[Future[T]] = set()  # those whose outcome is taken

    def take(future: Future[T]) -> None:
        name = submitted[future]
        error = future.exception()
        if error is None:
            value = future.result()
            succeeded[name] = value
            if keep is not None:  # before it counts as handed: an interrupt between the two
                keep(name, value)  # hands it over again (keep is idempotent), never not at all
            handed.add(future)
        elif isinstance(error, Exception):
            handed.add(future)
            failed[name] = error
        else:
            raise error

    waiting = iter(order)  # submitted only as a place frees: none starts after a stop
    try:
        for name in itertools.islice(waiting, limit):
            future = pool.submit(work, name)
            submitted[future] = name
        while len(handed) < len(submitted):
            done, _ = wait([f for f in submitted if f not in handed],
                           return_when=FIRST_COMPLETED)
            for future in done:
                take(future)
            for name in itertools.islice(waiting, len(done)):
                future = pool.submit(work, name)
                submitted[future] = name
    finally:
        # on the way out of an interrupt too: the hosts under way are waited for (each
        # bounded by its own timeouts), and what they opened is handed over to be closed
        try:
            pool.shutdown(wait=True)
        finally:
            for future in submitted:
                if (keep is not None and future not in handed and future.done()
                        and not future.cancelled() and future.exception() is None):
                    keep(submitted[future], future.result())
                    handed.add(future)
    return HostResults({n: succeeded[n] for n in order if n in succeeded},
                       {n: failed[n] for n in order if n in failed})

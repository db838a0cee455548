"""A time budget for linking, and what was cut to keep it.

Linking a busy server's calls by context can cost far more than §5.1 (every ready context is
a candidate, every doubt a hypothesis), and the passive half of a run must never hold up the
active half. So linking gets a budget in seconds (a fraction of the capture's duration), split
between its passes: the passes that fit the model stop early when the next would overrun their
share, and the last pass gives each node a share in proportion to its events. A node over its
share goes on greedily (one hypothesis: the beam's cost is its width times the node's ready
contexts); over twice its share, its remaining messages are left to §5.1, which weighs them
all at once over arrays. Each cut is a `Fallback`, said in paths.json and on the terminal.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from linkgrad.paths.node_beam import NodeBeam

if TYPE_CHECKING:  # the result holds this module's Fallbacks: imported by it at run time
    from linkgrad.paths.result import PathsResult

__all__ = [
    "CHECK_EVERY",
    "FINAL_SHARE",
    "FIRST_PASS_SHARE",
    "FIT_SHARE",
    "NARROW_WIDTH",
    "PROGRESS_EVERY_S",
    "Budget",
    "Fallback",
    "NodeShare",
    "Pace",
    "Progress",
    "linking_lines",
    "progress_line",
    "unlimited",
]

FIT_SHARE = 0.6  # of the budget, for the passes that fit the model (the first one included)
FINAL_SHARE = 0.9  # the last pass ends by then: the links' table is built after it
FIRST_PASS_SHARE = 0.25  # of the budget, for the first (greedy) pass
NARROW_WIDTH = 4  # hypotheses a node's beam keeps once half its share of a pass is gone
CHECK_EVERY = 256  # events between looks at the clock
PROGRESS_EVERY_S = 1.0


@dataclass(frozen=True)
class Fallback:
    node: str
    linker: str  # what linked the rest of its messages: "narrow", "greedy" or "wap5"
    why: str


@dataclass(frozen=True)
class Progress:
    """Where linking stands: for a line on stderr."""

    linked: int  # events walked in this pass
    events: int  # events in this pass
    pass_number: int
    passes: int
    elapsed_s: float
    budget_s: float | None  # None: no budget


@dataclass
class Budget:
    """A deadline for linking (`seconds` None: none) and the cuts made to keep it."""

    seconds: float | None
    progress: Callable[[Progress], None] | None = None
    clock: Callable[[], float] = time.monotonic
    node_names: tuple[str, ...] = ()  # for the fallbacks (indices without)
    fallbacks: list[Fallback] = field(default_factory=list)
    passes_cut: int = 0  # fitting passes left out

    def __post_init__(self) -> None:
        self.started_s = self.clock()
        self._said_s = self.started_s

    def elapsed_s(self) -> float:
        return self.clock() - self.started_s

    def until(self, share: float) -> float:
        """The clock reading by which `share` of the budget is spent (inf: no budget)."""
        return math.inf if self.seconds is None else self.started_s + share * self.seconds

    def tell(self, linked: int, events: int, pass_number: int, passes: int,
             now_s: float) -> None:
        """A progress line, at most once a second."""
        if self.progress is not None and now_s - self._said_s >= PROGRESS_EVERY_S:
            self._said_s = now_s
            self.progress(Progress(linked, events, pass_number, passes,
                                   now_s - self.started_s, self.seconds))


class Pace:
    """One pass's deadline, shared out among its nodes by their calls."""

    def __init__(self, budget: Budget, deadline_s: float, pass_number: int, passes: int,
                 final: bool) -> None:
        self.budget, self.deadline_s, self.final = budget, deadline_s, final
        self.pass_number, self.passes = pass_number, passes
        self.calls, self.events, self.calls_walked, self.events_walked = 0, 0, 0, 0

    def begin(self, calls: int, events: int) -> None:
        self.calls, self.events, self.calls_walked, self.events_walked = calls, events, 0, 0

    def node(self, calls: int, events: int) -> NodeShare:
        """A node with `calls` among its `events`: its share of the time left (a node
        that makes no call only follows its requests and replies, in a time linear in
        them: no limit)."""
        now = self.budget.clock()
        left = self.calls - self.calls_walked
        share = (self.deadline_s - now) * calls / left if calls and left else math.inf
        self.calls_walked += calls
        self.events_walked += events
        return NodeShare(self, now, max(share, 0.0), self.events_walked - events)


class NodeShare:
    """A node's share of its pass's time: past half of it, the beam narrows to
    NARROW_WIDTH hypotheses; past three quarters, to one (greedy); past all of it, the rest
    of the node is left (to §5.1 if this is the last pass)."""

    def __init__(self, pace: Pace, start_s: float, share_s: float, walked_before: int
                 ) -> None:
        self.pace, self.start_s, self.share_s = pace, start_s, share_s
        self.walked_before = walked_before

    def keep_up(self, k: int, beam: NodeBeam, node: int) -> bool:
        """After `k` of the node's events: whether to go on (the beam narrowed if need be)."""
        pace, budget = self.pace, self.pace.budget
        now = budget.clock()
        budget.tell(self.walked_before + k, pace.events, pace.pass_number, pace.passes, now)
        spent = now - self.start_s
        if spent <= self.share_s / 2:
            return True
        name = budget.node_names[node] if budget.node_names else str(node)
        if spent <= self.share_s * 3 / 4:
            if beam.width > NARROW_WIDTH:
                beam.settle()
                beam.width = NARROW_WIDTH
                if pace.final:
                    budget.fallbacks.append(Fallback(name, "narrow", (
                        f"half its {self.share_s:.2f} s of the budget gone after {k} "
                        "events")))
            return True
        if beam.width > 1:
            beam.settle()
            beam.width = 1
            if pace.final:
                budget.fallbacks.append(Fallback(name, "greedy", (
                    f"3/4 of its {self.share_s:.2f} s of the budget gone after {k} events")))
        if spent <= self.share_s:
            return True
        if pace.final:
            budget.fallbacks.append(Fallback(name, "wap5", (
                f"its {self.share_s:.2f} s of the budget gone after {k} events")))
        return False


def unlimited() -> Budget:
    return Budget(None)


def progress_line(p: Progress) -> str:
    """`p` for a log line of at most 80 columns."""
    left = "" if p.budget_s is None else f" of {p.budget_s:.1f} s"
    return (f"linking: pass {p.pass_number}/{p.passes}, {p.linked:,} of {p.events:,} "
            f"events, {p.elapsed_s:.1f} s{left}")


def linking_lines(result: PathsResult) -> list[str]:
    """What paths.json says of its linking (budget, fallbacks, folded workers), as lines for
    the terminal."""
    b = result.budget
    if b is None:  # an older paths.json
        lines = [f"linked by {result.linker} (no budget recorded)"]
    elif b.seconds is None or result.duration_s is None:
        lines = [f"linked by {result.linker} in {b.linking_s:.1f} s (no limit)"]
    else:
        lines = [f"linked by {result.linker} in {b.linking_s:.1f} s (budget {b.seconds:.1f} s "
                 f"= {b.fraction:g} × {result.duration_s:.0f} s)"]
    if b is not None and b.passes_cut:
        lines.append(f"  {b.passes_cut} of the model's fitting passes left out")
    for f in result.fallbacks:
        how = {"narrow": f"{NARROW_WIDTH} hypotheses",
               "greedy": "one hypothesis"}.get(f.linker, "§5.1 for the rest")
        lines.append(f"  {f.node}: {how} ({f.why})")
    if result.fallbacks:
        lines.append("  (a larger --budget, or paths.budget in the experiment, links more "
                     "by context)")
    for w in result.folded:
        lines.append(f"  {w.worker} is {w.into}'s worker (reached unseen, e.g. by a "
                     f"Unix socket): {100 * w.covered:.0f}% of its {w.calls} calls "
                     "came while a request was open")
    return lines

"""`linkgrad bottleneck`'s answer: the tests on a transfer's intervals as a typed model
(`--json` prints it), the text read from it in 80 columns, and what to look at next."""

from __future__ import annotations

import textwrap

from coordinator.cli.answer import Answer, absent_when_none
from linkgrad.bottleneck import Verdict, bottleneck
from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.protocol.transfer import TransferInterval, tput_i

__all__ = ["BottleneckAnswer", "ResourceRow", "TTest", "answer_of", "describe", "next_step"]


class ResourceRow(Answer):
    resource: str
    tput_i_bytes_per_s: float  # the mean over its intervals
    intervals: int
    tested: bool
    why_not: str | None = absent_when_none()  # an untested resource's reason


class TTest(Answer):
    """The candidate's one-sided Welch t-test against one other resource."""

    other: str
    t: float
    dof: float
    p: float
    lower: bool  # p < alpha / 2: the candidate is slower than it


class BottleneckAnswer(Answer):
    source: str  # HOST:PATH, or the saved lines' file
    destination: str | None
    bytes: int
    seconds: float  # the receiver's, first byte to last
    resources: list[ResourceRow]
    candidate: str
    bottleneck: str | None  # None: statistically similar
    similar: list[str]  # the resources the tests cannot tell from the candidate
    verdict: str
    alpha: float
    tests: list[TTest]
    next_step: str
    notes: list[str]


def answer_of(intervals: list[TransferInterval], source: str, destination: str | None,
            alpha: float) -> BottleneckAnswer:
    """The tests on a whole transfer's intervals; `destination` None: they were saved in the
    file `source` (a transfer too short to test is that file's problem, exit 2)."""
    try:
        verdict = bottleneck(tput_i(intervals), alpha)
    except ValueError as e:
        if destination is None:
            raise InputError(Problem(str(e), source)) from e
        raise RuntimeFailure(f"{e}: a larger --size, or a shorter --interval") from e
    received = next(i for i in intervals if i.event == "done" and i.side == "receive")
    notes = sorted({n for i in intervals for n in i.notes or ()})
    return BottleneckAnswer(
        source=source, destination=destination, bytes=received.bytes or 0,
        seconds=received.seconds or 0.0,
        resources=[ResourceRow(resource=r, tput_i_bytes_per_s=mean,
                               intervals=verdict.intervals[r], tested=r not in verdict.untested,
                               why_not=verdict.untested.get(r))
                   for r, mean in sorted(verdict.means.items(), key=lambda kv: kv[1])],
        candidate=verdict.candidate, bottleneck=verdict.bottleneck,
        similar=list(verdict.similar), verdict=verdict.describe(), alpha=alpha,
        tests=[TTest(other=c.other, t=c.t, dof=c.dof, p=c.p, lower=c.lower)
               for c in verdict.comparisons],
        next_step=next_step(verdict, source, destination), notes=notes)


def next_step(verdict: Verdict, source: str, destination: str | None) -> str:
    """What to look at next, by what the tests named."""
    sender = source.partition(":")[0] if destination else "the sender"
    receiver = destination.partition(":")[0] if destination else "the receiver"
    if verdict.bottleneck is None:
        return ("the tests cannot tell these apart: relieve one and run again, or run longer "
                "(more intervals) to see whether one is slower")
    return {
        "network.receive": f"the network from {sender} to {receiver}: its capacity, loss "
                           "and queues (linkgrad profile shows TCP's view of it)",
        "disk.read": f"the disk under the file on {sender}: a faster or striped disk, or "
                     "another path to read from",
        "disk.write": f"the disk under the destination on {receiver}: a faster or striped "
                      "disk, or another path to write to",
        "cpu.sender": f"the CPU of {sender}: what else runs there (its load, its cgroup's "
                      "CPU limits)",
        "cpu.receiver": f"the CPU of {receiver}: what else runs there (its load, its "
                        "cgroup's CPU limits)",
    }.get(verdict.bottleneck, f"{verdict.bottleneck}: relieve it and run again")


def describe(a: BottleneckAnswer, width: int = 80) -> str:
    """The answer as text, in `width` columns."""
    mb_s = a.bytes / a.seconds / 1e6 if a.seconds else 0.0
    route = f"{a.source} -> {a.destination}" if a.destination else a.source
    out = [_wrap(route, width),
           f"{a.bytes / 2**20:.1f} MiB in {a.seconds:.1f} s ({mb_s:.1f} MB/s)",
           "", f"{'resource':<18}{'tput_i MB/s':>14}{'intervals':>11}"]
    for r in a.resources:
        mark = "  <- candidate" if r.resource == a.candidate else \
            "  (not tested)" if not r.tested else ""
        out.append(f"{r.resource:<18}{r.tput_i_bytes_per_s / 1e6:>14.1f}{r.intervals:>11}"
                   f"{mark}")
    out += ["", _wrap(f"verdict: {a.verdict}", width),
            _wrap(f"t-tests (Welch, one-sided, at alpha/2 = {a.alpha / 2:g}): is "
                  f"{a.candidate} lower than", width)]
    for t in a.tests:
        out.append(f"  {t.other:<18} t = {t.t:8.2f}  dof {t.dof:6.1f}  p = {t.p:<8.2g}"
                   f"  {'lower' if t.lower else 'not lower'}")
    out += [_wrap(f"{r.resource}: {r.why_not}", width) for r in a.resources if r.why_not]
    out += ["", _wrap(f"next: {a.next_step}", width)]
    out += [_wrap(f"note: {n}", width) for n in a.notes]
    return "\n".join(out)


def _wrap(text: str, width: int) -> str:
    return textwrap.fill(text, width, subsequent_indent="  ", break_on_hyphens=False)

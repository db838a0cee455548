"""The verdict on a measured gradient beside its passive one, and the cause the evidence
names for a difference.

A gradient counts the round trips a request's critical path makes over a link (Chen 2008
§2.1); the causal paths count the application's messages. They part where TCP or the host
adds crossings the messages do not show (above: a reply of several windows, a handshake per
request, Nagle's wait for an ACK, a retransmission, a queue that grows with the delay, a
saturated host) or where the critical path is not one chain (below: parallel branches and
asynchronous calls, whose delay is partly or wholly hidden).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from linkgrad.explain.evidence import HostBusy, LinkEvidence
from linkgrad.explain.passive import PassiveGradient

__all__ = ["AGREE_WITHIN", "DELAYED_ACK_SHARE", "GROWTH", "HOST_SATURATED",
           "INITIAL_WINDOW_SEGMENTS", "LOSS", "LOSS_SHARE", "MACHINE_CPU_GROWTH",
           "NEW_CONNECTION_PER_REQUEST", "OFF_CRITICAL", "OWN_CPU_GROWTH", "WINDOW",
           "WINDOW_SHARE", "Cause", "Verdict", "causes_above", "causes_below", "judge", "noise"]

Verdict = Literal["agree", "above", "below", "passive-only", "active-only"]

# Intervals this close still agree: a gradient measures a little beside the ideal count
# (second-order effects of the delay itself, tests/test_run_netns.py).
AGREE_WITHIN = 0.1
INITIAL_WINDOW_SEGMENTS = 10  # Linux's initial congestion window (RFC 6928)
NEW_CONNECTION_PER_REQUEST = 0.5  # connections opened per request measured, at least
DELAYED_ACK_SHARE = 0.1  # of the link's connection-seconds
GROWTH = 1.5  # times the passive phase's share: the delay brought them
LOSS = ("fast_retransmit", "timeout")
WINDOW = ("receiver_window", "send_buffer")
WINDOW_SHARE = 0.01  # of the link's connection-seconds
LOSS_SHARE = 0.01  # of the link's connection-seconds
HOST_SATURATED = 0.9  # machine CPU or disk busy share
OWN_CPU_GROWTH = (1.5, 0.25)  # own cores grew this many times and by this many cores
MACHINE_CPU_GROWTH = 0.2  # the machine's busy share grew this much (and 1.5 times)
OFF_CRITICAL = 0.9  # a link's crossings on the critical path less often than this


@dataclass(frozen=True)
class Cause:
    kind: str  # "window", "handshake", "loss", "nagle", "queue", "host", "parallel", ...
    text: str


def judge(gradient: float | None, ci95: tuple[float, float] | None,
          passive: PassiveGradient | None) -> Verdict:
    """Which side is higher beyond both intervals (and `AGREE_WITHIN`), or which side is
    missing. A gradient without an interval is compared as a point."""
    if gradient is None:
        return "passive-only"
    if passive is None:
        return "active-only"
    lo, hi = ci95 or (gradient, gradient)
    plo, phi = passive.ci95
    if lo - AGREE_WITHIN > phi:
        return "above"
    if hi + AGREE_WITHIN < plo:
        return "below"
    return "agree"


def causes_above(e: LinkEvidence) -> list[Cause]:
    """What adds round trips the messages do not show, most specific first."""
    found: list[Cause] = []
    # a window limit or a loss costs round trips on the link whether or not the delay brought
    # it: each is named where it is common, the passive phase's share said beside it
    limited, before = _share(e.snap, WINDOW), _share(e.snap_passive, WINDOW)
    limited = limited if limited >= WINDOW_SHARE else 0.0
    big = [d for d in e.traffic
           if (d.segments_per_write or 0) > INITIAL_WINDOW_SEGMENTS]
    if big or limited:
        sizes = ", ".join(f"{d.src_host}->{d.dst_host} {d.bytes_per_write / 1e3:.0f} kB "
                          f"({d.segments_per_write:.0f} segments)" for d in big
                          if d.bytes_per_write is not None and d.segments_per_write)
        limits = (f"SNAP: receiver window or send buffer {limited:.1%} of the link's "
                  f"connection-seconds while measured, {before:.1%} in the passive phase"
                  if limited else "")
        found.append(Cause("window", "messages larger than one window take several round "
                           "trips (" + "; ".join(x for x in (sizes and f"per write {sizes}",
                                                            limits) if x) + ")"))
    # the paths count the set-ups they saw: only those the delay brought are an excess (a
    # pool that opens connections as latency grows)
    if (found_handshake := _handshakes(e)) is not None:
        found.append(found_handshake)
    # a fast retransmit waits about a round trip, so one there all along grows with the
    # delay as well; a timeout waits RTO, 200 ms at least: only those the delay brought count
    timeouts = _share(e.snap, ("timeout",))
    timeouts_grew = _grew(timeouts, _share(e.snap_passive, ("timeout",)), bool(e.snap_passive))
    loss = _share(e.snap, ("fast_retransmit",)) + (timeouts if timeouts_grew else 0.0)
    loss_before = _share(e.snap_passive, LOSS)
    if loss >= LOSS_SHARE:
        what = "fast retransmit or timeout" if timeouts_grew and timeouts else \
            "fast retransmit"
        found.append(Cause("loss", f"retransmissions cost round trips (SNAP: {what} "
                           f"{loss:.1%} of the link's connection-seconds "
                           f"while measured, {loss_before:.1%} in the passive phase)"))
    for t in e.trends:
        if t.differ and t.high > t.low:
            found.append(Cause("queue", f"a queue or lock behind the link: the gradient grows "
                               f"with the {t.what} ({t.low:.2f} to {t.high:.2f})"))
    for h in e.hosts:
        if (why := _busy(h)) is not None:
            found.append(Cause("host", f"{h.host} busy during the measurement ({why})"))
    share, before = _share(e.snap, ("delayed_ack",)), _share(e.snap_passive, ("delayed_ack",))
    # delayed ACKs common without the delay too are the application's habit, not the excess
    if share >= DELAYED_ACK_SHARE and _grew(share, before, bool(e.snap_passive)):
        found.append(Cause("nagle", f"delayed ACKs with Nagle hold small writes for an ACK "
                           f"(SNAP: {share:.0%} of the link's connection-seconds while "
                           f"measured, {before:.0%} in the passive phase)"))
    return found


def causes_below(e: LinkEvidence) -> list[Cause]:
    """What hides some of the link's delay from the response."""
    found: list[Cause] = []
    if e.packets_delayed == 0:
        found.append(Cause("injection", "no packet was delayed: the injector saw none of "
                           "the link's traffic"))
    b = e.branches
    # a link on the critical path nearly always cannot hide its delay behind a sibling
    if b is not None and b.crossing_requests and b.critical_share < OFF_CRITICAL:
        if b.parallel:
            found.append(Cause("parallel", "parallel branches: sent beside "
                               + ", ".join(b.parallel) + f" (on the critical path "
                               f"{b.critical_share:.0%} of the time)"))
        else:
            found.append(Cause("async", f"asynchronous calls: on the critical path "
                               f"{b.critical_share:.0%} of the time"))
    return found


def noise(notes: tuple[str, ...]) -> Cause | None:
    """A measurement wider than planned may miss by chance: said beside any cause."""
    if any(n.startswith("wider than wanted") for n in notes):
        return Cause("noise", "the measurement is wider than planned (its note): 1 in 20 "
                     "intervals misses by chance, more often a wide one from few cycles")
    return None


def _share(seconds: dict[str, float], classes: tuple[str, ...]) -> float:
    """The classes' share of the link's connection-seconds (each class counted apart, as SNAP
    sums them)."""
    total = sum(seconds.values())
    return sum(seconds.get(c, 0.0) for c in classes) / total if total > 0 else 0.0


def _grew(now: float, before: float, known: bool) -> bool:
    """More while measured than in the passive phase by GROWTH (or no passive phase seen)."""
    return not known or now >= GROWTH * before


def _handshakes(e: LinkEvidence) -> Cause | None:
    if not e.window_requests:
        return None
    opened = max((d.opened for d in e.traffic), default=0)  # each end sees it
    now = opened / e.window_requests
    before_counts = [d.opened_passive for d in e.traffic if d.opened_passive is not None]
    known = bool(before_counts) and e.passive_requests > 0
    before = max(before_counts) / e.passive_requests if known else 0.0
    if now < NEW_CONNECTION_PER_REQUEST or not _grew(now, before, known):
        return None
    return Cause("handshake", f"new connections per request grew with the delay ({now:.2f} "
                 f"while measured, {before:.2f} in the passive phase): each handshake adds "
                 "round trips the paths did not count")


def _busy(h: HostBusy) -> str | None:
    if h.cpu_busy is not None and h.cpu_busy >= HOST_SATURATED:
        return f"machine CPU {h.cpu_busy:.0%}"
    times, plus = OWN_CPU_GROWTH
    if (h.cpu_busy is not None and h.passive_cpu_busy is not None
            and h.cpu_busy >= times * h.passive_cpu_busy
            and h.cpu_busy - h.passive_cpu_busy >= MACHINE_CPU_GROWTH):
        return (f"machine CPU {h.cpu_busy:.0%} against {h.passive_cpu_busy:.0%} passive: "
                "other work ran")
    if h.disk_busy is not None and h.disk_busy >= HOST_SATURATED:
        return f"disk {h.disk_busy:.0%} busy"
    if (h.own_cores is not None and h.passive_own_cores is not None
            and h.own_cores >= times * h.passive_own_cores
            and h.own_cores - h.passive_own_cores >= plus):
        return f"own CPU {h.own_cores:.2f} cores against {h.passive_own_cores:.2f} passive"
    return None

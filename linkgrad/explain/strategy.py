"""Passive first: after the passive phase, which links to inject. A link is injected where a
question needs its gradient measured (a placement to predict moves one of its hosts) or where
the passive evidence is ambiguous; every other link keeps its calibrated passive gradient.

Ambiguous (each a reason said to the user):
- no paths: the paths never cross the link though the graph saw traffic on it, or an end of it
  was not traced: nothing passive stands for it;
- mixed paths: a transaction's patterns (each of at least `MIXED_SHARE` of its requests) cross
  it a different number of times: which share the delay meets is what a measurement settles.
  Said as one of two kinds: parallel branches taking turns on the critical path (the patterns
  make the same calls; the delay itself moves the share), or a choice between paths (a cache
  hit or miss, a load balancer's server: the share holds unless the choice reacts to latency);
- unstable: the crossings' own interval is wide (few requests, many unplaced);
- TCP problems: SNAP saw the link limited by something other than the application in the
  passive phase (send buffer, receiver window, retransmissions): TCP adds round trips the
  messages do not show;
- no calibration: the passive side's error is not known, so it stands for nothing.

Mixed and unstable paths bound the passive side's error (the gradient lies between the
patterns' crossings, or in the count's interval): where the measurement this run would make
cannot tell that span apart (`Reach`: its expected half-width no narrower than half the span),
injecting settles nothing and only perturbs; the link stays passive and says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from linkgrad.explain.passive import PassiveGradient
from linkgrad.spectral.wave_plan import Precision, RoughGradient, WavePlan, measuring_delay

__all__ = ["MIXED_BY", "MIXED_SHARE", "TCP_PROBLEMS", "UNSTABLE_HALF_WIDTH", "LinkChoice",
           "LinkFacts", "Reach", "choose_links", "mix_kind", "mixed_paths", "unstable_count"]

MIXED_SHARE = 0.05  # of a transaction's requests: patterns rarer than this may be mislinked
# two patterns this far apart on a link cross it differently: half a crossing, or a tenth of
# the crossings (MediaWiki's 41 and 42 queries are one habit, not a cache's hit and miss)
MIXED_BY = (0.5, 0.1)
UNSTABLE_HALF_WIDTH = (0.1, 0.1)  # crossings, and relative: the larger of the two
TCP_PROBLEMS = ("send_buffer", "receiver_window", "fast_retransmit", "timeout")


@dataclass(frozen=True)
class LinkFacts:
    """What the passive phase knows of one link."""

    label: str
    pair: str  # "src->dst"
    hosts: tuple[str, str]
    traced: bool  # both ends' messages were traced
    crossings: Mapping[str, PassiveGradient | None]  # per transaction
    patterns: Mapping[str, Sequence[tuple[float, float]]] = field(default_factory=dict)
    # per transaction: (share of its requests, crossings of this link) per pattern
    calls: Mapping[str, Sequence[tuple[str, ...]]] = field(default_factory=dict)
    # per transaction, per pattern (as `patterns`): the calls it makes, critical or not, sorted
    snap: Mapping[str, float] = field(default_factory=dict)  # class -> seconds, passive phase
    outside: bool = False  # the client's link: outside the response time the log measures


@dataclass(frozen=True)
class Reach:
    """What this run's measurement of a link would resolve: the plan's noise on each
    transaction's effect (95% half-width, s), and the delay (`fixed_s`, or as the adaptive
    cycles would size it from the passive crossings under the caps and `max_delay_s`)."""

    plan: WavePlan
    precision: Precision
    max_delay_s: float
    fixed_s: float | None = None

    def half_widths(self, link: LinkFacts) -> dict[str, float]:
        """Per transaction, the 95% half-width its measured gradient would have. Optimistic
        (each rough gradient as tight as the passive count or as loose as the adaptive
        cycles stop at, whichever is tighter: the delay comes out no smaller than a real
        run's): in doubt the link is injected."""
        delay = self.fixed_s
        if delay is None:  # as the adaptive cycles leave it: each rough gradient resolved
            rough = {t: RoughGradient(g.estimate, min((g.ci95[1] - g.ci95[0]) / 2,
                                                      max(abs(g.estimate), 1.0) / 2))
                     for t, g in link.crossings.items() if g is not None}
            delay = measuring_delay(rough, self.plan, self.precision, self.max_delay_s)
        return {t: noise / delay for t, noise in self.plan.noise_s.items() if delay > 0}


@dataclass(frozen=True)
class LinkChoice:
    label: str
    inject: bool
    reasons: tuple[str, ...]  # why injected; or, for a passive one, why it may stay so


def choose_links(links: Sequence[LinkFacts], moved: Sequence[frozenset[str]],
                 calibrated: bool, reach: Reach | None = None) -> list[LinkChoice]:
    """Each link injected or left passive, with its reasons. `moved`: per question, the
    hosts its placement moves; `reach`: what a measurement would resolve (None: anything)."""
    out = []
    for link in links:
        widths = reach.half_widths(link) if reach else {}
        reasons = _needs(link, moved, calibrated, widths)
        if reasons:
            out.append(LinkChoice(link.label, True, tuple(reasons)))
        elif link.outside:
            out.append(LinkChoice(link.label, False, (
                "the client's link: outside the response time the web log measures",)))
        elif beyond := _beyond_reach(link, widths):
            out.append(LinkChoice(link.label, False, (
                f"ambiguous, but this run's measurement would not settle it: {beyond}; "
                "more cycles or a larger magnitude_ms would",)))
        else:
            out.append(LinkChoice(link.label, False, ("its paths are clear and calibrated",)))
    return out


def _ambiguities(link: LinkFacts) -> list[tuple[str, str, float]]:
    """(transaction, kind, span) per ambiguity: the span its gradient may lie in (crossings),
    a mix's patterns apart or an unstable count's interval."""
    out = [(t, "unstable", g.ci95[1] - g.ci95[0]) for t, g in link.crossings.items()
           if g is not None and unstable_count(g)]
    for t, pats in link.patterns.items():
        if mixed_paths(pats):
            common = [c for share, c in pats if share >= MIXED_SHARE]
            out.append((t, "mixed", max(common) - min(common)))
    return sorted(out)


def _settles(widths: Mapping[str, float], transaction: str, span: float) -> bool:
    """A measurement settles an ambiguity it can tell apart: half-width under half the span
    (a transaction without the plan's noise: assumed to)."""
    return transaction not in widths or widths[transaction] < span / 2


def _beyond_reach(link: LinkFacts, widths: Mapping[str, float]) -> str:
    """Each transaction's widest ambiguity the measurement would not settle, said in short."""
    widest: dict[str, tuple[str, float]] = {}
    for t, kind, span in _ambiguities(link):
        if not _settles(widths, t, span) and span >= widest.get(t, ("", -1.0))[1]:
            widest[t] = (kind, span)
    return "; ".join(
        f"{_mix_named(link, t) if kind == 'mixed' else t} ({kind}), expected ±{widths[t]:.2g} "
        f"against a span of {span:.2g}" for t, (kind, span) in sorted(widest.items()))


def _needs(link: LinkFacts, moved: Sequence[frozenset[str]], calibrated: bool,
           widths: Mapping[str, float]) -> list[str]:
    reasons = []
    for i, hosts in enumerate(moved, 1):
        if hosts & set(link.hosts):
            reasons.append(f"question {i} moves {', '.join(sorted(hosts & set(link.hosts)))}")
    if link.outside:  # its gradient is 0 by what the log measures: nothing to settle
        return reasons
    if not calibrated:
        reasons.append("no calibration of the passive side")
    if not link.traced:
        reasons.append("no paths: an end was not traced")
    elif not any(g is not None and g.ci95[1] > 0 for g in link.crossings.values()):
        reasons.append("no paths cross it")
    settled = {(t, kind) for t, kind, span in _ambiguities(link) if _settles(widths, t, span)}
    mixed = [t for t, kind in settled if kind == "mixed"]
    if mixed:
        reasons.append(f"mixed paths ({'; '.join(_mix_named(link, t) for t in sorted(mixed))})")
    unstable = [t for t, kind in settled if kind == "unstable"]
    if unstable:
        reasons.append(f"unstable paths ({', '.join(sorted(unstable))})")
    problems = [f"{k.replace('_', ' ')} {link.snap[k]:.1f} s" for k in TCP_PROBLEMS
                if link.snap.get(k, 0.0) > 0]
    if problems:
        reasons.append(f"TCP problems ({', '.join(problems)})")
    return reasons


def mixed_paths(patterns: Sequence[tuple[float, float]]) -> bool:
    """(share of requests, crossings) per pattern: common patterns crossing it apart."""
    common = [c for share, c in patterns if share >= MIXED_SHARE]
    absolute, relative = MIXED_BY
    return len(common) > 1 and max(common) - min(common) >= max(absolute,
                                                                 relative * max(common))


def _mix_named(link: LinkFacts, transaction: str) -> str:
    kind = mix_kind(link.patterns[transaction], link.calls.get(transaction, ()))
    return transaction if kind is None else f"{transaction}: {kind}"


def mix_kind(patterns: Sequence[tuple[float, float]], calls: Sequence[tuple[str, ...]]
             ) -> str | None:
    """What makes a mix (`mixed_paths`): two common patterns making the same calls but
    crossing the link apart are parallel branches taking turns on the critical path (said
    first: the delay itself moves that share); patterns making other calls, a choice between
    paths. None where the calls are not known."""
    if len(calls) != len(patterns):
        return None
    crossings: dict[tuple[str, ...], list[float]] = {}
    for (share, c), made in zip(patterns, calls, strict=True):
        if share >= MIXED_SHARE:
            crossings.setdefault(made, []).append(c)
    if any(mixed_paths([(1.0, c) for c in cs]) for cs in crossings.values()):
        return "parallel branches take turns on the critical path"
    return "a choice between paths"


def unstable_count(g: PassiveGradient) -> bool:
    absolute, relative = UNSTABLE_HALF_WIDTH
    half = (g.ci95[1] - g.ci95[0]) / 2
    return half > max(absolute, relative * abs(g.estimate))

"""The passive evidence's checks: the communication graph's links (new, vanished), each
transaction's dominant causal path, and each link's SNAP classes (new)."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.config.suite import LinkCheck, PathCheck, SnapCheck
from coordinator.regress.check import ABSENT_FRACTION, Check, Kind, Verdict, holm_verdicts, paired
from coordinator.regress.measures import (
    LinkMeasure,
    NightMeasures,
    PathMeasure,
    PatternCount,
    SnapMeasure,
)
from coordinator.regress.stats import drop_p
from coordinator.regress.values import CheckValues, LinkValues, PathValues, SnapValues


def link_checks(before: Sequence[LinkMeasure], now: Sequence[LinkMeasure], tolerance: LinkCheck
           ) -> list[Check]:
    found = []
    there, gone = tolerance.min_messages, tolerance.min_messages * ABSENT_FRACTION
    for a, b in paired(before, now):
        m = a or b
        assert m is not None
        was, is_ = (a.messages if a else 0), (b.messages if b else 0)
        values = (LinkValues(messages=was), LinkValues(messages=is_))
        if was < gone and is_ >= there:
            verdict: Verdict = "regression"
            why = f"a new link: {is_} messages in the passive phase, {was} in the baseline's"
        elif was >= there and is_ < gone:
            verdict = "regression"
            why = f"the link vanished: {is_} messages in the passive phase, {was} in the baseline's"
        else:
            verdict, why = "pass", f"{was} messages then, {is_} now"
        found.append(Check("link", {"experiment": m.experiment, "link": m.link}, verdict, why,
                           *values, change=float(is_ - was)))
    return found


def path_checks(baseline: NightMeasures, current: NightMeasures, tolerance: PathCheck
           ) -> list[Check]:
    found = _unjudged(baseline.without_paths, current.without_paths, "path",
                      "no causal paths")
    for a, b in paired(baseline.paths, current.paths):
        m = a or b
        assert m is not None
        if m.experiment in current.without_paths or m.experiment in baseline.without_paths:
            continue
        found.append(_path_check(a, b, tolerance))
    # every judged transaction is in Holm's family (choosing the tests by the data would not
    # keep alpha); a regression also needs another path to be the commonest now
    return holm_verdicts(found, tolerance.alpha,
                         lambda c: -(c.change or 0.0) >= tolerance.min_share_change
                         and _dominant_key(c.current) != _dominant_key(c.baseline))


def _path_check(a: PathMeasure | None, b: PathMeasure | None, tolerance: PathCheck) -> Check:
    m = a or b
    assert m is not None
    subject = {"experiment": m.experiment, "transaction": m.transaction}
    base, cur = _path_values(a), _path_values(b)
    least = tolerance.min_requests
    if a is None or b is None or a.requests < least or b.requests < least:
        counts = f"{a.requests if a else 0} then, {b.requests if b else 0} now"
        return Check("path", subject, "skipped",
                     f"too few traced requests to judge ({counts}; {least} needed)", base, cur)
    then, now = _dominant(a), _dominant(b)
    kept = next((p.count for p in b.patterns if p.key == then.key), 0)
    share_then, share_now = then.count / a.requests, kept / b.requests
    p = drop_p(then.count, a.requests, kept, b.requests)
    if now.key == then.key:
        return Check("path", subject, "pass",
                     f"the same dominant path ({share_then:.0%} then, {share_now:.0%} now)",
                     base, cur, share_now - share_then, p)
    return Check("path", subject, "pass",
                 f"another path is now the commonest ({now.count / b.requests:.0%}); the "
                 f"baseline's fell from {share_then:.0%} to {share_now:.0%}"
                 f"{_crossings_change(then, now)}",
                 base, cur, share_now - share_then, p)


def _dominant(m: PathMeasure) -> PatternCount:
    return max(m.patterns, key=lambda p: p.count)


def _crossings_change(then: PatternCount, now: PatternCount) -> str:
    """`; crossings app1->db 3 -> 4` for each host link whose crossings differ."""
    moved = [f"{link} {_g(then.crossings.get(link, 0.0))} -> {_g(now.crossings.get(link, 0.0))}"
             for link in sorted(then.crossings.keys() | now.crossings.keys())
             if abs(then.crossings.get(link, 0.0) - now.crossings.get(link, 0.0)) > 1e-6]
    return f"; crossings {', '.join(moved)}" if moved else ""


def _g(x: float) -> str:
    return f"{x:.3g}"


def _path_values(m: PathMeasure | None) -> PathValues:
    if m is None or not m.patterns:
        return PathValues(requests=m.requests if m else 0)
    top = _dominant(m)
    return PathValues(requests=m.requests, dominant=top.key, count=top.count,
                      crossings=top.crossings)


def _dominant_key(v: CheckValues) -> str | None:
    return v.dominant if isinstance(v, PathValues) else None


def snap_checks(baseline: NightMeasures, current: NightMeasures, tolerance: SnapCheck
          ) -> list[Check]:
    found = _unjudged(baseline.without_snap, current.without_snap, "snap", "no SNAP profile")
    there, gone = tolerance.min_rate, tolerance.min_rate * ABSENT_FRACTION
    for a, b in paired(baseline.snap, current.snap):
        m = a or b
        assert m is not None
        if m.experiment in current.without_snap or m.experiment in baseline.without_snap:
            continue
        rate_a, rate_b = _rates(a), _rates(b)
        for name in sorted(rate_a.keys() | rate_b.keys()):
            was, is_ = rate_a.get(name, 0.0), rate_b.get(name, 0.0)
            if max(was, is_) < gone:
                continue
            if was < gone and is_ >= there:
                verdict: Verdict = "regression"
                why = (f"a new SNAP class on the link: {is_:.3g} connection-seconds per second "
                       f"of the passive phase, {was:.3g} in the baseline's")
            elif was >= there and is_ < gone:
                verdict, why = "pass", f"gone from the link ({was:.3g} then, {is_:.3g} now)"
            else:
                verdict, why = "pass", f"{was:.3g} then, {is_:.3g} now (per second)"
            found.append(Check("snap", {"experiment": m.experiment, "link": m.link,
                                        "class": name}, verdict, why,
                               SnapValues(rate=round(was, 4)), SnapValues(rate=round(is_, 4)),
                               is_ - was))
    return found


def _rates(m: SnapMeasure | None) -> dict[str, float]:
    return {} if m is None else {k: s / m.window_s for k, s in m.seconds.items()}


def _unjudged(before: Sequence[str], now: Sequence[str], kind: Kind, what: str
              ) -> list[Check]:
    """For each experiment one of whose nights kept no such evidence: evidence the baseline
    has and tonight lacks is a regression (a capture that broke must not pass unseen), the
    other way round a skip."""
    out = []
    for e in sorted(set(before) | set(now)):
        if e in now and e not in before:
            out.append(Check(kind, {"experiment": e}, "regression",
                             f"{what} tonight, where the baseline has them (the capture failed "
                             "or was turned off: accept a new baseline if that was meant)"))
        else:
            out.append(Check(kind, {"experiment": e}, "skipped",
                             f"{what} {'tonight' if e in now else 'in the baseline'} (not "
                             "enabled in the experiment, or nothing was captured)"))
    return out



"""Watching the application while delay is injected: what the passive phase saw, and the
limits that abort a run when the application suffers (throughput, failed requests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from linkgrad.errors import RuntimeFailure
from linkgrad.prediction import batch_mean
from linkgrad.transactions import TransactionPattern, group_by_transaction
from linkgrad.weblog.model import RequestLog

__all__ = [
    "FLUSH_S",
    "LAG_S",
    "MIN_WATCHED",
    "WATCH_S",
    "Aborted",
    "Baseline",
    "Limits",
    "ResponseBaseline",
    "check_limits",
    "failed_fraction",
    "failing_before_delay",
    "judged_window",
    "response_baselines",
    "training_requests",
]

WATCH_S = 10.0  # throughput and errors are judged over this many seconds of requests
LAG_S = 10.0  # ... that started at least this long ago (or the slowest response lately)
FLUSH_S = 1.0  # from a request's end to its line reaching us
MIN_WATCHED = 20  # requests in that window before an error fraction means anything


class Limits(Protocol):
    """The abort limits (an experiment's `parameters` has them)."""

    throughput_drop_limit: float  # abort when throughput falls by more than this fraction
    error_rate_limit: float  # ... or the failed fraction rises by more than this


class Aborted(RuntimeFailure):
    """A safety limit was crossed; injection stopped."""


def training_requests(log: RequestLog, patterns: list[TransactionPattern], start: float,
                      end: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    groups = group_by_transaction(log.url, patterns)
    out = {}
    for name, rows in groups.items():
        t, y = log.start_s[rows], log.response_s[rows]
        inside = (t >= start) & (t < end)
        out[name] = (t[inside], y[inside])
    return out


@dataclass(frozen=True)
class Baseline:
    """What the passive phase saw: for the estimator's baseline and the perturbation."""

    end_s: float
    rate_per_s: float
    mean_response_ms: float
    failed_fraction: float | None = None  # None: the log has no status to watch


def judged_window(recent: RequestLog, now_s: float, window_s: float = WATCH_S
                  ) -> tuple[RequestLog, float]:
    """The requests that started in the last window whose requests have all had time to end
    and be logged: [now - lag - window, now - lag), lag = the slowest response among `recent`
    (what was logged lately) plus stamp resolution and flush, at least LAG_S; and the lag.

    Servers write a request's line when it ends (nginx and Apache alike, whatever the stamp
    says). Counting the lines written lately undercounts while responses slow down although
    requests keep arriving (Apache + mod_php under a 4 s slowdown: a false throughput abort);
    counting by start over the most recent seconds misses the requests still running. A
    window that ends `lag` ago misses neither; a request that never ends is missed, which is
    the drop the limit is for.
    """
    slowest = float(recent.response_s.max()) if len(recent) else 0.0
    lag = max(LAG_S, slowest + recent.time_resolution_s + FLUSH_S)
    inside = (recent.start_s >= now_s - lag - window_s) & (recent.start_s < now_s - lag)
    return recent.select(inside), lag


def check_limits(judged: RequestLog, base: Baseline, p: Limits, labels: str) -> None:
    """Aborted when the application suffers: throughput down by more than its limit, or the
    fraction of failed requests up by more than its limit, against the passive phase;
    `judged` are WATCH_S of requests by their start (`judged_window`)."""
    rate_per_s = len(judged) / WATCH_S
    if rate_per_s < (1 - p.throughput_drop_limit) * base.rate_per_s:
        raise Aborted(f"throughput fell below {1 - p.throughput_drop_limit:.0%} of the "
                      f"training's {base.rate_per_s:.1f}/s (requests by their start) while "
                      f"delaying {labels}")
    failed = judged.failed()
    if base.failed_fraction is None or failed is None or len(failed) < MIN_WATCHED:
        return
    if (fraction := float(failed.mean())) > base.failed_fraction + p.error_rate_limit:
        raise Aborted(f"{fraction:.1%} of requests failed (5xx, 499, 408) over {WATCH_S:g} s "
                      f"of requests against {base.failed_fraction:.1%} in training (limit "
                      f"+{p.error_rate_limit:.0%}) while delaying {labels}")


@dataclass(frozen=True)
class ResponseBaseline:
    """A transaction's response times in the passive phase."""

    requests: int
    mean_ms: float
    se_ms: float  # of the mean, from batch means (response times are autocorrelated)
    sd_ms: float


def response_baselines(by_tx: dict[str, tuple[np.ndarray, np.ndarray]]
                       ) -> dict[str, ResponseBaseline]:
    """Each transaction's mean response time in the passive phase, with its standard error:
    the current response time of a what-if prediction (none from fewer than 2 requests)."""
    out = {}
    for name, (t, y) in by_tx.items():
        if len(y) < 2:
            continue
        mean = batch_mean(t, y * 1e3)
        out[name] = ResponseBaseline(len(y), mean.mean, mean.se, float(np.std(y * 1e3, ddof=1)))
    return out


def failed_fraction(log: RequestLog, start: float, end: float) -> float | None:
    """Fraction of the passive phase's requests that failed; None if the log has no status."""
    failed = log.failed()
    if failed is None:
        return None
    inside = (log.start_s >= start) & (log.start_s < end)
    return float(failed[inside].mean()) if inside.any() else 0.0


def failing_before_delay(base: Baseline, p: Limits) -> str | None:
    """What to tell the user when training itself failed more than the run's error limit: the
    limit then only catches a further rise, and the response times are partly errors'."""
    if base.failed_fraction is None or base.failed_fraction <= p.error_rate_limit:
        return None
    return (f"{base.failed_fraction:.0%} of training's requests failed (5xx, 499, 408) before "
            "any delay: the application is failing or overloaded, and its gradients will "
            "partly be those of errors and timeouts")

"""The limits of the numbers a run directory's files hold when read back (gradients.json,
baseline.json, run.json) and of the options that stand for them. Beyond a limit a number is a
hand edit, corruption or a unit mistake, not a measurement: each is what a run can produce at
most, so a run's own files are always read back.

A transaction's numbers are bounded by the record's delay and the estimator's effect: an
effect, its standard error and an interval end times the delay within `MAX_EFFECT_MS`
(`linkgrad.spectral.estimate` drops a lockin fit past it), over a delay of at least
`MIN_MAGNITUDE_MS`, give a gradient or interval end within MAX_GRADIENT = 2.6e15 (a delay of
1 us and a wide interval are real: ci95 = g ± t·se_ms/magnitude_ms); eq. 2.6's gradient is at most
2π·MAX_RESPONSE_MS/MIN_MAGNITUDE_MS = 1.6e13.

Inside them prediction, placement and routing cannot overflow (1.8e308). A gradients.json is
at most 64 MB: under 1e6 links. Per link a gradient and its standard error are at most 2.6e15;
a curve through delays 1.5x apart, 1 us at least (`prediction.fit_curve`), has a gradient of
~1.3e16 and a curvature of ~1e19 ms/ms², each with a standard error as large. A latency change
is at most 6e4 ms (`latencies.MAX_LATENCY_MS`), with a standard error of 8.5e4 at most. A
prediction's largest term, slope²·var(Δ) with slope = g + 2cΔ ~1.2e24 per link (1.2e30 over
1e6 links of a pair) and var(Δ) 7.2e9, is ~1e70 per pair and ~1e76 over as many pairs;
placement's coefficients (times an importance of at most 1e6) g − 2cL⁰ ~1e36 and c ~1e31 a
host pair, by latencies and their squares (3.6e9), stay below 1e54 over 1e12 host pairs."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationInfo

from linkgrad.protocol.fields import LIMIT_UNIX_S
from linkgrad.protocol.record import MIN_MAGNITUDE_MS
from linkgrad.spectral.estimate import MAX_EFFECT_S
from linkgrad.spectral.result import GradientResult
from linkgrad.weblog.model import MAX_RESPONSE_S, MAX_START_S, MIN_START_S

MAX_RESPONSE_MS = MAX_RESPONSE_S * 1e3  # the web log's: no request is open for 30 days
MAX_EFFECT_MS = MAX_EFFECT_S * 1e3  # a lockin fit's effect and standard error (2.6e12)
MAX_GRADIENT = MAX_EFFECT_MS / MIN_MAGNITUDE_MS  # and an interval's end: 2.6e15 ms per ms
MAX_COUNT = 2**53  # requests, packets: above it a float no longer counts one by one
MAX_RATE_PER_S = 1e9  # requests per second: no server answers a billion a second
MAX_THROUGHPUT_CHANGE = 1e9  # on/off - 1: even one request off against a billion on
MAX_UNIX_S = LIMIT_UNIX_S  # year 2286: a later unix time is a unit mistake (ms for s)
FIRST_LOG_S, LAST_LOG_S = MIN_START_S, MAX_START_S  # the times a web log line can hold

# Validation context of a file read back: its numbers are held to these limits. The run builds
# the same records from what it measured without them: what it measures is within them, and
# were it not, the run would write it (refused, named, when read back) rather than fail.
READ_BACK: dict[str, bool] = {"read_back": True}


def reading_back(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("read_back"))


def out_of_range(name: str, value: float | None, low: float, high: float,
                 why: str) -> str | None:
    """A sentence naming `name` and the limit it is past (`why`: what the limit is), or None."""
    if value is None or low <= value <= high:
        return None
    return (f"{name} {shown(value)} is {'above' if value > high else 'below'} "
            f"{high if value > high else low:g} ({why})")


def shown(value: float) -> str:
    """`value` for a message; a JSON integer too large for a float by its digits."""
    try:
        return f"{value:g}"
    except OverflowError:
        return f"a number of {len(str(abs(int(value))))} digits"


def transaction_problems(entry: GradientResult) -> list[str]:
    """What is past its limit in a transaction's result (its numbers finite already)."""
    g = (-MAX_GRADIENT, MAX_GRADIENT)
    gradient = (f"no measurement gives it: an effect of at most {MAX_EFFECT_MS:g} ms over a "
                f"delay of at least {MIN_MAGNITUDE_MS:g} ms")
    wide = (f"an interval too wide to be a measurement: its ends are effects of at most "
            f"{MAX_EFFECT_MS:g} ms over a delay of at least {MIN_MAGNITUDE_MS:g} ms")
    effect = ("no fit of response times gives it: a web log holds none over 30 days, and a "
              "fit beyond a thousand times that is dropped")
    ci = entry.ci95 or ()
    out = [out_of_range("gradient", entry.gradient, *g, gradient),
           out_of_range("thesis_gradient", entry.thesis_gradient, *g, gradient),
           *[out_of_range(f"ci95[{i}]", v, *g, wide) for i, v in enumerate(ci)],
           out_of_range("effect_ms", entry.effect_ms, -MAX_EFFECT_MS, MAX_EFFECT_MS, effect),
           out_of_range("se_ms", entry.se_ms, 0.0, MAX_EFFECT_MS, effect),
           out_of_range("requests", entry.requests, 0, MAX_COUNT, "more than a float counts")]
    if ci and ci[0] > ci[1]:
        out.append(f"ci95 [{shown(ci[0])}, {shown(ci[1])}] is no interval: its low end is "
                   "above its high end")
    return [p for p in out if p]


def perturbation_problems(p: Any) -> list[str]:
    """What is past its limit in a `run_dir.Perturbation`: no web log's requests give it."""
    rate, ms = (0.0, MAX_RATE_PER_S), (0.0, MAX_RESPONSE_MS)
    change = (-1.0, MAX_THROUGHPUT_CHANGE)
    limits = {"throughput_per_s": rate, "throughput_off_per_s": rate,
              "throughput_change": change, "throughput_change_se": change,
              "mean_response_ms": ms, "mean_response_off_ms": ms,
              "mean_response_change_ms": (-MAX_RESPONSE_MS, MAX_RESPONSE_MS)}
    out = [out_of_range(name, getattr(p, name), low, high, "no web log's requests give it")
           for name, (low, high) in limits.items()]
    return [x for x in out if x]

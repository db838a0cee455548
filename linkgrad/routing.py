"""Per-transaction routing between two copies of a tier (thesis §5.5): pure functions.

With a copy of a component at each of two sites, the front end can send each transaction to
the copy where its predicted mean response time is lower (by its link gradients: a transaction
that talks mostly to the web server goes to the near copy, one that talks mostly to the
database to the far one). A fixed ratio r sends r of every transaction to the first copy; its
mean is linear in r, so the best fixed ratio is all-or-nothing under the linear model, and the
per-transaction choice is never worse than it — but for the transactions it keeps where they
are on a difference within noise.

A choice is only as good as the predictions' intervals: where the difference between the two
copies' means has a 95% interval containing 0, the transaction is within noise and stays at
the copy where the component is now (if one is), rather than moving on a difference the
measurements cannot tell from none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from linkgrad.prediction import Z95

__all__ = [
    "UPSTREAM",
    "VARIABLE",
    "Route",
    "RoutingAdvice",
    "advise",
    "nginx_fixed_ratio",
    "nginx_map",
    "upstream_problem",
    "url_pattern",
]

VARIABLE = "linkgrad_upstream"
# What `proxy_pass http://$linkgrad_upstream` can name: an upstream group or a host name (labels
# of letters, digits, `-` and `_`, dot-separated), with an optional port. Anything else (a
# space, `;`, braces, quotes, `$`, a newline) would be nginx syntax, not a name.
_LABEL = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,62}"
UPSTREAM = re.compile(rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?")


@dataclass(frozen=True)
class Route:
    transaction: str
    share: float  # of the requests
    at_ms: tuple[float, float]  # predicted mean at copy 0 and copy 1
    se_ms: tuple[float, float] = (0.0, 0.0)  # each prediction's standard error
    # of at_ms[1] - at_ms[0]: less than from se_ms alone, the current mean (and any pair whose
    # latency is the same at both copies) cancelling (`linkgrad.placement.difference`)
    difference_se_ms: float = 0.0
    current: int | None = None  # the copy where the component is now, if either

    @property
    def ci95(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """Each copy's predicted mean's 95% interval."""
        return ((self.at_ms[0] - Z95 * self.se_ms[0], self.at_ms[0] + Z95 * self.se_ms[0]),
                (self.at_ms[1] - Z95 * self.se_ms[1], self.at_ms[1] + Z95 * self.se_ms[1]))

    @property
    def better(self) -> int:
        """The copy with the lower predicted mean (the first on a tie)."""
        return 0 if self.at_ms[0] <= self.at_ms[1] else 1

    @property
    def difference_ci95(self) -> tuple[float, float]:
        """95% interval of (the other copy's mean − the better's): ≥ 0 at its middle."""
        d = abs(self.at_ms[0] - self.at_ms[1])
        return d - Z95 * self.difference_se_ms, d + Z95 * self.difference_se_ms

    @property
    def within_noise(self) -> bool:
        """The difference's interval contains 0: either copy, as far as the run can tell."""
        return self.difference_ci95[0] <= 0

    @property
    def copy(self) -> int:
        """Where to send it: the better copy, unless within noise and the component is now
        at the other (no move on a difference nobody can see)."""
        if self.within_noise and self.current is not None:
            return self.current
        return self.better

    @property
    def gain_ms(self) -> float:
        return abs(self.at_ms[0] - self.at_ms[1])


@dataclass(frozen=True)
class RoutingAdvice:
    routes: tuple[Route, ...]

    def fixed_ratio_ms(self, ratio: float) -> float:
        """Mix-weighted mean when `ratio` of every transaction goes to copy 0."""
        return sum(r.share * (ratio * r.at_ms[0] + (1 - ratio) * r.at_ms[1])
                   for r in self.routes)

    @property
    def best_fixed(self) -> tuple[float, float]:
        """(ratio, mean ms) of the best fixed ratio (an end: the mean is linear in it)."""
        return min(((r, self.fixed_ratio_ms(r)) for r in (0.0, 1.0)), key=lambda x: x[1])

    @property
    def per_transaction_ms(self) -> float:
        """The mix's mean, each transaction at the copy it is routed to."""
        return sum(r.share * r.at_ms[r.copy] for r in self.routes)


def advise(mix: Mapping[str, float], at_copy: tuple[Mapping[str, float], Mapping[str, float]],
           se: tuple[Mapping[str, float], Mapping[str, float]] | None = None,
           difference_se_ms: Mapping[str, float] | None = None, current: int | None = None
           ) -> RoutingAdvice:
    """`mix`: transaction -> share; `at_copy`: predicted mean per transaction at each copy,
    `se` their standard errors and `difference_se_ms` each difference's (without, every
    choice is taken as exact); `current`: the copy where the component is
    now, if either."""
    return RoutingAdvice(tuple(
        Route(n, share, (at_copy[0][n], at_copy[1][n]),
              (se[0][n], se[1][n]) if se else (0.0, 0.0),
              difference_se_ms[n] if difference_se_ms else 0.0, current)
        for n, share in sorted(mix.items())))


def url_pattern(transaction: str, patterns: Mapping[str, str]) -> str:
    """The regex (searched in path + query) that names `transaction`: the experiment's, or,
    where transactions were one per URL path, that path."""
    if transaction in patterns:
        return patterns[transaction]
    if transaction.startswith("/"):
        return "^" + re.escape(transaction) + r"(\?|$)"
    raise ValueError(f"no URL pattern for transaction {transaction!r}")


def upstream_problem(name: str) -> str | None:
    """Why `name` cannot be an nginx upstream in the generated config, or None."""
    if len(name) > 253 or not UPSTREAM.fullmatch(name):
        return (f"{name!r} is not an upstream name: letters, digits, '-', '_' and dots, "
                "with an optional :PORT")
    port = name.rpartition(":")[2] if ":" in name else None
    if port is not None and not 0 < int(port) < 65536:
        return f"{name!r}: port {port} is not 1-65535"
    return None


def _check_upstreams(upstreams: tuple[str, str]) -> None:
    for name in upstreams:
        problem = upstream_problem(name)
        if problem:
            raise ValueError(problem)


def _comment(text: str) -> str:
    """`text` safe in an nginx comment: a newline there would end it and start config."""
    return text.encode("unicode_escape").decode("ascii")


def _quoted(text: str) -> str:
    """A double-quoted nginx string. nginx's parser unescapes a backslash before a backslash,
    a quote, t, r or n, so every backslash is doubled and every quote escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def nginx_map(advice: RoutingAdvice, patterns: Mapping[str, str],
              upstreams: tuple[str, str]) -> str:
    """The advice as an nginx `map` setting `$linkgrad_upstream` (use it as
    `proxy_pass http://$linkgrad_upstream;`): a regex line per transaction, in the order the
    experiment lists them (nginx takes the first that matches, so with overlapping patterns
    list the narrower first); other requests go where the best fixed ratio sends them.
    Raises ValueError for an upstream that is not a name (`upstream_problem`)."""
    _check_upstreams(upstreams)
    ratio, _ = advice.best_fixed
    order = {name: i for i, name in enumerate(patterns)}
    lines = [f"# linkgrad route: per-transaction routing (thesis §5.5); "
             f"{advice.per_transaction_ms:.1f} ms predicted for the mix",
             f"map $request_uri ${VARIABLE} {{"]
    for r in sorted(advice.routes, key=lambda r: (order.get(r.transaction, len(order)),
                                                  r.transaction)):
        other = 1 - r.copy
        lines.append(f"    {_quoted('~' + url_pattern(r.transaction, patterns))} "
                     f"{upstreams[r.copy]};  # {_comment(r.transaction)}: "
                     f"{r.at_ms[r.copy]:.1f} ms, "
                     f"{r.at_ms[other]:.1f} at {upstreams[other]}"
                     + (" (within noise: either)" if r.within_noise else ""))
    lines += [f"    default {upstreams[0 if ratio == 1.0 else 1]};", "}"]
    return "\n".join(lines) + "\n"


def nginx_fixed_ratio(ratio: float, upstreams: tuple[str, str]) -> str:
    """`ratio` of the requests (each drawn by its request id) to the first upstream."""
    if not 0 <= ratio <= 1:
        raise ValueError(f"a ratio is between 0 and 1, got {ratio}")
    _check_upstreams(upstreams)
    percent = round(100 * ratio, 2)
    if percent in (0, 100):
        return f"map $request_uri ${VARIABLE} {{ default {upstreams[0 if percent else 1]}; }}\n"
    return (f'split_clients "${{request_id}}" ${VARIABLE} {{ {percent:g}% {upstreams[0]}; '
            f"* {upstreams[1]}; }}\n")

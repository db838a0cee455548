"""`linkgrad route`: which copy of a tier each transaction should go to (thesis §5.5)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from coordinator.cli.answer import Answer, absent_when_none
from coordinator.cli.command import Command
from coordinator.cli.options import add_gradients
from coordinator.cli.terminal import names_table, terminal
from coordinator.config.latencies import (
    Latencies,
    Placement,
    check_site,
    latency_changes,
    latency_sites,
    load_placement,
    one_way,
    placement_site_problems,
    unknown_site,
)
from coordinator.config.path_latencies import run_latencies
from coordinator.config.run_inputs import (
    RunInputs,
    load_gradients,
    pair_names,
    require_measured,
)
from linkgrad.errors import InputError, Problem
from linkgrad.placement import Compared, difference
from linkgrad.prediction import Prediction, predict
from linkgrad.routing import RoutingAdvice, advise, nginx_map, upstream_problem


def _arguments(p: argparse.ArgumentParser) -> None:
    add_gradients(p)
    p.add_argument("--latencies", type=Path, metavar="SITES.yaml",
                   help="sites and one-way latencies (default: the run's causal paths' "
                        "network delays, every host its own site)")
    p.add_argument("--component", required=True, help="the host whose tier is copied")
    p.add_argument("--copies", required=True, nargs=2, metavar="SITE",
                   help="the two sites with a copy")
    p.add_argument("--placement", type=Path, metavar="NEW.yaml",
                   help="a placement file, as predict's: where components move from the "
                   "latencies file's sites, the copies then compared from there (default: "
                   "none moves)")
    p.add_argument("--nginx", nargs=2, metavar=("UPSTREAM1", "UPSTREAM2"),
                   help="print the advice as an nginx map setting $linkgrad_upstream, the "
                        "upstream groups of the copy at each site (in --copies order; names "
                        "of letters, digits, '-', '_' and dots, optional :PORT); "
                        "proxy_pass http://$linkgrad_upstream; uses it. With --json, the "
                        "map is the string nginx_map of the JSON")


def route_command(args: argparse.Namespace) -> int:
    problems = [Problem(p, field="--nginx") for p in map(upstream_problem, args.nginx or ())
                if p]
    if problems:  # before any file is read: the names go into nginx's configuration
        raise InputError(problems)
    for site in args.copies:  # before Placement() is built from them
        try:
            check_site(site)
        except ValueError as e:
            raise InputError(Problem(str(e), field="--copies")) from e
    run = load_gradients(args.gradients, args.link)
    if args.component not in run.hosts:
        where = "the hosts its links go between" if run.answers else \
            f"the hosts of {run.run_dir / 'experiment.json'}"
        raise InputError(Problem(f"{args.component!r} is not a host of the run ({where}: "
                                 f"{', '.join(run.hosts)})", field="--component"))
    source = run_latencies(args.latencies, run.paths_dirs, run.hosts, run.talking_pairs())
    latencies = source.latencies
    if source.note and not args.json and not args.nginx:  # --nginx prints config alone
        terminal(stderr=True).print(source.note)
    base = load_placement(args.placement) if args.placement else None
    _check_sites(args, latencies, source.name, base, run.hosts)
    at_copy: list[dict[str, Prediction]] = []
    moved = base.move if base else {}
    for site in args.copies:
        changes = latency_changes(run.hosts, latencies,
                                  Placement(move={**moved, args.component: site}),
                                  source.name, args.placement)
        require_measured(run, changes, f"with {args.component} at {site}", field="--copies")
        at_copy.append(predict(run.current_ms, run.gradients, changes))
    now = moved.get(args.component, latencies.sites.get(args.component, args.component))
    total = sum(run.requests.values())
    advice = advise({n: c / total for n, c in run.requests.items()},
                    ({n: p.predicted_ms for n, p in at_copy[0].items()},
                     {n: p.predicted_ms for n, p in at_copy[1].items()}),
                    ({n: p.se_ms for n, p in at_copy[0].items()},
                     {n: p.se_ms for n, p in at_copy[1].items()}),
                    _difference_se(run, latencies, moved, args.component, args.copies),
                    args.copies.index(now) if now in args.copies else None)
    passive = {t.pair for at in at_copy for p in at.values() for t in p.terms
               if t.pair in run.passive_pairs(p.transaction)}
    routes = _nginx(advice, run, args.nginx) if args.nginx else None
    out = RouteAnswer.of(advice, (args.copies[0], args.copies[1]), routes,
                         pair_names(passive), source.note)
    if args.json:  # strict JSON whatever else is asked: the map is one of its strings
        print(out.json_text())
    elif routes is not None:
        print(routes, end="")
    else:
        _print(out)
    return 0


def _difference_se(run: RunInputs, latencies: Latencies, moved: dict[str, str],
                   component: str, copies: list[str]) -> dict[str, float]:
    """Per transaction, the standard error of its mean at the second copy minus at the
    first: the current mean cancels, and so does every pair whose sites are the same at both
    (`linkgrad.placement.difference` says what else is assumed)."""
    now = {h: latencies.sites.get(h, h) for h in run.hosts}
    at = [{**now, **moved, component: site} for site in copies]
    table = one_way(latencies)
    return {name: difference([Compared(1.0, curve, (now[a], now[b]), (at[1][a], at[1][b]),
                                       (at[0][a], at[0][b]))
                              for (a, b), curve in run.gradients.get(name, {}).items()],
                             table).se
            for name in run.current_ms}


def _check_sites(args: argparse.Namespace, latencies: Latencies, source: str,
                 base: Placement | None, hosts: list[str]) -> None:
    """Every site --copies and --placement name is one the latencies file knows: a typo is
    reported where it is, naming the latencies file (not as a pair missing from it)."""
    known = latency_sites(latencies, hosts)
    problems = [Problem(why, field="--copies") for site in args.copies
                if (why := unknown_site(site, known, source)) is not None]
    if base is not None:
        problems += placement_site_problems(base, args.placement, known, source)
    if problems:
        raise InputError(problems)


def _nginx(advice: RoutingAdvice, run: RunInputs, upstreams: list[str]) -> str:
    """The advice as nginx configuration; InputError at the run's experiment when it names
    no URL pattern for a transaction (--nginx needs one for each)."""
    try:
        return nginx_map(advice, run.patterns, (upstreams[0], upstreams[1]))
    except ValueError as e:
        if run.answers:
            raise InputError(Problem(f"{e}: a `gradient --json` answer has no URL patterns "
                                     "(--nginx needs a run's experiment)", run.source,
                                     field="--nginx")) from e
        raise InputError(Problem(f"{e}: the run's experiment names none (--nginx needs a "
                                 "pattern per transaction)",
                                 str(run.run_dir / "experiment.json"),
                                 field="transactions")) from e


class CopyRoute(Answer):
    share: float  # of the requests
    to: str  # the site of the better copy; within noise, the current one if either is
    predicted_ms: dict[str, float]  # site -> the transaction's mean with the copy there
    ci95: dict[str, tuple[float, float]]  # site -> that mean's 95% interval
    difference_ci95: tuple[float, float]  # of the worse copy's mean minus the better's
    within_noise: bool  # that interval holds 0: either copy


class BestFixed(Answer):
    to_first: float  # the share of the mix sent to the first copy
    mean_ms: float


class RouteAnswer(Answer):
    copies: tuple[str, str]
    transactions: dict[str, CopyRoute]
    per_transaction_ms: float  # the mix's mean, each transaction routed to its better copy
    best_fixed: BestFixed
    fixed_ratios_ms: dict[str, float]  # share to the first copy -> the mix's mean
    gain_ms: float
    passive_pairs: list[str]  # pairs whose passive gradient (explain.json) a prediction uses
    current: str | None = absent_when_none()  # the copy where the component is now, if either
    nginx_map: str | None = absent_when_none()  # with --nginx
    latencies_note: str | None = absent_when_none()  # where latencies came from the paths

    @classmethod
    def of(cls, advice: RoutingAdvice, copies: tuple[str, str], nginx: str | None = None,
           passive_pairs: list[str] | None = None, latencies_note: str | None = None
           ) -> RouteAnswer:
        ratio, fixed = advice.best_fixed
        now = {r.current for r in advice.routes} - {None}
        return cls(
            copies=copies, current=copies[now.pop()] if now else None,
            transactions={r.transaction: CopyRoute(
                share=round(r.share, 4), to=copies[r.copy],
                predicted_ms={c: round(ms, 3) for c, ms in zip(copies, r.at_ms, strict=True)},
                ci95={c: (round(lo, 3), round(hi, 3))
                      for c, (lo, hi) in zip(copies, r.ci95, strict=True)},
                # to µs: a difference of hundredths of a ms is the case in question
                difference_ci95=(round(r.difference_ci95[0], 6),
                                 round(r.difference_ci95[1], 6)),
                within_noise=r.within_noise)
                for r in advice.routes},
            passive_pairs=passive_pairs or [], latencies_note=latencies_note,
            per_transaction_ms=round(advice.per_transaction_ms, 3),
            best_fixed=BestFixed(to_first=ratio, mean_ms=round(fixed, 3)),
            fixed_ratios_ms={f"{r:.2f}": round(advice.fixed_ratio_ms(r), 3)
                             for r in (0, 0.25, 0.5, 0.75, 1)},
            gain_ms=round(fixed - advice.per_transaction_ms, 3), nginx_map=nginx)


def _print(out: RouteAnswer) -> None:
    a, b = out.copies
    table = names_table("transaction", out.transactions, "share", f"at {a}", f"at {b}",
                        "difference", "route to", title="predicted mean ms ± its 95% interval")
    for name, t in out.transactions.items():
        lo, hi = t.difference_ci95
        table.add_row(name, f"{t.share:.2f}", _at(t.predicted_ms[a], t.ci95[a]),
                      _at(t.predicted_ms[b], t.ci95[b]), _at((lo + hi) / 2, (lo, hi)),
                      (f"either (stays at {t.to})" if out.current else
                       f"either ({t.to}, lower)") if t.within_noise else t.to)
    terminal().print(table)
    if any(t.within_noise for t in out.transactions.values()):
        terminal().print("either: the two copies' difference is within its 95% interval")
    if out.passive_pairs:
        terminal().print(f"uses passive gradients (explain.json, not measured) for "
                         f"{', '.join(out.passive_pairs)}")
    terminal().print(f"mix mean: {out.per_transaction_ms:.1f} ms routed per transaction, "
                     f"{out.best_fixed.mean_ms:.1f} ms at the best fixed ratio "
                     f"({out.best_fixed.to_first:.0%} to {a}): "
                     + (f"{out.gain_ms:.3g} ms better" if out.gain_ms > 0 else "no better"))


def _at(mean: float, ci: tuple[float, float]) -> str:
    """A mean ± its interval's half, the mean to the half's second digit (a 0.02 ms
    difference is no difference at one decimal)."""
    half = (ci[1] - ci[0]) / 2
    if not (math.isfinite(half) and half > 0 and math.isfinite(mean)):
        return f"{mean:.4g} ± {half:.2g}"
    digits = max(0, 1 - math.floor(math.log10(half)))
    return f"{mean:.{digits}f} ± {half:.2g}"


COMMANDS = (
    Command("route", "per-transaction routing between two copies of a tier",
            "With a copy of COMPONENT at each of two sites, predict every transaction's mean "
            "response time at each copy (from the run's link gradients) and route each to its "
            "better copy; compared with the best fixed ratio of the mix (thesis §5.5).",
            _arguments, route_command,
            example=('linkgrad route --gradients "$(ls -d runs/testbed-quick-* | tail -1)"'
                     "/gradients.json --latencies experiments/placement/now.yaml "
                     "--component app1 --copies west east")),
)

"""`linkgrad place`: rank placements of components over sites for one or several applications
(thesis §5.6), weighted by each application's transaction mix and importance."""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.table import Table

from coordinator.cli.answer import Answer, absent_when_none
from coordinator.cli.command import Command
from coordinator.cli.terminal import terminal
from coordinator.config.candidates import check_candidates, load_candidates
from coordinator.config.latencies import Latencies, latency_sites, one_way
from coordinator.config.path_latencies import run_latencies
from coordinator.config.run_inputs import RunInputs, load_gradients, pair_names, unmeasured
from linkgrad.errors import InputError, Problem
from linkgrad.placement import (
    Compared,
    PlacementProblem,
    SearchResult,
    difference,
    placement_latency,
    search,
)
from linkgrad.prediction import Z95, Estimate


@dataclass(frozen=True)
class App:
    name: str
    run: RunInputs
    importance: float

    @property
    def mix(self) -> dict[str, float]:
        """Each transaction's share of the requests the run saw."""
        total = sum(self.run.requests.values())
        return {n: c / total for n, c in self.run.requests.items()} if total else {}

    def weights(self) -> dict[tuple[str, str], tuple[float, float]]:
        """Per host pair, the mix-weighted (gradient, curvature): this app's mean response time
        changes by g·Δ + c·Δ² ms for Δ ms more one-way latency (c is 0 unless the run measured
        the link at two or more delays)."""
        out: dict[tuple[str, str], tuple[float, float]] = {}
        for name, share in self.mix.items():
            for pair, curve in self.run.gradients.get(name, {}).items():
                g, c = out.get(pair, (0.0, 0.0))
                out[pair] = (g + share * curve.gradient.mean, c + share * curve.curvature.mean)
        return out

    def current_ms(self) -> Estimate:
        """The mix's mean now; the transactions' means taken as independent."""
        return Estimate(
            sum(share * self.run.current_ms[n].mean for n, share in self.mix.items()),
            math.sqrt(sum((share * self.run.current_ms[n].se) ** 2
                          for n, share in self.mix.items())))

    def compared(self, problem: PlacementProblem, first: np.ndarray, second: np.ndarray,
                 scale: float = 1.0) -> list[Compared]:
        """Every transaction's curve per host pair, weighted by its share of the mix times
        `scale`, with the pair's sites now and under `first` and `second`."""
        at = {h: i for i, h in enumerate(problem.hosts)}
        cur = problem.current
        return [Compared(scale * share, curve, (int(cur[at[a]]), int(cur[at[b]])),
                         (int(first[at[a]]), int(first[at[b]])),
                         (int(second[at[a]]), int(second[at[b]])))
                for name, share in self.mix.items()
                for (a, b), curve in self.run.gradients.get(name, {}).items()]


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app", required=True, action="append", metavar="RUN/gradients.json[=W]",
                   help="an application's run, or what `linkgrad gradient --json` printed for "
                   "it (one answer per link, comma-separated: A.json,B.json), with its "
                   "importance W (default 1); repeatable, one per application")
    p.add_argument("--latencies", type=Path, metavar="SITES.yaml",
                   help="sites and one-way latencies (default: the runs' causal paths' "
                        "network delays, every host its own site)")
    p.add_argument("--candidates", required=True, type=Path, metavar="CANDIDATES.yaml")
    p.add_argument("--top", type=int, default=5, help="placements to show (default 5)")


# Importances weigh apps against each other: 1e12 apart is more than any weighting means, and
# a weight of 1e-300 would leave a gradient's product with it no digits (denormal or 0)
MIN_IMPORTANCE, MAX_IMPORTANCE = 1e-6, 1e6


def _apps(specs: list[str]) -> list[App]:
    apps = []
    for spec in specs:
        path, _, weight = spec.partition("=")
        try:
            importance = float(weight) if weight else 1.0
        except ValueError:
            raise InputError(Problem(f"importance {weight!r} is not a number",
                                     field="--app")) from None
        if not MIN_IMPORTANCE <= importance <= MAX_IMPORTANCE:  # NaN too
            raise InputError(Problem(f"importance must be {MIN_IMPORTANCE:g} to "
                                     f"{MAX_IMPORTANCE:g} (a weight relative to the other "
                                     f"apps'), got {weight}", field="--app"))
        names = path.split(",")
        if not all(n.strip() for n in names):
            raise InputError(Problem(f"expected FILE[,FILE...][=W], got {spec!r}",
                                     field="--app"))
        files = [Path(n) for n in names]
        apps.append(App(_run_name(files[0]), load_gradients(files), importance))
    return apps


def _run_name(gradients: Path) -> str:
    """The run directory's name: `gradients.json` alone is in '.', which names nothing, so the
    directory as made absolute (lexically: '..' taken away, symlinks kept as given)."""
    return Path(os.path.abspath(gradients)).parent.name or str(gradients.parent)


def _run_source(run: RunInputs) -> str:
    """The run directory for a message: as given, unless that is '.' (see `_run_name`)."""
    return str(run.run_dir) if run.run_dir.name else os.path.abspath(run.run_dir)


def build_problem(apps: list[App], latencies: Latencies, candidates: dict[str, list[str]],
                  latencies_file: str = "<latencies>",
                  candidates_file: str = "<candidates>") -> PlacementProblem:
    """The search over `candidates`, every host in them one of the apps' and every site one
    the latencies know (`check_candidates`)."""
    hosts = tuple(sorted({h for a in apps for h in a.run.hosts}))
    here = {h: latencies.sites.get(h, h) for h in hosts}
    sites = tuple(sorted(set(here.values()) | {s for c in candidates.values() for s in c}))
    index = {s: i for i, s in enumerate(sites)}
    table = one_way(latencies)
    lat = np.array([[table[(a, b)].mean if (a, b) in table else np.nan for b in sites]
                    for a in sites])
    lat_se = np.array([[table[(a, b)].se if (a, b) in table else 0.0 for b in sites]
                       for a in sites])
    gradient, curvature = np.zeros((2, len(hosts), len(hosts)))
    at = {h: i for i, h in enumerate(hosts)}
    for app in apps:
        for (a, b), (g, c) in app.weights().items():
            gradient[at[a], at[b]] += app.importance * g
            curvature[at[a], at[b]] += app.importance * c
    allowed = np.zeros((len(hosts), len(sites)), dtype=bool)
    for h in hosts:
        allowed[at[h], [index[s] for s in {here[h], *candidates.get(h, [])}]] = True
    current = np.array([index[here[h]] for h in hosts])
    _check_latencies(gradient + curvature, allowed, current, lat, hosts, sites,
                     (latencies_file, candidates_file))
    return PlacementProblem.from_curves(hosts, sites, np.nan_to_num(lat), gradient, curvature,
                                        allowed, current, lat_se)


def _check_latencies(weight: np.ndarray, allowed: np.ndarray, current: np.ndarray,
                     lat: np.ndarray, hosts: tuple[str, ...], sites: tuple[str, ...],
                     files: tuple[str, str]) -> None:
    """Every site pair two weighted hosts may be at has a latency: one missing is reported at
    the latencies file, naming the candidates file only when it lets a host of the pair go
    there (both where they are now: the latencies file alone lacks it)."""
    missing = set()
    for a, b in zip(*np.nonzero(weight), strict=True):
        for sa in np.flatnonzero(allowed[a]):
            for sb in np.flatnonzero(allowed[b]):
                if np.isnan(lat[sa, sb]):
                    now = bool(sa == current[a] and sb == current[b])
                    missing.add((sites[sa], sites[sb], hosts[a], hosts[b], now))
    if missing:
        raise InputError([Problem(
            f"no latency for {sa}->{sb} (where {a}->{b} "
            + ("are now)" if now else f"may go, by {files[1]})"), files[0], field="latency_ms")
            for sa, sb, a, b, now in sorted(missing)])


def _check_measured(apps: list[App], candidates: dict[str, list[str]],
                    candidates_file: Path) -> None:
    """Every link that carries traffic and may change latency (a host in the candidates file
    may move) has a measured gradient: the run lacks one, or the host should stay."""
    for app in apps:
        moving = {p for p in app.run.traffic if p[0] in candidates or p[1] in candidates}
        if missing := unmeasured(app.run, moving):
            raise InputError(Problem(
                f"{app.name}: these links carry traffic and may change latency (their hosts "
                f"may move by {candidates_file}), but have no measured gradient: "
                f"{', '.join(f'{a}->{b}' for a, b in missing)}",
                _run_source(app.run), field="--app"))


def place_command(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise InputError(Problem(f"must be 1 or more, got {args.top}", field="--top"))
    apps = _apps(args.app)
    candidates = load_candidates(args.candidates)
    hosts = [h for a in apps for h in a.run.hosts]
    source = run_latencies(args.latencies, [d for a in apps for d in a.run.paths_dirs], hosts,
                           {p for a in apps for p in a.run.talking_pairs()})
    latencies = source.latencies
    if source.note and not args.json:
        terminal(stderr=True).print(source.note)
    check_candidates(candidates, args.candidates, hosts, latency_sites(latencies, hosts),
                     source.name)
    _check_measured(apps, candidates, args.candidates)
    problem = build_problem(apps, latencies, candidates, source.name, str(args.candidates))
    started = time.perf_counter()
    result = search(problem, args.top)
    out = place_answer(problem, result, apps, time.perf_counter() - started)
    if source.note:
        out = out.model_copy(update={"latencies_note": source.note})
    if args.json:
        print(out.json_text())
    else:
        _print(out)
    return 0


class RankedPlacement(Answer):
    move: dict[str, str]  # host -> its new site; empty: stay
    weighted_change_ms: float  # importance-weighted change of the apps' means
    weighted_change_ci95: tuple[float, float]
    apps_mean_ms: dict[str, float]  # each app's predicted mean
    apps_mean_ci95: dict[str, tuple[float, float]]
    # the 95% interval of its weighted change minus the best's holds 0 (never the best's own)
    within_noise: bool
    notes: list[str]


class PlaceAnswer(Answer):
    method: str  # "exhaustive" or the local search
    placements_evaluated: int
    seconds: float
    gap_bound_ms: float  # the best is at most this far above the optimum
    apps_now_ms: dict[str, float]
    ranked: list[RankedPlacement]
    passive_pairs: dict[str, list[str]]  # app -> pairs a ranked placement changes whose
    # gradient is passive (explain.json)
    latencies_note: str | None = absent_when_none()  # where latencies came from the paths


def _ci(e: Estimate, digits: int = 3) -> tuple[float, float]:
    return round(e.mean - Z95 * e.se, digits), round(e.mean + Z95 * e.se, digits)


def place_answer(problem: PlacementProblem, result: SearchResult, apps: list[App],
                 seconds: float) -> PlaceAnswer:
    now = problem.cost(problem.current)
    total = sum(a.importance for a in apps)
    latency = placement_latency(problem)
    best = np.array(result.ranked[0][1])
    ranked, passive_used = [], {a.name: set() for a in apps}

    def weighted(first: np.ndarray, second: np.ndarray) -> Estimate:
        return difference([c for a in apps
                           for c in a.compared(problem, first, second, a.importance / total)],
                          latency)

    for i, (cost, placement) in enumerate(result.ranked):
        at = np.array(placement)
        moves = {h: problem.sites[s] for h, s, c in zip(problem.hosts, placement,
                                                        problem.current, strict=True) if s != c}
        per_app, per_app_ci, notes = {}, {}, []
        for a in apps:  # each pair's latency change, once per app and placement
            weights = a.weights()
            deltas = _deltas(problem, weights, placement)
            current = a.current_ms()
            per_app[a.name] = round(current.mean + _change(weights, deltas), 3)
            change = difference(a.compared(problem, at, problem.current), latency)
            per_app_ci[a.name] = _ci(Estimate(per_app[a.name],
                                              math.hypot(current.se, change.se)))
            notes += _extrapolated(a, deltas)
            if passive := {p for p in a.run.passive_pairs() if deltas.get(p)}:
                passive_used[a.name] |= passive
                notes.append(f"{a.name}: uses passive gradients for "
                             f"{', '.join(pair_names(passive))} (explain.json, not measured)")
        change, versus_best = weighted(at, problem.current), weighted(at, best)
        ranked.append(RankedPlacement(
            move=moves, weighted_change_ms=round((cost - now) / total, 3),
            weighted_change_ci95=_ci(Estimate((cost - now) / total, change.se)),
            apps_mean_ms=per_app, apps_mean_ci95=per_app_ci,
            within_noise=i > 0 and versus_best.mean - Z95 * versus_best.se <= 0, notes=notes))
    return PlaceAnswer(method=result.method, placements_evaluated=result.evaluated,
                       seconds=round(seconds, 3), gap_bound_ms=round(result.gap_ms / total, 3),
                       apps_now_ms={a.name: round(a.current_ms().mean, 3) for a in apps},
                       ranked=ranked,
                       passive_pairs={n: pair_names(p) for n, p in passive_used.items() if p})


def _deltas(problem: PlacementProblem, weights: dict[tuple[str, str], tuple[float, float]],
            placement: tuple[int, ...]) -> dict[tuple[str, str], float]:
    """Each weighted host pair's one-way latency change (ms) under `placement`."""
    at = {h: i for i, h in enumerate(problem.hosts)}
    lat, new, old = problem.latency_ms, placement, problem.current
    return {(a, b): float(lat[new[at[a]], new[at[b]]] - lat[old[at[a]], old[at[b]]])
            for a, b in weights}


def _change(weights: dict[tuple[str, str], tuple[float, float]],
            deltas: dict[tuple[str, str], float]) -> float:
    """g·Δ + c·Δ² summed over the pairs: the app's predicted change of mean (ms)."""
    return sum(g * deltas[p] + c * deltas[p] ** 2 for p, (g, c) in weights.items())


def _extrapolated(app: App, deltas: dict[tuple[str, str], float]) -> list[str]:
    """Pairs whose latency would change by more than the run measured them with (ch. 6)."""
    measured = app.run.measured_ms
    return [f"{app.name}: {a}->{b} changes by {d:+.1f} ms, beyond the {measured[(a, b)]:g} ms "
            "it was measured with (extrapolated)"
            for (a, b), d in sorted(deltas.items())
            if (a, b) in measured and abs(d) > measured[(a, b)] + 1e-9]


def _print(out: PlaceAnswer) -> None:
    console = terminal()
    apps = list(out.apps_now_ms)
    table = Table("rank", "moves", "weighted change ms [95%]",
                  *[f"{a} mean ms [95%]" for a in apps], "vs best",
                  title=f"{out.method}, {out.placements_evaluated} placements scored in "
                        f"{out.seconds:g} s")
    table.add_row("now", "-", "0", *[f"{out.apps_now_ms[a]:.1f}" for a in apps], "")
    for i, r in enumerate(out.ranked, 1):
        moves = ", ".join(f"{h} → {s}" for h, s in r.move.items()) or "(stay)"
        lo, hi = r.weighted_change_ci95
        table.add_row(str(i), moves, f"{r.weighted_change_ms:+.3g} [{lo:+.3g}, {hi:+.3g}]",
                      *[f"{r.apps_mean_ms[a]:.4g} [{r.apps_mean_ci95[a][0]:.4g}, "
                        f"{r.apps_mean_ci95[a][1]:.4g}]" for a in apps],
                      "best" if i == 1 else "within noise" if r.within_noise else "worse")
    console.print(table)
    if len(out.ranked) > 1 and out.ranked[1].within_noise:
        console.print("within noise: the placements so marked differ from the best by less "
                      "than the 95% interval of their difference")
    for i, r in enumerate(out.ranked, 1):
        for note in r.notes:
            console.print(f"[yellow]{i}: {note}[/]")
    if out.method != "exhaustive":
        console.print(f"the best is within {out.gap_bound_ms:.2f} ms of the optimum")


COMMANDS = (
    Command("place", "rank placements of components over sites (one or several applications)",
            "Search the placements of components over candidate sites for the lowest weighted "
            "mean response time, predicted from each application's link gradients (eq. 2.1): "
            "per application its transaction mix (the run's requests) and importance. "
            "Exhaustive up to 200,000 placements; above, best-improvement local search from "
            "several starts, reported with a lower bound on the optimum (the gap is at most "
            "best minus bound).",
            _arguments, place_command,
            epilog="Candidates file: `candidates: {HOST: [SITE, ...]}`; a host not listed "
                   "stays, and staying is always a candidate. Latencies file: as for "
                   "`linkgrad predict`.",
            example=('linkgrad place --app '
                     '"$(ls -d runs/testbed-quick-* | tail -1)"/gradients.json '
                     "--latencies experiments/placement/now.yaml "
                     "--candidates experiments/placement/candidates.yaml")),
)

"""Accuracy of the thesis's eq. 2.6 and of our estimate, side by side on the same data.

Reproduces the shape of thesis Figures 4.3 (samples per period), 4.4 (N), 4.6 (k) and 4.7
(delay scale factor d) on the thesis's micro-benchmark (one front end calling one back end with
normally distributed service, mean 100 ms, sd 30 ms; true gradient 1), then the headline table:
bias, spread, RMSE and 95%-CI coverage for gradients 0, 0.3, 0.5, 1, 2, 6 at equal injected delay
and equal measurement time, under plain and production-like noise (spikes, pauses, drift), and
ours at half the delay.

    .venv/bin/python benchmarks/estimator_accuracy.py [--reps 100] [--quick]

Writes benchmarks/out/estimator_accuracy.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks.results_md import update_section
from linkgrad.spectral.binning import sampling_interval_s
from linkgrad.spectral.estimate import GradientSettings, log_gradients
from linkgrad.spectral.training import baseline_spectrum, choose_injection
from linkgrad.square_wave import SquareWave
from testbed.synthetic import (
    NoiseSpec,
    SyntheticRequests,
    TransactionSpec,
    Workload,
    generate,
    standard_workload,
)

T0 = 1_795_000_000.0
CHUNKS = 9
ORIGIN = T0 - 3600.0  # where the shared trend starts: an hour before the injection
OUT = Path(__file__).with_name("out")

THESIS_MICRO = Workload(
    (TransactionSpec("micro", 1.0, rate_per_s=8.0, service_median_s=0.1, service_sigma=0.3,
                     service_kind="normal"),),
    NoiseSpec(spike_probability=0.0),
)


@dataclass(frozen=True)
class Scenario:
    label: str
    workload: Workload
    n_bins: int | None = None  # None: from k (bins_for_window)
    k: int = 8
    points_per_period: int | None = None  # with n_bins: cycles = n_bins / points_per_period
    period_s: float | None = None  # fixed period instead (headline runs)
    cycles: int | None = None
    magnitude_s: float | None = 0.03  # None: from training with scale_d
    scale_d: float | None = None
    ours_magnitude_factor: float = 1.0  # ours measured at this fraction of the thesis's delay


def _training(workload: Workload, seed: int, duration_s: float) -> SyntheticRequests:
    return generate(workload, T0 - duration_s, duration_s, None, seed, noise_seed=seed,
                    origin_s=ORIGIN)


def _concat(a: SyntheticRequests, b: SyntheticRequests) -> tuple[np.ndarray, ...]:
    return (np.concatenate([a.start_s, b.start_s]), np.concatenate([a.response_s, b.response_s]),
            np.concatenate([a.transaction, b.transaction]))


def _expected_bin_s(workload: Workload, k: int) -> float:
    rate = min(t.rate_per_s for t in workload.transactions)
    return (k + 3 * np.sqrt(k)) / rate


def _wave_for(sc: Scenario, train: SyntheticRequests) -> tuple[SquareWave, int | None]:
    """The injection the scenario asks for, sized from the training data like the thesis."""
    first = train.of(sc.workload.transactions[0].name)
    if sc.period_s is not None:
        return SquareWave(T0, sc.period_s, sc.cycles, sc.magnitude_s), None
    bin_s = sampling_interval_s(first[0], sc.k)
    n = sc.n_bins
    if sc.scale_d is not None:
        spectrum = baseline_spectrum(*first, T0, bin_s, n, CHUNKS)
        choice = choose_injection(spectrum, sc.scale_d)
        return SquareWave(T0, choice.period_s, choice.k_d, choice.magnitude_s), n
    cycles = n // sc.points_per_period
    return SquareWave(T0, n * bin_s / cycles, cycles, sc.magnitude_s), n


def run_once(sc: Scenario, seed: int) -> dict[str, tuple[float, float, float, float, float]]:
    """{transaction: (truth, thesis gradient, ours, our CI low, our CI high)} for one run."""
    n_guess = sc.n_bins or 64
    window_guess = (sc.period_s * sc.cycles) if sc.period_s else n_guess * _expected_bin_s(
        sc.workload, sc.k) * 1.3
    train = _training(sc.workload, seed, CHUNKS * window_guess * 1.05 + 60)
    wave, n_bins = _wave_for(sc, train)
    settings = GradientSettings(k=sc.k, chunks=CHUNKS, n_bins=n_bins)
    results = {}
    for who, factor in (("thesis", 1.0), ("ours", sc.ours_magnitude_factor)):
        if who == "ours" and factor == 1.0:
            break  # the same run serves both
        w = replace(wave, magnitude_s=wave.magnitude_s * factor)
        meas = generate(sc.workload, T0, wave.cycles * wave.period_s + 30, w, seed + 10**6,
                        noise_seed=seed, origin_s=ORIGIN)
        t, y, kind = _concat(train, meas)
        order = np.argsort(t, kind="stable")
        t, y, kind = t[order], y[order], kind[order]
        names = [s.name for s in sc.workload.transactions]
        groups = {name: np.flatnonzero(kind == i) for i, name in enumerate(names)}
        results[who] = log_gradients(t, y, groups, w, settings, n_bins)
    ours = results.get("ours", results["thesis"])
    out = {}
    for spec in sc.workload.transactions:
        th, us = results["thesis"][spec.name], ours[spec.name]
        e = us.lockin
        out[spec.name] = (spec.gradient, th.thesis.gradient, e.gradient, e.ci[0], e.ci[1])
    return out


def summarise(rows: list[tuple[float, float, float, float, float]]) -> dict[str, float]:
    a = np.array(rows)
    truth = a[0, 0]
    th, us = a[:, 1], a[:, 2]
    rmse_th = float(np.sqrt(np.mean((th - truth) ** 2)))
    rmse_us = float(np.sqrt(np.mean((us - truth) ** 2)))
    return {
        "truth": float(truth), "runs": len(a),
        "thesis_mean": float(th.mean()), "thesis_sd": float(th.std(ddof=1)), "thesis_rmse": rmse_th,
        "ours_mean": float(us.mean()), "ours_sd": float(us.std(ddof=1)), "ours_rmse": rmse_us,
        "ours_coverage": float(np.mean((a[:, 3] <= truth) & (truth <= a[:, 4]))),
        "ours_ci_halfwidth": float(np.median((a[:, 4] - a[:, 3]) / 2)),
        "rmse_ratio": rmse_us / rmse_th if rmse_th > 0 else float("nan"),
    }


def run_scenario(sc: Scenario, reps: int) -> dict[str, dict[str, float]]:
    per_tx: dict[str, list] = {}
    for seed in range(reps):
        for name, row in run_once(sc, seed).items():
            per_tx.setdefault(name, []).append(row)
    return {name: summarise(rows) for name, rows in per_tx.items()}


def figure_scenarios() -> dict[str, list[Scenario]]:
    micro = THESIS_MICRO
    return {
        "fig4.3 samples per period (N=128, k=8, 30 ms)": [
            Scenario(f"{p} per period", micro, n_bins=128, points_per_period=p)
            for p in (4, 8, 16, 32, 64)],
        "fig4.4 total sampling points N (k=8, 30 ms, 4 cycles)": [
            Scenario(f"N={n}", micro, n_bins=n, points_per_period=n // 4)
            for n in (16, 32, 64, 128, 256)],
        "fig4.6 points per bin k (N=64, 32 per period, 30 ms)": [
            Scenario(f"k={k}", micro, n_bins=64, k=k, points_per_period=32)
            for k in (1, 2, 4, 8, 16, 32)],
        "fig4.7 delay scale factor d (N=64, k=12)": [
            Scenario(f"d={d}", micro, n_bins=64, k=12, magnitude_s=None, scale_d=d)
            for d in (10, 20, 30, 40, 50)],
    }


def headline_scenarios() -> list[Scenario]:
    kw = {"period_s": 40.0, "cycles": 6, "magnitude_s": 0.03}
    plain = standard_workload(NoiseSpec(spike_probability=0.0))
    production = standard_workload(NoiseSpec.production())
    zero = Workload((replace(THESIS_MICRO.transactions[0], gradient=0.0),), THESIS_MICRO.noise)
    return [
        Scenario("thesis micro, g=1", THESIS_MICRO, **kw),
        Scenario("thesis micro, g=0", zero, **kw),
        Scenario("plain lognormal", plain, **kw),
        Scenario("production noise", production, **kw),
        Scenario("production noise, ours at half the delay", production,
                 ours_magnitude_factor=0.5, **kw),
    ]


def _fmt(s: dict[str, float]) -> str:
    return (f"{s['truth']:g} | {s['thesis_mean']:.3f} ± {s['thesis_sd']:.3f} | "
            f"{s['ours_mean']:.3f} ± {s['ours_sd']:.3f} | {s['thesis_rmse']:.3f} | "
            f"{s['ours_rmse']:.3f} | **{s['rmse_ratio']:.2f}** | {s['ours_coverage']:.2f} | "
            f"{s['ours_ci_halfwidth']:.3f}")


COLUMNS = ("| case | truth | thesis mean ± sd | ours mean ± sd | thesis RMSE | ours RMSE | "
           "ratio | our 95% CI coverage | our median CI half-width |\n"
           "|---|---|---|---|---|---|---|---|---|")

READING = """\
Reading it. Where the thesis's eq. 2.6 loses information, ours gains most: at gradient 0 the
modulus turns noise into a positive bias (ours: none); under production-like noise (multi-second
spikes, stop-the-world pauses, drift) the thesis's bin means carry the spikes and the drift
into the low frequencies it injects at; with the d-rule (Fig. 4.7) training picks k_d that do
not divide N, so the thesis's bins straddle the edges and it reads low (§4.2), while ours aligns
to the edges. On the thesis's own Gaussian micro-benchmark at gradient 1 both are close to the
best any unbiased estimate can do with these requests: the thesis's in-phase variance is
(1 + 1/M)·π²σ²/(2n), ours 4σ²/n' with n' = n(1 + 1/2C) (the off half-period before the first
edge), a ratio of sqrt(0.67) ≈ 0.82 for M = 9, C = 6; the measured 0.79–0.96 sit there, so the
0.6 goal is not reachable on Gaussian noise with the same data, and is met on the rest."""

PAPER = """\
Thesis figures for comparison (Chen 2008, 10 runs each): Fig. 4.3 — the mean gradient is poor
near the Nyquist rate and approaches 1 above 8 points per period; Fig. 4.4 — mean tends to 1.0
and the sd falls monotonically as N grows from 16 to 256; Fig. 4.6 — k barely moves the mean, the
sd falls slowly; Fig. 4.7 — d does not move the mean, the sd falls fast up to d = 30. Table 4.2
(M = 9): sd 0.02–0.11 at gradients 0.5–2, and a bias of **0.07–0.16 at gradient 0**."""


def to_markdown(figures: dict, headline: dict, reps: int, seconds: float) -> str:
    lines = [
        "## Estimator accuracy: thesis eq. 2.6 vs ours (`benchmarks/estimator_accuracy.py`)",
        "",
        f"{reps} simulated experiments per row, both methods on the same requests "
        f"(seeded `testbed.synthetic`), M = {CHUNKS} training chunks. Ratio = our RMSE / the "
        "thesis's RMSE (goal ≤ 0.6, aim 0.5). Coverage: fraction of runs whose 95% CI holds the "
        f"truth (goal 0.90–0.98). Machine: {platform.machine()}, {seconds:.0f} s in all.",
        "",
        "### Headline: equal delay (30 ms) and equal time (6 cycles of 40 s)",
        "",
        COLUMNS,
    ]
    for label, per_tx in headline.items():
        for name, s in per_tx.items():
            lines.append(f"| {label}: {name} | {_fmt(s)} |")
    for title, rows in figures.items():
        lines += ["", f"### {title}", "", COLUMNS]
        lines += [f"| {label} | {_fmt(s['micro'])} |" for label, s in rows.items()]
    lines += ["", READING, "", PAPER]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="20 runs per row, no RESULTS.md")
    args = parser.parse_args()
    reps = 20 if args.quick else args.reps
    started = time.perf_counter()
    headline = {}
    for sc in headline_scenarios():
        headline[sc.label] = run_scenario(sc, reps)
        print(sc.label, {k: round(v["rmse_ratio"], 2) for k, v in headline[sc.label].items()})
    figures = {}
    for title, scenarios in figure_scenarios().items():
        figures[title] = {sc.label: run_scenario(sc, reps) for sc in scenarios}
        print(title, {k: round(v["micro"]["rmse_ratio"], 2) for k, v in figures[title].items()})
    seconds = time.perf_counter() - started
    OUT.mkdir(exist_ok=True)
    (OUT / "estimator_accuracy.json").write_text(
        json.dumps({"reps": reps, "headline": headline, "figures": figures}, indent=2))
    if not args.quick:
        update_section("estimator_accuracy", to_markdown(figures, headline, reps, seconds))
    print(f"done in {seconds:.0f} s")


if __name__ == "__main__":
    main()

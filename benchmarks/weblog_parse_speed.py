"""How fast `read_log` parses web logs: lines per second for each format, best of 3.

Writes synthetic logs (1,000,000 lines by default) to a temporary directory: nginx with the
default format (`$time_local`), nginx with `$msec`, Apache common + `%D`, and CSV. Prints a
table and writes `benchmarks/out/weblog_parse_speed.json`. Timing lives here, not in pytest.

    .venv/bin/python -m benchmarks.weblog_parse_speed [--lines N]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.results_md import update_section
from linkgrad.weblog import read_log
from linkgrad.weblog.apache_format import DEFAULT_LOG_FORMAT as APACHE_FORMAT
from linkgrad.weblog.nginx_format import DEFAULT_LOG_FORMAT as NGINX_FORMAT

OUT = Path(__file__).parent / "out" / "weblog_parse_speed.json"
NGINX_MSEC_FORMAT = NGINX_FORMAT.replace("[$time_local]", "$msec")
T0_S = 1_795_338_000.0  # 22 Nov 2026 10:00 UTC
RATE_PER_S = 1000.0
URLS = ["/", "/login", "/cart?item=42", "/search?q=link+gradient&page=2", "/static/app.js"]
AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0", "curl/8.5.0", "python-httpx/0.27"]


def _requests(n: int, seed: int = 1) -> list[tuple[float, float, str, str]]:
    """(start s, response s, url, user agent) of n requests arriving at RATE_PER_S."""
    rng = random.Random(seed)
    return [
        (T0_S + i / RATE_PER_S, rng.expovariate(1 / 0.05), rng.choice(URLS), rng.choice(AGENTS))
        for i in range(n)
    ]


def _clf(t_s: float) -> str:
    return datetime.fromtimestamp(int(t_s), UTC).strftime("%d/%b/%Y:%H:%M:%S +0000")


def _nginx(start: float, resp: float, url: str, agent: str, msec: bool) -> str:
    end = start + resp
    stamp = f"{end:.3f}" if msec else f"[{_clf(end)}]"
    return (
        f'10.0.0.{int(start) % 250} - - {stamp} "GET {url} HTTP/1.1" 200 5120 "-" "{agent}" '
        f"{resp:.3f}\n"
    )


def _apache(start: float, resp: float, url: str, agent: str) -> str:
    host = f"10.0.0.{int(start) % 250}"
    return f'{host} - - [{_clf(start)}] "GET {url} HTTP/1.1" 200 5120 {resp * 1e6:.0f}\n'


def _csv(start: float, resp: float, url: str, agent: str) -> str:
    return f'{start:.3f},{resp * 1e3:.3f},"{url}"\n'


CASES: dict[str, tuple[str, str | None, Callable[..., str]]] = {
    "nginx_time_local": ("nginx", NGINX_FORMAT, lambda *r: _nginx(*r, msec=False)),
    "nginx_msec": ("nginx", NGINX_MSEC_FORMAT, lambda *r: _nginx(*r, msec=True)),
    "apache": ("apache", APACHE_FORMAT, _apache),
    "csv": ("csv", None, _csv),
}


def _write(path: Path, render: Callable[..., str], requests: list) -> None:
    with path.open("w") as f:
        if path.suffix == ".csv":
            f.write("start_unix_s,response_ms,url\n")
        f.writelines(render(*r) for r in requests)


def _best_of_3(path: Path, fmt: str, log_format: str | None, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        log = read_log(path, fmt, log_format)
        best = min(best, time.perf_counter() - t)
        if len(log) != n or log.malformed.count:
            raise SystemExit(f"{path}: parsed {len(log)} of {n} lines, {log.malformed}")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    n = parser.parse_args().lines
    requests = _requests(n)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (fmt, log_format, render) in CASES.items():
            path = Path(tmp) / f"{name}.{'csv' if fmt == 'csv' else 'log'}"
            _write(path, render, requests)
            best_s = _best_of_3(path, fmt, log_format, n)
            results[name] = {
                "lines": n,
                "best_s": round(best_s, 3),
                "lines_per_s": round(n / best_s),
            }
            print(f"{name:18s} {n:>9d} lines  {best_s:6.2f} s  {n / best_s:>10,.0f} lines/s")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "best_of": 3}
    OUT.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    print(f"wrote {OUT}")
    update_section("weblog_parse_speed", _markdown(results, meta))


def _markdown(results: dict[str, dict[str, float]], meta: dict[str, object]) -> str:
    lines = [
        "## Web-log parsing speed (`benchmarks/weblog_parse_speed.py`)",
        "",
        f"`read_log` on synthetic logs, best of {meta['best_of']}, one core, Python "
        f"{meta['python']} on {meta['machine']}. Issue goal: a million lines in seconds "
        "(the papers give no figure).",
        "",
        "| format | lines | best time (s) | lines/s |",
        "|---|---|---|---|",
    ]
    lines += [f"| {name} | {r['lines']:,} | {r['best_s']:.2f} | {r['lines_per_s']:,} |"
              for name, r in results.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

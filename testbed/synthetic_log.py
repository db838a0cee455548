"""Synthetic requests written as a real nginx access log plus its injection record.

`python -m testbed.synthetic_log DIR` rebuilds the example shipped in `experiments/example/`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np

from linkgrad.protocol.record import InjectionRecord
from linkgrad.square_wave import SquareWave
from testbed.synthetic import NoiseSpec, SyntheticRequests, generate, standard_workload

# nginx "combined" + $request_time + $msec (millisecond end stamps: $time_local has 1 s).
EXAMPLE_LOG_FORMAT = (
    '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    '"$http_referer" "$http_user_agent" $request_time $msec'
)


def nginx_lines(requests: SyntheticRequests) -> list[str]:
    """One line per request in EXAMPLE_LOG_FORMAT, in the order nginx writes them (end time)."""
    end = requests.start_s + requests.response_s
    order = np.argsort(end, kind="stable")
    urls = requests.urls()
    lines = []
    for i in order:
        stamp = float(end[i])
        local = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(stamp))
        lines.append(
            f'10.0.0.{i % 200 + 2} - - [{local}] "GET {urls[i]} HTTP/1.1" 200 {512 + i % 900} '
            f'"-" "linkgrad-synthetic" {requests.response_s[i]:.3f} {stamp:.3f}'
        )
    return lines


def write_nginx_log(path: Path, requests: SyntheticRequests) -> None:
    text = "\n".join(nginx_lines(requests)) + "\n"
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as f:  # mtime 0 keeps the file byte-identical across runs
            f.write(text)
    else:
        path.write_text(text)


def injection_record(wave: SquareWave, link: str | None = None) -> str:
    """The wave's injection record as JSON (docs/offline.md), its delay as the wave's."""
    record = InjectionRecord.of(wave, round(wave.magnitude_s * 1e3, 6), link)
    return json.dumps(record.model_dump(exclude_none=True), indent=2) + "\n"


def write_example(directory: Path, seed: int = 2026) -> None:
    """The shipped example (experiments/example): the standard workload under production
    noise, one injection."""
    directory.mkdir(parents=True, exist_ok=True)
    start = 1_795_000_000.0
    wave = SquareWave(start, period_s=40.0, cycles=6, magnitude_s=0.03)
    training_s = 9 * wave.cycles * wave.period_s
    requests = generate(
        standard_workload(NoiseSpec.production()), start - training_s,
        training_s + wave.cycles * wave.period_s + 30.0, wave, seed,
    )
    write_nginx_log(directory / "access.log.gz", requests)
    (directory / "injection.json").write_text(injection_record(wave, "tcp app1:0 -> db:5432"))
    (directory / "log_format.txt").write_text(EXAMPLE_LOG_FORMAT + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    write_example(args.directory, args.seed)


if __name__ == "__main__":
    main()

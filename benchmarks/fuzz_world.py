"""The valid inputs benchmarks/fuzz_cli.py spoils: files, a run directory, command lines.

Everything lives in one temporary directory. Nothing a case runs can reach a real host or
testbed: the experiment's hosts are 127.0.0.x on port 1 (refused at once), the ssh files are
the campaign's own, and $LINKGRAD_TESTBED_ROOT, $HOME and $TMPDIR point inside it.
"""

from __future__ import annotations

import gzip
import os
import random
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from linkgrad.square_wave import SquareWave
from testbed.synthetic import NoiseSpec, generate, standard_workload
from testbed.synthetic_log import EXAMPLE_LOG_FORMAT, injection_record, write_nginx_log

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "experiments"
# What each command reads of a run directory: damage elsewhere may rightly go unnoticed.
READS = {"predict": {"gradients.json", "graph.json", "baseline.json", "experiment.json"},
         "report": {"gradients.json", "run.json", "plan.json", "experiment.json"},
         "resume": {"gradients.json", "run.json"}}
READS["place"] = READS["route"] = READS["predict"]
RUN_FILES = ("gradients.json", "run.json", "plan.json", "experiment.json", "graph.json",
             "baseline.json", "injections/001.json", "weblog.log")
LOG_FORMATS = ["", "$msec", "$request_time", "$msec $msec $request_time", "$nope", '"$request',
               "%D %t", "$request_time$msec"]


@dataclass
class Input:
    """A file a command reads: the valid one, its kind, and the argv that reads it.

    `in_run` names it inside the run directory (each case gets a copy of the directory)."""

    command: str
    slot: str
    base: Path
    kind: str  # yaml | json | log-nginx | log-csv | log-gz
    argv: Callable[[Path, Path], list[str]]  # (case dir, the file) -> argv after the command
    in_run: str | None = None


@dataclass
class World:
    root: Path
    run_dir: Path
    env: dict[str, str]
    good: dict[str, Path]
    linkgrad: list[str]  # the command that runs linkgrad
    inputs: list[Input] = field(default_factory=list)

    # --- web-log line surgery (nginx EXAMPLE_LOG_FORMAT ends "$request_time $msec") ---

    @staticmethod
    def log_stamp(line: bytes, fmt: str) -> bytes:
        return line.split(b",")[0] if fmt == "csv" else line.split()[-1]

    @staticmethod
    def with_stamp(line: bytes, fmt: str, stamp: bytes) -> bytes:
        if fmt == "csv":
            return stamp + line[line.index(b","):]
        head = line.rstrip(b"\n").rsplit(b" ", 1)[0]
        return head + b" " + stamp + b"\n"

    @staticmethod
    def with_field(line: bytes, fmt: str, rng: random.Random, value: bytes) -> bytes:
        if fmt == "csv":
            parts = line.rstrip(b"\n").split(b",")
            parts[rng.randrange(2)] = value
            return b",".join(parts) + b"\n"
        parts = line.rstrip(b"\n").split(b" ")
        parts[rng.choice([-1, -2])] = value
        return b" ".join(parts) + b"\n"

    def copy_run(self, case_dir: Path) -> Path:
        return Path(shutil.copytree(self.run_dir, case_dir / "run", symlinks=True))

    def nasty_option(self, rng: random.Random, case_dir: Path, values: list[str],
                     regexes: list[str]) -> tuple[str, list[str], str]:
        """(command, argv, option) with one option's value nasty."""
        g = self.good
        value = values[rng.randrange(len(values))]
        log = ["--log", str(g["log"]), "--log-format", EXAMPLE_LOG_FORMAT]
        gradient = [*log, "--injection", str(g["injection"])]
        run = self.copy_run(case_dir) if rng.random() < 0.5 else self.run_dir
        grads = str(run / "gradients.json")
        choices: list[tuple[str, list[str], str]] = [
            *[("gradient", [*gradient, o, value], o) for o in
              ("-k", "--chunks", "--n-bins", "--baseline-end", "--max-bad-fraction")],
            ("gradient", [*gradient, "--transaction", regexes[rng.randrange(len(regexes))]],
             "--transaction"),
            ("gradient", [*gradient[:2], "--log-format", rng.choice([*LOG_FORMATS, value]),
                          *gradient[4:]], "--log-format"),
            ("gradient", [*log[:2], "--format", "csv", *gradient[4:]], str(g["log"].name)),
            *[("plan", [*log, o, value], o) for o in
              ("--half-width", "--magnitude-ms", "--before", "-k", "--chunks")],
            ("place", ["--app", f"{grads}={value}", "--latencies", str(g["sites"]),
                       "--candidates", str(g["candidates"])], "--app"),
            ("place", ["--app", grads, "--latencies", str(g["sites"]), "--candidates",
                       str(g["candidates"]), "--top", value], "--top"),
            ("route", ["--gradients", grads, "--latencies", str(g["sites"]), "--component",
                       value, "--copies", "here", "east"], "--component"),
            ("route", ["--gradients", grads, "--latencies", str(g["sites"]), "--component",
                       "db", "--copies", value, "east"], "--copies"),
            ("route", ["--gradients", grads, "--latencies", str(g["sites"]), "--component",
                       "db", "--copies", "here", "east", "--nginx", value, "b"], "--nginx"),
            ("latency", [str(g["experiment"]), "--count", value], "--count"),
            ("latency", [str(g["experiment"]), "--output", rng.choice(
                ["/proc/nope/x.yaml", str(case_dir), "/dev/full",
                 str(case_dir / "no" / "such" / "x.yaml"), value])], "--output"),
            ("report", [str(case_dir / value.replace("/", "_")[:50])], "run_dir"),
            ("run", [str(g["experiment"]), "--resume", str(case_dir / "nowhere")], "--resume"),
        ]
        return choices[rng.randrange(len(choices))]


def _run_dir(root: Path) -> Path:
    """A real run directory: the run loop against the fake remote (virtual time, no root)."""
    from coordinator.live.run import run_experiment
    from tests.fakes.remote import FakeApplication, FakeClock, FakeHosts, fake_experiment

    clock = FakeClock()
    hosts = FakeHosts(FakeApplication(clock, {"/two": 2, "/none": 0}))
    experiment = fake_experiment(root)
    run_dir = root / "fake-run"
    journal = run_experiment(experiment, run_dir, lambda _: None, connect=hosts.connect,
                             clock=clock)
    assert journal.status == "completed", journal
    return run_dir


def _experiment(root: Path) -> Path:
    """The fake run's experiment, its hosts on 127.0.0.x port 1: every connection refused."""
    from tests.fakes.remote import LOG_FORMAT

    (root / "known_hosts").write_text("")
    path = root / "experiment.yaml"
    path.write_text(yaml.safe_dump({
        "name": "fake",
        "hosts": [{"name": n, "address": f"127.0.0.{i + 11}", "port": 1}
                  for i, n in enumerate(("web", "app", "db"))],
        "ssh": {"known_hosts": "known_hosts", "connect_timeout_s": 2},
        "web_log": {"host": "web", "path": "/var/log/nginx/access.log", "format": "nginx",
                    "log_format": LOG_FORMAT},
        "transactions": {"two": "^/two", "none": "^/none"},
        "parameters": {"training_s": 30, "period_s": 8, "cycles": 4, "magnitude_ms": 10,
                       "adaptive": False, "include": ["app->db", "db->app"],
                       "concurrent": 2},
        "output": "out"}, sort_keys=False))
    return path


def _shipped_experiments(root: Path) -> list[Path]:
    """experiments/*.yaml with every address made 127.0.0.1 (their testbeds do not exist
    under the campaign's $LINKGRAD_TESTBED_ROOT)."""
    out = []
    for src in [*sorted(EXPERIMENTS.glob("*quick.yaml")), EXPERIMENTS / "reference.yaml"]:
        text = re.sub(r"address: [0-9.]+", "address: 127.0.0.1", src.read_text())
        text = text.replace("output: ../runs", "output: out")
        out.append(root / f"shipped-{src.name}")
        out[-1].write_text(text)
    return out


def _logs(root: Path) -> dict[str, Path]:
    """A small nginx log (plain and gzip) and CSV log of a 6-cycle, 20 ms wave."""
    wave = SquareWave(1_795_000_000.0, 8.0, 6, 0.02)
    requests = generate(standard_workload(NoiseSpec(), rate_per_s=3.0), wave.start_s - 120,
                        120 + 48 + 5, wave, seed=13)
    log, gz, csv = root / "access.log", root / "access.log.gz", root / "requests.csv"
    write_nginx_log(log, requests)
    write_nginx_log(gz, requests)
    urls = requests.urls()
    csv.write_text("start_unix_s,response_ms,url\n" + "".join(
        f"{s:.6f},{r * 1e3:.3f},{u}\n"
        for s, r, u in zip(requests.start_s, requests.response_s, urls, strict=True)))
    injection = root / "injection.json"
    injection.write_text(injection_record(wave, link="tcp app1:0 -> db:5432"))
    partner = root / "partner.json"
    partner.write_text(injection_record(SquareWave(wave.start_s, 16.0, 3, 0.02)))
    return {"log": log, "gz": gz, "csv": csv, "injection": injection, "partner": partner}


def build_world(root: Path, code: Path | None = None) -> World:
    """The valid inputs under `root`; `code`: run that source tree's linkgrad instead."""
    for d in ("home", "testbeds"):
        (root / d).mkdir()
    (root / "tmpdir").mkdir(mode=0o1777)
    (root / "tmpdir").chmod(0o1777)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root / "home"),
           "TMPDIR": str(root / "tmpdir"), "LINKGRAD_TESTBED_ROOT": str(root / "testbeds"),
           "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "100"}
    run_dir = _run_dir(root)
    experiment = _experiment(root)
    logs = _logs(root)
    placement = EXPERIMENTS / "placement"
    sites = root / "sites.yaml"  # experiments/placement/now.yaml for the fake run's hosts
    sites.write_text(re.sub(r"  (client|app2|cache): here\n", "",
                            (placement / "now.yaml").read_text().replace("app1:", "app:")))
    move, candidates = root / "move.yaml", root / "candidates.yaml"
    move.write_text((placement / "db-east.yaml").read_text())
    candidates.write_text("candidates:\n  db: [east, west]\n")
    good = {"experiment": experiment, "sites": sites, "move": move, "candidates": candidates,
            **logs}
    linkgrad = [str(ROOT / ".venv" / "bin" / "linkgrad")]
    if code is not None:
        env["PYTHONPATH"] = str(code.resolve())
        linkgrad = [str(ROOT / ".venv" / "bin" / "python"), "-m", "coordinator.cli"]
    world = World(root, run_dir, env, good, linkgrad)
    world.inputs = _inputs(world, _shipped_experiments(root))
    return world


def _inputs(w: World, shipped: list[Path]) -> list[Input]:
    g = w.good
    fmt = ["--log-format", EXAMPLE_LOG_FORMAT]
    inj = ["--injection", str(g["injection"])]

    def grads(case: Path) -> str:
        return str(w.copy_run(case) / "gradients.json") if not (case / "run").exists() \
            else str(case / "run" / "gradients.json")

    out = [
        Input("gradient", "log", g["log"], "log-nginx",
              lambda c, f: ["--log", str(f), *fmt, *inj]),
        Input("gradient", "log.gz", g["gz"], "log-gz",
              lambda c, f: ["--log", str(f), *fmt, *inj]),
        Input("gradient", "csv", g["csv"], "log-csv",
              lambda c, f: ["--log", str(f), "--format", "csv", *inj]),
        Input("gradient", "injection", g["injection"], "json",
              lambda c, f: ["--log", str(g["log"]), *fmt, "--injection", str(f)]),
        Input("gradient", "concurrent", g["partner"], "json",
              lambda c, f: ["--log", str(g["log"]), *fmt, *inj, "--concurrent", str(f)]),
        Input("plan", "log", g["log"], "log-nginx", lambda c, f: ["--log", str(f), *fmt]),
        Input("plan", "csv", g["csv"], "log-csv",
              lambda c, f: ["--log", str(f), "--format", "csv"]),
        Input("run", "experiment", g["experiment"], "yaml", lambda c, f: [str(f)]),
        Input("latency", "experiment", g["experiment"], "yaml",
              lambda c, f: [str(f), "--count", "2", "--output", str(c / "now.yaml")]),
        Input("predict", "latencies", g["sites"], "yaml",
              lambda c, f: ["--gradients", grads(c), "--latencies", str(f),
                            "--placement", str(g["move"])]),
        Input("predict", "placement", g["move"], "yaml",
              lambda c, f: ["--gradients", grads(c), "--latencies", str(g["sites"]),
                            "--placement", str(f)]),
        Input("place", "latencies", g["sites"], "yaml",
              lambda c, f: ["--app", grads(c), "--latencies", str(f),
                            "--candidates", str(g["candidates"])]),
        Input("place", "candidates", g["candidates"], "yaml",
              lambda c, f: ["--app", grads(c), "--latencies", str(g["sites"]),
                            "--candidates", str(f)]),
        Input("route", "latencies", g["sites"], "yaml",
              lambda c, f: ["--gradients", grads(c), "--latencies", str(f), "--component",
                            "db", "--copies", "here", "east"]),
    ]
    for p in shipped:
        out.append(Input("run", p.name, p, "yaml", lambda c, f: [str(f)]))
    for name in RUN_FILES:
        kind = "log-nginx" if name.endswith(".log") else "json"
        run_file = w.run_dir / name
        out.append(Input("report", name, run_file, kind, lambda c, f: [str(c / "run")], name))
        out.append(Input("resume", name, run_file, kind,
                         lambda c, f: [str(g["experiment"]), "--resume", str(c / "run")], name))
        for command, argv in (
            ("predict", lambda c, f: ["--gradients", str(c / "run" / "gradients.json"),
                                      "--latencies", str(g["sites"]),
                                      "--placement", str(g["move"])]),
            ("place", lambda c, f: ["--app", str(c / "run" / "gradients.json"),
                                    "--latencies", str(g["sites"]),
                                    "--candidates", str(g["candidates"])]),
            ("route", lambda c, f: ["--gradients", str(c / "run" / "gradients.json"),
                                    "--latencies", str(g["sites"]), "--component", "db",
                                    "--copies", "here", "east"]),
        ):
            if name != "weblog.log":
                out.append(Input(command, name, run_file, kind, argv, name))
    return out


def check_world(world: World) -> dict[str, Any]:
    """Each valid input through its command: what the campaign's mutations start from."""
    seen: dict[str, Any] = {}
    for inp in world.inputs:
        if inp.in_run not in (None, "gradients.json"):
            continue  # the same valid run directory as for gradients.json
        case = world.root / "base" / f"{inp.command}-{inp.slot.replace('/', '_')}"
        case.mkdir(parents=True)
        if inp.in_run:
            world.copy_run(case)
        command = "run" if inp.command == "resume" else inp.command
        proc = subprocess.run([*world.linkgrad, command, *inp.argv(case, inp.base), "--json"],
                              capture_output=True, env=world.env, cwd=world.root, timeout=120,
                              stdin=subprocess.DEVNULL)
        seen[f"{inp.command}:{inp.slot}"] = (proc.returncode,
                                             proc.stderr.decode()[-200:].strip())
    return seen


def gz_bytes(raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0)

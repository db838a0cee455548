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
# explain must read the experiment and the journal; any other file it cannot read it leaves
# out and says so (`unread`), by design
READS["explain"] = {"experiment.json", "run.json"}
READS["export"] = {"gradients.json", "run.json", "experiment.json"}  # hosts.json: prometheus
READS["export-prometheus"] = {*READS["export"], "hosts.json"}
READS["export-otlp"] = {"paths-trace.jsonl", "experiment.json", "weblog.log"}
RUN_FILES = ("gradients.json", "run.json", "plan.json", "experiment.json", "graph.json",
             "baseline.json", "injections/001.json", "weblog.log")
# files a command reads if they are there: one missing is no error (export's are optional)
OPTIONAL = {"export": {"run.json", "experiment.json"},
            "export-prometheus": {"run.json", "experiment.json", "hosts.json"},
            "export-otlp": {"experiment.json", "weblog.log"}}
# files only some commands read: (file, commands)
MORE_RUN_FILES = (("snap.json", ("explain",)), ("hosts.json", ("explain", "export")),
                  ("paths-trace.jsonl", ("export-otlp",)))
DATA = ROOT / "tests" / "data"
UNREACHABLE_OTLP = "http://127.0.0.1:1"  # refused at once
LOG_FORMATS = ["", "$msec", "$request_time", "$msec $msec $request_time", "$nope", '"$request',
               "%D %t", "$request_time$msec"]


@dataclass
class Input:
    """A file a command reads: the valid one, its kind, and the argv that reads it.

    `in_run` names it inside the run directory (each case gets a copy of the directory)."""

    command: str
    slot: str
    base: Path
    kind: str  # yaml | json | jsonl | pcap | log-nginx | log-csv | log-gz
    argv: Callable[[Path, Path], list[str]]  # (case dir, the file) -> argv after the command
    in_run: str | None = None
    beside: dict[str, Path] = field(default_factory=dict)  # copied into the case's directory
    # whether --json says how many of a log's lines it read (gradient's does; paths' no)
    counts_lines: bool = True
    reads: str | None = None  # its READS entry, where not the command's


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
            ("paths", ["--pcap", f"web@{value}={g['pcap']}"], "--pcap"),
            ("place", ["--app", f"{g['answer']},{case_dir / value}", "--latencies",
                       str(g["now"]), "--candidates",
                       str(EXPERIMENTS / "placement" / "candidates.yaml")], "--app"),
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


def _passive_inputs(root: Path) -> dict[str, Path]:
    """A saved trace, a capture (Linux cooked, as tcpdump -i any writes), what `gradient
    --json` prints, and the latencies its hosts (app1, db) are in."""
    from scapy.all import IP, TCP, CookedLinux, Raw, wrpcap

    trace = Path(shutil.copy(DATA / "paths" / "trace.jsonl", root / "trace.jsonl"))
    answer = Path(shutil.copy(DATA / "example-gradient.json", root / "answer.json"))
    now = Path(shutil.copy(EXPERIMENTS / "placement" / "now.yaml", root / "now.yaml"))
    packets = []
    for i, (src, dst, sport, dport, flags, seq, data) in enumerate([
            ("10.0.0.1", "10.0.0.2", 40000, 80, "S", 100, b""),
            ("10.0.0.2", "10.0.0.1", 80, 40000, "SA", 500, b""),
            ("10.0.0.1", "10.0.0.2", 40000, 80, "PA", 101, b"GET / HTTP/1.1\r\n\r\n"),
            ("10.0.0.2", "10.0.0.3", 50000, 5432, "PA", 900, b"q" * 30),
            ("10.0.0.3", "10.0.0.2", 5432, 50000, "PA", 3000, b"r" * 200),
            ("10.0.0.2", "10.0.0.1", 80, 40000, "PA", 501, b"a" * 400)]):
        p = CookedLinux(pkttype=4 if src == "10.0.0.2" else 0, proto=0x0800) / \
            IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags=flags, seq=seq) / \
            Raw(data)
        p.time = 1_795_000_000 + i * 0.001
        packets.append(p)
    pcap = root / "web.pcap"
    wrpcap(str(pcap), packets)
    return {"trace": trace, "pcap": pcap, "answer": answer, "now": now}


def _night(root: Path, run_dir: Path) -> dict[str, Path]:
    """A regression suite, a night holding the fake run, and the baseline it accepted."""
    from tests.fakes.remote import NIGHT_EXPERIMENT, NIGHT_SUITE

    (root / "fake.yaml").write_text(NIGHT_EXPERIMENT)
    suite = root / "suite.yaml"
    suite.write_text(NIGHT_SUITE)
    night = root / "nights" / "n1"
    shutil.copytree(run_dir, night / "fake", symlinks=True)
    subprocess.run([str(ROOT / ".venv" / "bin" / "linkgrad"), "regress", str(suite), "--night",
                    str(night), "--accept"], capture_output=True, timeout=300, check=True)
    return {"suite": suite, "night": night, "fake": root / "fake.yaml",
            "regress_baseline": root / "fake-nights.baseline.json"}


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
    shutil.copy(DATA / "paths" / "trace.jsonl", run_dir / "paths-trace.jsonl")
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
            **logs, **_passive_inputs(root), **_night(root, run_dir)}
    linkgrad = [str(ROOT / ".venv" / "bin" / "linkgrad")]
    if code is not None:
        env["PYTHONPATH"] = str(code.resolve())
        linkgrad = [str(ROOT / ".venv" / "bin" / "python"), "-m", "coordinator.cli"]
    env["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"] = "1"  # an unreachable collector: said at once
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
    out += _passive_and_export_inputs(w)
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


def _passive_and_export_inputs(w: World) -> list[Input]:
    """paths (a trace, a capture, a web log), profile, deploy and bottleneck (an experiment:
    its hosts refuse every connection), regress (a suite, its baseline), predict from what
    `gradient --json` prints, explain and export (a run directory's files)."""
    g = w.good
    move = ["--latencies", str(g["now"]), "--placement", str(g["move"])]
    out = [
        Input("paths", "trace", g["trace"], "jsonl", lambda c, f: ["--trace", str(f)]),
        Input("paths", "pcap", g["pcap"], "pcap", lambda c, f: ["--pcap", f"web={f}"]),
        Input("paths", "web-log", g["csv"], "log-csv",
              lambda c, f: ["--trace", str(g["trace"]), "--web-log", str(f), "--format", "csv",
                            "--transaction", "two=^/two"], counts_lines=False),
        Input("paths", "otlp-trace", g["trace"], "jsonl",
              lambda c, f: ["--trace", str(f), "--otlp", UNREACHABLE_OTLP, "--dry-run"]),
        Input("profile", "experiment", g["experiment"], "yaml",
              lambda c, f: [str(f), "--duration", "1"]),
        Input("deploy", "experiment", g["experiment"], "yaml", lambda c, f: [str(f)]),
        Input("bottleneck", "experiment", g["experiment"], "yaml",
              lambda c, f: [str(f), "--from", "web:/tmp/a", "--to", "db:/tmp/b"]),
        Input("regress", "suite", g["suite"], "yaml",
              lambda c, f: [str(f), "--night", str(g["night"]), "--baseline",
                            str(g["regress_baseline"])], beside={"fake.yaml": g["fake"]}),
        Input("regress", "baseline", g["regress_baseline"], "json",
              lambda c, f: [str(g["suite"]), "--night", str(g["night"]), "--baseline",
                            str(f)]),
        Input("predict", "answer", g["answer"], "json",
              lambda c, f: ["--gradients", str(f), *move]),
    ]
    export_targets = (["--prometheus", "x.prom"], ["--esmond", "x.json"],
                      ["--perfsonar", "http://127.0.0.1:1/logstash", "--dry-run"])
    for name, commands in (*((n, ("explain", "export")) for n in RUN_FILES),
                           *MORE_RUN_FILES):
        kind = "log-nginx" if name.endswith(".log") else "jsonl" if name.endswith(".jsonl") \
            else "json"
        run_file = w.run_dir / name
        if "explain" in commands:
            out.append(Input("explain", name, run_file, kind, lambda c, f: [str(c / "run")],
                             name))
        if "export" in commands:
            for target in export_targets:
                out.append(Input("export", f"{name} {target[0]}", run_file, kind,
                                 lambda c, f, t=target: [str(c / "run"), *_in_case(c, t)],
                                 name, reads="export-prometheus"
                                 if target[0] == "--prometheus" else None))
        if name in READS["export-otlp"]:
            out.append(Input("export-otlp", name, run_file, kind,
                             lambda c, f: [str(c / "run"), "--otlp", UNREACHABLE_OTLP], name))
    return out


def _in_case(case: Path, target: list[str]) -> list[str]:
    """An export target's file in the case's own directory."""
    return [target[0], str(case / target[1])] if not target[1].startswith("http") else target


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
        command = {"resume": "run", "export-otlp": "export"}.get(inp.command, inp.command)
        proc = subprocess.run([*world.linkgrad, command, *inp.argv(case, inp.base), "--json"],
                              capture_output=True, env=world.env, cwd=world.root, timeout=120,
                              stdin=subprocess.DEVNULL)
        seen[f"{inp.command}:{inp.slot}"] = (proc.returncode,
                                             proc.stderr.decode()[-200:].strip())
    return seen


def gz_bytes(raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0)

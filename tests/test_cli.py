"""`linkgrad gradient` and `linkgrad plan` end to end on real log files."""

import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from coordinator.cli.catalog import CATALOG, all_commands
from coordinator.cli.command import CommandGroup
from coordinator.cli.main import main
from linkgrad.square_wave import SquareWave
from testbed.synthetic import NoiseSpec, generate, standard_workload
from testbed.synthetic_log import EXAMPLE_LOG_FORMAT, injection_record, write_nginx_log

EXAMPLE = Path(__file__).parent.parent / "experiments" / "example"
TRUTH = {"/async": 0.0, "/cache_p0.3": 0.3, "/balanced": 0.5, "/single": 1.0,
         "/sequential2": 2.0, "/sequential6": 6.0}


@pytest.fixture(scope="module")
def measured_log(tmp_path_factory):
    """A log with 30 min of training and 6 cycles of a 40 s, 40 ms square wave."""
    directory = tmp_path_factory.mktemp("log")
    wave = SquareWave(1_795_000_000.0, 40.0, 6, 0.04)
    requests = generate(standard_workload(NoiseSpec(spike_probability=0.002), rate_per_s=6),
                        wave.start_s - 1800, 1800 + 240 + 20, wave, seed=11)
    write_nginx_log(directory / "access.log", requests)
    (directory / "injection.json").write_text(injection_record(wave))
    return directory


def run_json(capsys, *argv):
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_gradient_json_contract_and_values(capsys, measured_log):
    code, out = run_json(capsys, "gradient", "--log", str(measured_log / "access.log"),
                         "--log-format", EXAMPLE_LOG_FORMAT,
                         "--injection", str(measured_log / "injection.json"))
    assert code == 0
    assert set(out["transactions"]) == set(TRUTH)
    for name, truth in TRUTH.items():
        r = out["transactions"][name]
        assert {"gradient", "ci95", "thesis_gradient", "requests"} <= set(r)
        assert r["requests"] > 1000
        lo, hi = r["ci95"]
        assert lo < r["gradient"] < hi
        assert abs(r["gradient"] - truth) < 0.6, name  # 6 transactions, ±3 half-widths
    assert out["log"]["malformed"]["count"] == 0


def test_named_transactions(capsys, measured_log):
    code, out = run_json(capsys, "gradient", "--log", str(measured_log / "access.log"),
                         "--log-format", EXAMPLE_LOG_FORMAT,
                         "--injection", str(measured_log / "injection.json"),
                         "--transaction", "seq=^/sequential", "--transaction", "one=^/single$")
    assert code == 0
    assert set(out["transactions"]) == {"seq", "one"}
    seq = out["transactions"]["seq"]
    assert 2.5 < seq["gradient"] < 5.5  # a 50/50 mix of 2 and 6 crossings: 4


def test_plan_from_training_data(capsys, measured_log):
    """The plan a run makes at the end of its passive phase (its plan.json), from a log."""
    code, out = run_json(capsys, "plan", "--log", str(measured_log / "access.log"),
                         "--log-format", EXAMPLE_LOG_FORMAT, "--before", "1795000000",
                         "--half-width", "0.2", "--n-bins", "32")
    assert code == 0
    plan = out["plan"]
    assert plan["half_width"] == "0.2"
    assert 4 <= plan["period_s"] <= 60  # the spectrum's quietest frequency, 4 s at least
    assert plan["cycles"] >= 6
    assert plan["magnitude_ms"] == 1.0  # adaptive: a run's first delay
    assert set(plan["effect_noise_ms"]) == set(plan["effect_cap_ms"]) >= {"/single"}
    assert 0 < plan["effect_noise_ms"]["/single"] < plan["effect_cap_ms"]["/single"] * 10
    assert plan["training"][1] == 1795000000
    fixed = run_json(capsys, "plan", "--log", str(measured_log / "access.log"),
                     "--log-format", EXAMPLE_LOG_FORMAT, "--magnitude-ms", "20",
                     "--cycles", "8")[1]["plan"]
    assert (fixed["magnitude_ms"], fixed["cycles"]) == (20.0, 8)
    code, out = run_json(capsys, "plan", "--log", str(measured_log / "access.log"),
                         "--log-format", EXAMPLE_LOG_FORMAT, "--period-s", "60",
                         "--cycles", "8", "--max-duration-s", "300")
    assert code == 2  # the injector would refuse the first wave: said before any run
    assert "--max-duration-s" in out["error"]["message"]
    assert "8 cycles of 60.0 s (given) take 480 s" in out["error"]["message"]


def test_bad_n_bins_is_exit_2_naming_the_option(capsys, measured_log):
    code = main(["gradient", "--log", str(measured_log / "access.log"),
                 "--injection", str(measured_log / "injection.json"), "--n-bins", "12"])
    assert code == 2
    assert "--n-bins" in capsys.readouterr().err


def test_missing_log_is_exit_2_with_json_error(capsys, tmp_path, measured_log):
    code, out = run_json(capsys, "gradient", "--log", str(tmp_path / "none.log"),
                         "--injection", str(measured_log / "injection.json"))
    assert code == 2
    assert out["error"]["kind"] == "input"
    assert "none.log" in out["error"]["message"]


def test_shipped_example_runs_through_the_console_script():
    linkgrad = Path(sys.executable).parent / "linkgrad"
    result = subprocess.run(
        [str(linkgrad), "gradient", "--log", str(EXAMPLE / "access.log.gz"),
         "--log-format", (EXAMPLE / "log_format.txt").read_text().strip(),
         "--injection", str(EXAMPLE / "injection.json"), "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)["transactions"]
    for name, truth in TRUTH.items():
        assert out[name]["ci95"][0] <= truth <= out[name]["ci95"][1], name


def test_help_lists_the_subcommands():
    result = subprocess.run([sys.executable, "-m", "coordinator.cli", "--help"],
                            capture_output=True, text=True, timeout=60, check=True)
    assert "gradient" in result.stdout
    assert "plan" in result.stdout


HEAVY = ("numpy", "scipy", "matplotlib", "pydantic", "paramiko", "fabric")
IMPORTED_BY = """
import sys
from coordinator.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("MODULES", *sorted(m for m in sys.modules if m.split(".")[0] in {heavy}
                      or m.startswith("coordinator.cli.") and m.count(".") == 2))
"""


def _imported_by(*argv: str) -> set[str]:
    """The heavy libraries and command modules a command line imports (what makes --help
    slow: counted, not timed)."""
    code = IMPORTED_BY.format(heavy=set(HEAVY))
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=60, check=True)
    said = done.stdout[done.stdout.rindex("MODULES"):].split()[1:]
    return set(said) - {"coordinator.cli.main", "coordinator.cli.catalog",
                                       "coordinator.cli.command",
                                       "coordinator.cli.internal_error"}


def test_help_imports_no_command_and_no_heavy_library():
    assert {m for m in _imported_by("--help") if m.split(".")[0] in HEAVY} == set()
    assert not {m for m in _imported_by("--help") if m.startswith("coordinator.cli.")}
    assert not _imported_by("--version")



def test_bare_linkgrad_lists_its_commands_and_version_says_the_installed_one():
    linkgrad = Path(sys.executable).parent / "linkgrad"
    bare = subprocess.run([str(linkgrad)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.startswith("usage: linkgrad [-h] [--version]")
    for name in ("gradient", "run", "paths", "place", "regress"):
        assert f"\n    {name} " in bare.stdout, name
    version = subprocess.run([str(linkgrad), "--version"], capture_output=True, text=True,
                             timeout=60, check=True)
    assert version.stdout == f"linkgrad {importlib.metadata.version('linkgrad')}\n"


@pytest.fixture(scope="module")
def concurrent_log(tmp_path_factory):
    """Two links delayed at once (periods 8 s and 16 s from one edge): gradients 2 and 1."""
    directory = tmp_path_factory.mktemp("concurrent")
    rng = np.random.default_rng(5)
    first, second = SquareWave(1_795_000_000.0, 8.0, 8, 0.02), SquareWave(
        1_795_000_000.0, 16.0, 4, 0.02)
    t = np.sort(rng.uniform(first.start_s - 120, first.end_s + 5, 12_000))
    y = 0.05 + rng.normal(0, 0.004, len(t)) + 2 * 0.02 * first.is_on(t) + 0.02 * second.is_on(t)
    rows = [f"{a:.6f},{b * 1e3:.3f},/x" for a, b in zip(t, y, strict=True)]
    (directory / "log.csv").write_text("start_unix_s,response_ms,url\n" + "\n".join(rows) + "\n")
    for name, wave in (("first", first), ("second", second)):
        (directory / f"{name}.json").write_text(injection_record(wave))
    return directory


def test_a_concurrent_partner_is_fitted_jointly_offline(capsys, concurrent_log):
    d = concurrent_log
    args = ["gradient", "--log", str(d / "log.csv"), "--transaction", "x=^/x"]
    code, alone = run_json(capsys, *args, "--injection", str(d / "first.json"))
    assert code == 0
    code, joint = run_json(capsys, *args, "--injection", str(d / "first.json"),
                           "--concurrent", str(d / "second.json"))
    assert code == 0
    assert joint["concurrent"][0]["period_s"] == 16.0
    x, x_alone = joint["transactions"]["x"], alone["transactions"]["x"]
    assert x["ci95"][0] <= 2.0 <= x["ci95"][1]
    # the partner's effect is noise to a lone fit: the joint one is several times narrower
    assert (x["ci95"][1] - x["ci95"][0]) * 3 < x_alone["ci95"][1] - x_alone["ci95"][0]
    code, second = run_json(capsys, *args, "--injection", str(d / "second.json"),
                            "--concurrent", str(d / "first.json"))
    assert code == 0
    y = second["transactions"]["x"]
    assert y["ci95"][0] <= 1.0 <= y["ci95"][1]


def test_a_partner_that_does_not_overlap_or_a_late_baseline_is_exit_2(capsys, concurrent_log,
                                                                      tmp_path):
    d = concurrent_log
    late = json.loads((d / "second.json").read_text())
    late["start"] += 10_000
    (tmp_path / "late.json").write_text(json.dumps(late))
    args = ["gradient", "--log", str(d / "log.csv"), "--injection", str(d / "first.json")]
    assert main([*args, "--concurrent", str(tmp_path / "late.json")]) == 2
    assert "--concurrent" in capsys.readouterr().err
    assert main([*args, "--baseline-end", "1795000001"]) == 2
    assert "--baseline-end" in capsys.readouterr().err


SUBCOMMANDS = ["gradient", "plan", "inject", "testbed", "run", "report", "explain", "predict",
               "latency", "deploy",
               "place", "route", "profile", "paths", "regress", "export", "bottleneck"]


def _leaves(commands, path=()):
    """The command lines that run something: `testbed up`, not `testbed`."""
    for c in commands:
        if isinstance(c, CommandGroup):
            yield from _leaves(c.commands, (*path, c.name))
        else:
            yield (*path, c.name)


def _help(capsys, *argv):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_every_subcommand_is_in_one_list_in_help_and_takes_json(capsys):
    commands = all_commands()
    assert [c.name for c in commands] == SUBCOMMANDS
    # the catalog `linkgrad --help` reads without importing a command says what they say
    assert [(e.name, e.summary) for e in CATALOG] == [(c.name, c.summary) for c in commands]
    assert "{" + ",".join(SUBCOMMANDS) + "}" in _help(capsys)
    leaves = list(_leaves(commands))
    assert ("testbed", "up") in leaves
    assert len(leaves) == len(set(leaves)) == len(SUBCOMMANDS) - 1 + 5  # testbed's five
    for path in leaves:
        text = _help(capsys, *path)
        assert "[--json]" in text.split("\n\n")[0], path
        # every help ends with its exit codes, and shows a command line of its own
        assert "\nexit codes:\n  0    " in text, path
        assert re.search(rf"^  linkgrad {' '.join(path)}( |$)", text, re.MULTILINE), path


def test_a_bug_is_one_sentence_exit_1_and_its_traceback_in_a_file(capsys, monkeypatch,
                                                                  tmp_path):
    """The last resort: an exception that is not a LinkgradError is said as a bug, never a
    traceback on stderr; --json gets a strict JSON error; the traceback is kept in $TMPDIR."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # gettempdir() reads $TMPDIR again

    def bug(args):
        raise ZeroDivisionError("float division by zero\nsecond line")

    class Parser:
        def parse_args(self, argv):
            return argparse.Namespace(run=bug)

    monkeypatch.setattr("coordinator.cli.main.build_parser", lambda argv: Parser())
    code = main(["route", "--json"])
    out, err = capsys.readouterr()
    assert code == 1
    assert json.loads(out)["error"]["kind"] == "internal"
    assert "Traceback" not in err
    assert err.startswith("linkgrad: internal error (a bug, please report it): "
                          "ZeroDivisionError: float division by zero; details in ")
    saved = list(tmp_path.glob("linkgrad-internal-error-*.txt"))
    assert len(saved) == 1
    assert "Traceback (most recent call last)" in saved[0].read_text()


@pytest.mark.parametrize("argv", [
    ["report", "{long}"], ["run", "{long}.yaml"], ["paths", "--trace", "{long}"],
    ["export", "{long}", "--prometheus", "x.prom"],
    ["place", "--app", "tests/data/example-gradient.json,{long}", "--latencies",
     "experiments/placement/now.yaml", "--candidates", "experiments/placement/candidates.yaml"],
])
def test_a_name_longer_than_the_file_system_takes_is_bad_input(capsys, argv, tmp_path):
    """A path with a name over 255 bytes (found by benchmarks/fuzz_cli.py): Path.exists()
    raises ENAMETOOLONG rather than saying no, wherever a command looks; bad input, named."""
    long = str(tmp_path / ("9" * 400))
    code = main([a.replace("{long}", long) for a in argv] + ["--json"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert "internal error" not in err
    assert err.startswith(f"linkgrad: error: {long[:60]}")
    assert json.loads(out)["error"]["kind"] == "input"


def test_a_reader_that_leaves_is_no_traceback(capsys, monkeypatch, measured_log):
    """`linkgrad plan --json | head -c 10` (found by benchmarks/fuzz_cli.py's probes): the
    BrokenPipeError of print() was a traceback, and so was the last-resort handler's."""
    def without_reader(*argv: str) -> int:
        read_end, write_end = os.pipe()
        os.close(read_end)
        with os.fdopen(write_end, "w") as stdout:
            monkeypatch.setattr(sys, "stdout", stdout)
            return main([*argv, "--json"])

    log = str(measured_log / "access.log")
    assert without_reader("plan", "--log", log, "--log-format", EXAMPLE_LOG_FORMAT) == 1
    assert capsys.readouterr().err == ""
    assert without_reader("plan", "--log", log) == 1  # bad input, and no reader for its JSON:
    assert "linkgrad: error: " in capsys.readouterr().err  # the sentence was said first


def test_plan_with_no_transaction_planned_is_exit_2_naming_log_and_before(capsys,
                                                                         measured_log):
    """As gradient does when no transaction has an estimate (found by hand beside
    benchmarks/fuzz_cli.py): `--before` earlier than every request planned nothing, exit 0."""
    log = str(measured_log / "access.log")
    code = main(["plan", "--log", log, "--log-format", EXAMPLE_LOG_FORMAT, "--before", "1",
                 "--json"])
    out = capsys.readouterr().out
    assert code == 2
    message = json.loads(out)["error"]["message"]
    assert message.startswith(f"{log}: field '--before' no transaction can be planned from "
                              "the 0 requests before --before 1970-01-01T00:00:01+00:00 (")
    assert "training saw 0 requests of the transactions: too few to plan" in message


@pytest.mark.parametrize(("option", "value"), [("--duration", "0"), ("--duration", "nan"),
                                               ("--report-interval", "0.01"),
                                               ("--cpu-upper", "0")])
def test_profile_refuses_bad_numbers_naming_the_option(capsys, tmp_path, option, value):
    code = main(["profile", str(tmp_path / "nope.yaml"), option, value])
    assert code == 2
    assert option in capsys.readouterr().err


def test_profile_of_a_missing_experiment_is_bad_input(capsys, tmp_path):
    assert main(["profile", str(tmp_path / "nope.yaml"), "--json"]) == 2
    assert "nope.yaml" in capsys.readouterr().err


@pytest.mark.parametrize(("option", "value"), [("--duration", "0"), ("--duration", "nan"),
                                               ("--report-interval", "0.01"),
                                               ("--window-s", "0"), ("--window", "0")])
def test_paths_refuses_bad_numbers_naming_the_option(capsys, tmp_path, option, value):
    code = main(["paths", str(tmp_path / "nope.yaml"), option, value])
    assert code == 2
    assert option in capsys.readouterr().err


def test_paths_wants_an_experiment_or_a_trace_and_names_a_missing_trace(capsys, tmp_path):
    assert main(["paths"]) == 2
    assert "--trace" in capsys.readouterr().err
    assert main(["paths", str(tmp_path / "x.yaml"), "--trace", str(tmp_path / "t")]) == 2
    capsys.readouterr()
    assert main(["paths", "--trace", str(tmp_path / "nope.jsonl"), "--json"]) == 2
    assert "nope.jsonl" in capsys.readouterr().err


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_a_commands_help_imports_neither_scipy_nor_matplotlib(command):
    """They cost a second between them; only what computes or draws needs them."""
    imported = _imported_by(command, "--help")
    assert f"coordinator.cli.{command}" in imported or command == "report"  # run's module
    assert not {m for m in imported if m.split(".")[0] in ("scipy", "matplotlib")}


@pytest.mark.parametrize("command", ["gradient", "plan"])
def test_the_offline_commands_examples_run_as_written(command):
    """The example in --help, run by a shell from the repository's root."""
    from coordinator.cli.catalog import CATALOG, load_command

    example = load_command(next(e for e in CATALOG if e.name == command)).example
    assert example is not None
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(["bash", "-c", example], cwd=EXAMPLE.parent.parent,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr

"""`linkgrad gradient` and `linkgrad plan` end to end on real log files."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.cli import main
from coordinator.spectral.square_wave import SquareWave
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
    (directory / "injection.json").write_text(json.dumps(injection_record(wave)))
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
    code, out = run_json(capsys, "plan", "--log", str(measured_log / "access.log"),
                         "--log-format", EXAMPLE_LOG_FORMAT, "--before", "1795000000",
                         "--half-width", "0.2", "--n-bins", "32")
    assert code == 0
    single = out["transactions"]["/single"]
    assert 2 <= single["training"]["k_d"] <= 15
    assert single["lockin"]["magnitude_ms_for_half_width"] > 0
    assert single["lockin"]["cycles_for_half_width"] >= 2


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

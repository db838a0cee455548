"""What `linkgrad run` says: however a run ends (completed, aborted, interrupted, failed) it
names the files it kept — only those that exist — and, when links are left to measure, the
`--resume` command that measures them; and an experiment file that names a host it does not
have, or a selector that is no selector, is exit 2 at its file, line and field. The runs use
the fake remote (tests/fakes/remote.py) through the real command line."""

from __future__ import annotations

import functools
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from coordinator.cli import run as run_cli
from coordinator.cli.main import main
from coordinator.live.run import run_experiment
from tests.fakes.remote import ADDRESSES, LOG_FORMAT, START_S, FakeApplication, FakeClock, FakeHosts
from tests.fakes.testbed_status import up_status

CROSSINGS = {"/two": 2, "/none": 0}
FILES = ("graph.json", "baseline.json", "plan.json", "gradients.json", "report.html",
         "explain.json", "weblog.log", "snap.json", "hosts.json", "run.json")


def write_experiment(tmp_path: Path, **parameters: object) -> Path:
    # `linkgrad run` checks the known_hosts it names before making the run directory; the
    # fake remote never reads it, so an empty one will do
    (tmp_path / "known_hosts").write_text("")
    path = tmp_path / "fake.yaml"
    path.write_text(yaml.safe_dump({
        "name": "fake",
        "hosts": [{"name": name, "address": address} for name, address in ADDRESSES.items()],
        "ssh": {"known_hosts": "known_hosts"},
        "web_log": {"host": "web", "path": "/var/log/nginx/access.log", "format": "nginx",
                    "log_format": LOG_FORMAT},
        "transactions": {"two": "^/two", "none": "^/none"},
        "parameters": {"training_s": 30, "period_s": 8, "cycles": 4, "magnitude_ms": 10,
                       "adaptive": False, "include": ["app->db", "db->app"], "concurrent": 1,
                       **parameters},
        "output": "runs"}, sort_keys=False))
    return path


def use_fake(monkeypatch: pytest.MonkeyPatch, **app: object) -> tuple[FakeClock, FakeHosts]:
    """`linkgrad run` against a fake application in virtual time instead of SSH."""
    clock = FakeClock()
    hosts = FakeHosts(FakeApplication(clock, CROSSINGS, **app))  # type: ignore[arg-type]
    monkeypatch.setattr(run_cli, "run_experiment", functools.partial(
        run_experiment, connect=hosts.connect, clock=clock))
    return clock, hosts


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["run", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def kept_listing(err: str) -> tuple[Path, dict[str, str]]:
    """The run directory and the files named under 'kept in RUN_DIR:'."""
    lines = err.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("kept in "))
    run_dir = Path(lines[start].removeprefix("kept in ").removesuffix(":"))
    files = {}
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        name, _, what = line.strip().partition(" ")
        files[name] = what.strip()
    return run_dir, files


def resume_argv(err: str) -> list[str] | None:
    found = re.search(r"^.*: (linkgrad run .* --resume .*)$", err, re.MULTILINE)
    return shlex.split(found[1]) if found else None


def test_an_aborted_run_names_only_the_files_it_kept_and_how_to_resume(
        tmp_path, monkeypatch, capsys):
    path = write_experiment(tmp_path)
    use_fake(monkeypatch, collapse_when_delayed=True)
    code, _, err = run([str(path)], capsys)
    assert code == 1
    assert err.count("aborted: throughput fell below 70%") == 1
    run_dir, files = kept_listing(err)
    assert all((run_dir / name).exists() for name in files)
    assert {"graph.json", "plan.json", "weblog.log", "run.json"} <= set(files)
    assert "gradients.json" not in files  # none was measured: none is named
    assert not (run_dir / "gradients.json").exists()
    assert "gradients.json" not in err
    assert "no link measured" in err
    assert re.search(r"graph\.json +the communication graph: \d+ links", err)
    assert "2 links left to measure: " in err
    assert resume_argv(err) == ["linkgrad", "run", str(path), "--resume", str(run_dir)]


def test_an_interrupted_run_counts_what_it_measured_and_its_resume_command_finishes_it(
        tmp_path, monkeypatch, capsys):
    path = write_experiment(tmp_path)
    clock, _ = use_fake(monkeypatch)
    clock.interrupt_at = START_S + 30 + 55  # after the first link, in the second
    code, _, err = run([str(path)], capsys)
    assert code == 1
    assert "\ninterrupted\n" in err
    run_dir, files = kept_listing(err)
    assert set(files) == set(FILES)
    assert all((run_dir / name).exists() for name in files)
    assert files["gradients.json"] == "1 of 2 links measured"
    assert "1 link left to measure: " in err
    argv = resume_argv(err)
    assert argv is not None
    assert argv[:2] == ["linkgrad", "run"]

    use_fake(monkeypatch, seed=2)  # the command it printed, as printed
    code, _, err = run(argv[2:], capsys)
    assert code == 0
    assert "\ncompleted\n" in err
    _, files = kept_listing(err)
    assert files["gradients.json"] == "2 of 2 links measured (1 from before)"
    assert resume_argv(err) is None  # nothing left
    assert "left to measure" not in err


def test_an_interrupt_in_training_keeps_no_graph_and_says_nothing_was_planned(
        tmp_path, monkeypatch, capsys):
    path = write_experiment(tmp_path)
    clock, _ = use_fake(monkeypatch)
    clock.interrupt_at = START_S + 10
    code, out, err = run([str(path), "--json"], capsys)
    assert code == 1
    run_dir, files = kept_listing(err)
    assert set(files) <= {"weblog.log", "snap.json", "hosts.json", "run.json"}  # SNAP, probes
    assert all((run_dir / name).exists() for name in files)
    assert "no link planned yet: linkgrad run" in err
    status = json.loads(out)
    assert status["status"] == "interrupted"
    assert status["kept"] == sorted(files)
    assert status["resume_argv"] == ["linkgrad", "run", str(path), "--resume", str(run_dir)]
    assert "report" not in status


def test_a_failed_run_says_what_it_kept_before_the_error(tmp_path, monkeypatch, capsys):
    path = write_experiment(tmp_path)
    _, hosts = use_fake(monkeypatch)
    hosts.refusing_injector.add("db")
    code, _, err = run([str(path)], capsys)
    assert code == 1
    assert "failed: injector on db did not start" in err
    assert "linkgrad: error: injector on db did not start" in err
    run_dir, files = kept_listing(err)
    assert {"graph.json", "plan.json", "run.json"} <= set(files)
    assert "gradients.json" not in files
    assert all((run_dir / name).exists() for name in files)
    assert resume_argv(err) is not None


def test_a_completed_run_names_its_gradients_and_no_resume(tmp_path, monkeypatch, capsys):
    path = write_experiment(tmp_path, concurrent=2)
    use_fake(monkeypatch)
    code, out, err = run([str(path), "--json"], capsys)
    assert code == 0
    run_dir, files = kept_listing(err)
    assert files["gradients.json"] == "2 of 2 links measured"
    assert "report.html" in files
    assert all((run_dir / name).exists() for name in files)
    status = json.loads(out)
    assert status["links_done"] == status["links_planned"] == 2
    assert "resume_argv" not in status
    assert set(status["kept"]) == set(files)


@pytest.mark.parametrize("damage", ["missing", "dangling_symlink", "fewer"])
def test_resuming_a_run_whose_gradients_lost_links_is_exit_2_at_gradients_json(
        tmp_path, monkeypatch, capsys, damage):
    path = write_experiment(tmp_path, concurrent=2)
    use_fake(monkeypatch)
    assert run([str(path)], capsys)[0] == 0
    [run_dir] = (tmp_path / "runs").iterdir()
    gradients = run_dir / "gradients.json"
    if damage == "fewer":
        data = json.loads(gradients.read_text())
        gradients.write_text(json.dumps({**data, "links": data["links"][:1], "linearity": []}))
    else:
        gradients.unlink()
        if damage == "dangling_symlink":
            gradients.symlink_to(tmp_path / "nowhere.json")
    before = (run_dir / "run.json").read_bytes()
    code, _, err = run([str(path), "--resume", str(run_dir)], capsys)
    assert code == 2
    assert f"{gradients}: holds {1 if damage == 'fewer' else 0} measurements where run.json " \
        "counts 2" in err
    assert (run_dir / "run.json").read_bytes() == before


# ------------------------------------------------------------------ bad experiment files


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    return path


BASE = ("name: x\n"
        "hosts: [{name: web, address: 192.0.2.1}, {name: db, address: 192.0.2.2}]\n"
        "ssh: {known_hosts: kh}\n"
        "web_log: {host: web, path: /l}\n"
        "transactions: {t: ^/}\n")


@pytest.mark.parametrize(("tail", "expected"), [
    ("workload:\n  host: client\n  argv: [wrk]\n",
     r"x.yaml:7: field 'workload.host' 'client' is not one of the hosts \(web, db\)"),
    ("workload: {host: web, rate_per_s: 5}\n",
     r"x.yaml:6: field 'workload.rate_per_s' the load generator needs the application's URL"),
    ("parameters:\n  include: [web->db, app1->db]\n",
     r"x.yaml:7: field 'parameters.include.1' 'app1->db' names host 'app1', which is not one"),
    ("parameters:\n  exclude:\n    - '*->web'\n    - 're:('\n",
     r"x.yaml:9: field 'parameters.exclude.1' .*bad regex after 're:'"),
    ("parameters:\n  exclude: ['app[12]->db']\n",
     r"x.yaml:7: field 'parameters.exclude.0' .*not a link selector: expected SRC->DST"),
    ("parameters:\n  strategy: passive-first\n  questions:\n    - move: {db: remote}\n"
     "    - move: {cache: remote}\n",
     r"x.yaml:10: field 'parameters.questions.1.move.cache' moves host 'cache', which is not"),
    ("parameters:\n  questions:\n    - move: {db: remote}\n",
     r"x.yaml:7: field 'parameters' .*questions choose the links to inject only with "
     r"strategy: passive-first"),
    ("parameters:\n  strategy: passive_first\n",
     r"x.yaml:7: field 'parameters.strategy' .*'active' or 'passive-first'"),
])
def test_a_host_the_experiment_does_not_have_or_a_bad_selector_is_exit_2_at_its_line(
        tmp_path, capsys, tail, expected):
    code, _, err = run([str(write(tmp_path, BASE + tail))], capsys)
    assert code == 2
    assert re.search(expected, err), err
    assert "Traceback" not in err


def test_with_a_testbed_the_hosts_are_checked_after_the_testbed_fills_them_in(
        tmp_path, monkeypatch, capsys):
    from coordinator.config import testbed_tag

    reports = [up_status(tmp_path, ADDRESSES)]
    monkeypatch.setattr(testbed_tag, "status", lambda tag, root: reports[-1])
    good = ("name: x\ntestbed: tb\ntransactions: {t: ^/}\n"
            "workload: {host: web, rate_per_s: 5}\nparameters: {include: ['app->db']}\n")
    from coordinator.config.experiment_file import load_experiment

    loaded = load_experiment(write(tmp_path, good))
    assert loaded.workload is not None
    assert loaded.frontend_url == "http://10.9.0.1/"
    bad = good.replace("host: web", "host: client").replace("app->db", "app1->db")
    code, _, err = run([str(write(tmp_path, bad))], capsys)
    assert code == 2
    assert "x.yaml:4: field 'workload.host' 'client' is not one of the hosts (web, app, db)" in err
    assert "x.yaml:5: field 'parameters.include.0' 'app1->db' names host 'app1'" in err
    reports.append(up_status(tmp_path, ADDRESSES, web_host="proxy"))  # its own web log host
    code, _, err = run([str(write(tmp_path, good))], capsys)
    assert code == 2
    assert ("x.yaml:2: field 'testbed' 'proxy' is not one of the hosts (web, app, db) (the "
            "testbed's web_log.host)") in err


@pytest.mark.parametrize(("tail", "expected"), [
    ("hosts_port: true\n", r"x.yaml:2: field 'hosts.0.port' Input should be a valid integer"),
    ("parameters: {period_s: 1e308}\n",
     r"x.yaml:6: field 'parameters.period_s' Input should be less than or equal to 3600"),
    ("parameters: {cycles: 1e9}\n", r"x.yaml:6: field 'parameters.cycles' .*valid integer"),
    ("parameters: {cycles: 1000000000}\n",
     r"x.yaml:6: field 'parameters.cycles' Input should be less than or equal to 512"),
    ("parameters: {max_delay_ms: .inf}\n",
     r"x.yaml:6: field 'parameters.max_delay_ms' not a finite number"),
    ("parameters: {magnitude_ms: 500}\n",
     r"x.yaml:6: field 'parameters' .*magnitude_ms 500 is above max_delay_ms 100"),
    ("parameters: {k: 3}\nparameters: {k: 4}\n",
     r"x.yaml:7: field 'parameters' given twice \(lines 6 and 7\)"),
    ("name_: ../../etc\n", r"x.yaml:1: field 'name' a name is 1-64 letters"),
    ("name_: /tmp/x\n", r"x.yaml:1: field 'name' a name is 1-64 letters"),
    ("testbed: ../x\n", r"x.yaml:6: field 'testbed' a testbed tag is 1-4 lowercase"),
    ("parameters: {exclude: ['re:a{4294967296}']}\n",
     r"x.yaml:6: field 'parameters.exclude.0' .*bad regex after 're:'"),
    ("parameters: {include: ['re:(']}\n",
     r"x.yaml:6: field 'parameters.include.0' .*bad regex after 're:'"),
    ("transactions_: {t: 'a{4294967296}'}\n", r"x.yaml:5: field 'transactions' .*bad regex"),
    ("web_log_: {host: web, path: !!binary aGVsbG8=}\n", r"x.yaml:4: .*YAML tag 'binary'"),
])
def test_nonsense_values_are_exit_2_at_their_line_with_the_limit_named(
        tmp_path, capsys, tail, expected):
    """Issue 13: values that parse but are not sane never reach the arithmetic."""
    text = BASE
    if tail.startswith("hosts_port"):
        text = text.replace("address: 192.0.2.1}", "address: 192.0.2.1, port: true}")
    elif "_:" in tail:  # replaces a line of BASE
        key = tail.split("_:")[0]
        text = re.sub(rf"^{key}:.*$", tail.replace("_:", ":").rstrip("\n"), text,
                      flags=re.MULTILINE)
    else:
        text += tail
    code, _, err = run([str(write(tmp_path, text))], capsys)
    assert code == 2, err
    assert re.search(expected, err), err
    assert "Traceback" not in err


def test_an_output_directory_that_cannot_be_made_is_exit_2_at_the_output_line(
        tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    (tmp_path / "kh").write_text("")  # the experiment's known_hosts: only the output is wrong
    code, _, err = run([str(write(tmp_path, BASE + "output: afile/runs\n"))], capsys)
    assert code == 2
    assert re.search(r"x.yaml:6: field 'output' cannot create the run directory", err), err


def finished_run(tmp_path: Path, monkeypatch, capsys) -> Path:
    use_fake(monkeypatch)
    code, _, err = run([str(write_experiment(tmp_path)), "--json"], capsys)
    assert code == 0, err
    return kept_listing(err)[0]


def set_running(run_dir: Path, coordinator: dict[str, object]) -> None:
    journal = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps(
        {**journal, "status": "running", "coordinator": coordinator}))


def test_a_killed_coordinator_is_recognised_by_report_and_resume(tmp_path, monkeypatch, capsys):
    """SIGKILL leaves run.json at `running`: a coordinator whose process is gone was
    interrupted (report says so), one that still runs keeps its directory (resume refuses)."""
    import subprocess

    from coordinator.config.coordinator_process import process_start_ticks, this_coordinator

    run_dir = finished_run(tmp_path, monkeypatch, capsys)
    assert json.loads((run_dir / "run.json").read_text())["coordinator"]["pid"] > 0
    child = subprocess.Popen(["sleep", "60"])
    here = this_coordinator().model_dump()
    set_running(run_dir, {**here, "pid": child.pid, "start_ticks": process_start_ticks(child.pid)})
    code = main(["report", str(run_dir), "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    assert json.loads(out)["status"] == "running"  # it lives: nothing to say
    assert "interrupted" not in err
    code, _, err = run([str(tmp_path / "fake.yaml"), "--resume", str(run_dir)], capsys)
    assert code == 2
    assert f"its coordinator (pid {child.pid}) is still running" in err
    child.kill()
    child.wait()  # gone (as after SIGKILL): no such process any more
    code = main(["report", str(run_dir), "--json"])
    out, err = capsys.readouterr()
    assert code == 0
    reported = json.loads(out)
    assert reported["status"] == "interrupted"
    assert f"pid {child.pid}" in reported["reason"]
    assert "the run was interrupted" in err
    assert "<b>interrupted</b>" in (run_dir / "report.html").read_text()
    code, _, err = run([str(tmp_path / "fake.yaml"), "--resume", str(run_dir)], capsys)
    assert code == 0, err
    assert "the previous run was interrupted" in err
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"


@pytest.mark.parametrize(("log_format", "says"), [
    ("", "has no URL"), ("$msec $request_time", "has no URL"), ("$request $status", "")])
def test_a_web_log_format_the_reader_cannot_use_is_at_the_experiments_line(
        tmp_path, capsys, log_format, says):
    path = write_experiment(tmp_path)
    path.write_text(path.read_text().replace(f"log_format: {LOG_FORMAT}",
                                             f"log_format: '{log_format}'"))
    assert f"log_format: '{log_format}'" in path.read_text()
    code, _, err = run([str(path)], capsys)
    assert code == 2
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1)
                if "log_format:" in text)
    assert f"{path}:{line}: field 'web_log.log_format'" in err
    assert says in err
    assert "--log-format" not in err
    assert not (tmp_path / "runs").exists()  # before anything is written


def test_a_paths_json_that_cannot_be_read_leaves_the_rest_of_the_report(tmp_path, monkeypatch,
                                                                         capsys):
    run_dir = finished_run(tmp_path, monkeypatch, capsys)
    (run_dir / "paths.json").write_text('{"linker": "context"}')  # an older or broken file
    assert main(["report", str(run_dir), "--json"]) == 0
    page = (run_dir / "report.html").read_text()
    assert "paths.json cannot be read" in page
    assert "<h2>Gradients</h2>" in page

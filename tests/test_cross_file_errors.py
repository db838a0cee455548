"""A mistake found by comparing two inputs is reported where it is, naming the other input
(issue 13's fuzz campaign: `exit2_unnamed` named only the file it was found in); and
`route --nginx --json` prints strict JSON carrying the map."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from coordinator.cli import latency as latency_cli
from coordinator.cli.main import main
from coordinator.config.experiment_files import field_problem
from linkgrad.errors import InputError, RuntimeFailure
from tests.fakes.testbed_status import up_status
from tests.test_prediction import _run_dir

SITES = ("sites: {web: here, app1: here, db: here}\n"
         "latency_ms: {here<->here: 0.1, here<->east: 20.1, east<->east: 0.1,"
         " here<->west: 30.0}\n")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = _run_dir(tmp_path)
    (d / "sites.yaml").write_text(SITES)
    return d


def _route(d: Path, *extra: str) -> list[str]:
    return ["route", "--gradients", str(d / "gradients.json"), "--latencies",
            str(d / "sites.yaml"), "--component", "db", *extra]


# --------------------------------------------------------------------------- route --nginx


def test_route_nginx_with_json_is_the_json_with_the_map_as_a_string(run_dir, capsys):
    experiment = json.loads((run_dir / "experiment.json").read_text())
    experiment["transactions"] = {"ViewItem": "^/view", "async": "^/async"}
    (run_dir / "experiment.json").write_text(json.dumps(experiment))
    code, plain, _ = _run(capsys, *_route(run_dir, "--copies", "here", "east", "--json"))
    assert code == 0
    code, out, _ = _run(capsys, *_route(run_dir, "--copies", "here", "east", "--json",
                                        "--nginx", "db_here", "db_east"))
    assert code == 0
    data = json.loads(out)  # one strict JSON value, no nginx text around it
    assert data.pop("nginx_map").startswith("# linkgrad route")
    assert data == json.loads(plain)
    code, text, _ = _run(capsys, *_route(run_dir, "--copies", "here", "east",
                                         "--nginx", "db_here", "db_east"))
    assert code == 0
    assert text == json.loads(out)["nginx_map"]  # without --json: the map alone, as before
    assert '"~^/view" db_here;' in text


# --------------------------------------------------------------- sites another file names


def _place(run_dir: Path, capsys: pytest.CaptureFixture[str], candidates_text: str
           ) -> tuple[Path, int, str]:
    """`place` of the run's gradients over its sites.yaml and these candidates: (the
    candidates file, exit code, stderr)."""
    candidates = run_dir / "candidates.yaml"
    candidates.write_text(candidates_text)
    code, _, err = _run(capsys, "place", "--app", str(run_dir / "gradients.json"),
                        "--latencies", str(run_dir / "sites.yaml"),
                        "--candidates", str(candidates))
    return candidates, code, err


def test_place_names_the_candidates_line_of_a_site_the_latencies_file_lacks(run_dir, capsys):
    candidates, code, err = _place(
        run_dir, capsys, "candidates:\n  db:\n    - east\n    - a/b\n  app1: [\"\U0001f600\"]\n")
    assert code == 2
    sites = run_dir / "sites.yaml"
    assert (f"{candidates}:4: field 'candidates.db.1' site 'a/b' is not in {sites} (sites "
            "there: east, here, west)") in err
    assert f"{candidates}:5: field 'candidates.app1.0' site '\U0001f600' is not in" in err
    assert "no latency for" not in err


def test_place_names_the_candidates_line_of_an_unknown_host_or_a_bad_site(run_dir, capsys):
    candidates = run_dir / "candidates.yaml"
    argv = ["place", "--app", str(run_dir / "gradients.json"), "--latencies",
            str(run_dir / "sites.yaml"), "--candidates", str(candidates)]
    candidates.write_text("candidates:\n  db: [east]\n  dbx: [east]\n")
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert (f"{candidates}:3: field 'candidates.dbx' 'dbx' is not a host of any application "
            "(app1, db, web)") in err
    candidates.write_text("candidates: {db: [' east']}\n")  # no site a latency pair can give
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert f"{candidates}:1: field 'candidates.db.0' ' east' is no site name" in err


def test_place_missing_pair_names_the_candidates_file(run_dir, capsys):
    (run_dir / "sites.yaml").write_text(SITES.replace(" here<->west: 30.0,", "")
                                        .replace("here<->west: 30.0", "west<->west: 0.1"))
    candidates, code, err = _place(run_dir, capsys, "candidates: {db: [west]}\n")
    assert code == 2
    assert (f"{run_dir / 'sites.yaml'}: field 'latency_ms' no latency for here->west (where "
            f"app1->db may go, by {candidates})") in err


def test_place_missing_pair_of_where_hosts_are_now_names_only_the_latencies_file(run_dir,
                                                                                 capsys):
    """The candidates file lets no host go to the sites it is at now: a pair missing there is
    the latencies file's alone (it said 'where app1->db may go, by candidates.yaml')."""
    (run_dir / "sites.yaml").write_text(SITES.replace("here<->here: 0.1, ", ""))
    candidates, code, err = _place(run_dir, capsys, "candidates: {db: [east]}\n")
    assert code == 2
    assert (f"{run_dir / 'sites.yaml'}: field 'latency_ms' no latency for here->here (where "
            "app1->db are now)") in err
    assert str(candidates) not in err


def test_place_knows_the_latencies_sites_once_per_command(run_dir, capsys, monkeypatch):
    """unknown_site rebuilt the latency table for every site it checked (ms each with
    thousands of pairs)."""
    from coordinator.config import latencies

    calls = []
    one_way = latencies.one_way
    monkeypatch.setattr(latencies, "one_way", lambda lat: calls.append(1) or one_way(lat))
    _, code, err = _place(run_dir, capsys,
                          "candidates: {db: [east, west], app1: [east, west, here]}\n")
    assert code == 2, err  # web->app1 is not measured: after the sites were checked
    assert len(calls) == 1


def test_place_with_a_bare_gradients_file_names_the_run_directory(run_dir, capsys,
                                                                  monkeypatch):
    """`--app gradients.json` is in '.', whose name is '': the message read '.: field
    '--app' : these links ...'."""
    monkeypatch.chdir(run_dir)
    (run_dir / "candidates.yaml").write_text("candidates: {app1: [east]}\n")
    code, _, err = _run(capsys, "place", "--app", "gradients.json", "--latencies",
                        "sites.yaml", "--candidates", "candidates.yaml")
    assert code == 2
    assert (f"{run_dir}: field '--app' {run_dir.name}: these links carry traffic and may "
            "change latency") in err


def test_route_copies_and_base_placement_sites_are_named_where_given(run_dir, capsys):
    sites = run_dir / "sites.yaml"
    code, _, err = _run(capsys, *_route(run_dir, "--copies", "here", "north"))
    assert code == 2
    assert (f"field '--copies': site 'north' is not in {sites} (sites there: east, here, west)"
            in err)
    base = run_dir / "base.yaml"
    base.write_text("move:\n  app1: nowhere\n")
    code, _, err = _run(capsys, *_route(run_dir, "--copies", "here", "east",
                                        "--placement", str(base)))
    assert code == 2
    assert f"{base}:2: field 'move.app1' site 'nowhere' is not in {sites}" in err
    code, _, err = _run(capsys, "route", "--gradients", str(run_dir / "gradients.json"),
                        "--latencies", str(sites), "--component", "cache",
                        "--copies", "here", "east")
    assert code == 2
    assert (f"field '--component': 'cache' is not a host of the run (the hosts of "
            f"{run_dir / 'experiment.json'}: web, app1, db)") in err


def test_predict_names_the_placement_line_of_a_site_the_latencies_file_lacks(run_dir, capsys):
    placement = run_dir / "new.yaml"
    placement.write_text("# db to a site\nmove:\n  db: eats\n")
    code, _, err = _run(capsys, "predict", "--gradients", str(run_dir / "gradients.json"),
                        "--latencies", str(run_dir / "sites.yaml"), "--placement",
                        str(placement))
    assert code == 2
    assert (f"{placement}:3: field 'move.db' site 'eats' is not in {run_dir / 'sites.yaml'} "
            "(sites there: east, here, west)") in err


# ------------------------------------------------------------------ hosts of one run


def _set_hosts(run_dir: Path, hosts: list[str]) -> None:
    (run_dir / "experiment.json").write_text(json.dumps({"hosts": [{"name": h} for h in hosts]}))


def test_a_run_whose_experiment_has_no_hosts_is_one_problem_at_its_hosts(run_dir, capsys):
    _set_hosts(run_dir, [])
    code, _, err = _run(capsys, *_route(run_dir, "--copies", "here", "east"))
    assert code == 2
    [line] = err.strip().splitlines()
    assert line == (f"linkgrad: error: {run_dir / 'experiment.json'}: field 'hosts' is empty, "
                    "but gradients.json and graph.json name hosts: app1 (first at gradients.json"
                    " field 'links.0.link.src_host'), db (first at gradients.json field "
                    "'links.0.link.dst_host'), web (first at graph.json field '2.src_host') "
                    "(files of two runs, or one edited?)")
    _set_hosts(run_dir, ["a", "b"])  # another run's experiment: the same, with its hosts
    code, _, err = _run(capsys, *_route(run_dir, "--copies", "here", "east"))
    assert code == 2
    assert "experiment.json: field 'hosts' (a, b) has none of the hosts gradients.json and " \
        "graph.json name: app1" in err


def test_a_stray_host_is_one_problem_at_the_first_field_naming_it(run_dir, capsys):
    _set_hosts(run_dir, ["web", "app1"])  # db missing: named by 6 fields of two files
    code, _, err = _run(capsys, *_route(run_dir, "--copies", "here", "east"))
    assert code == 2
    [line] = err.strip().splitlines()
    assert line == (f"linkgrad: error: {run_dir / 'gradients.json'}: field "
                    f"'links.0.link.dst_host' host 'db' is not one of the hosts of "
                    f"{run_dir / 'experiment.json'}: app1, web (the first of 4 fields naming "
                    "it)")


# ----------------------------------------------------- files an experiment names, opened late


def _experiment(tmp_path: Path, ssh: str, hosts: str = "{name: web, address: 192.0.2.1}") -> Path:
    path = tmp_path / "experiment.yaml"
    path.write_text(f"name: x\nhosts:\n  - {hosts}\n{ssh}web_log: {{host: web, path: /l}}\n"
                    "transactions: {t: ^/}\n")
    return path


def _latency(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str]:
    code, _, err = _run(capsys, "latency", str(path), "--count", "2")
    return code, err


def test_a_missing_known_hosts_names_the_experiment_line_and_field(tmp_path, capsys):
    path = _experiment(tmp_path, "ssh:\n  known_hosts: known_hosts\n")
    code, err = _latency(capsys, path)
    assert code == 2
    assert (f"{path}:5: field 'ssh.known_hosts' cannot read {tmp_path / 'known_hosts'} "
            "(known_hosts): No such file or directory") in err
    (tmp_path / "known_hosts").mkdir()
    code, err = _latency(capsys, path)
    assert code == 2
    assert f"{path}:5: field 'ssh.known_hosts' cannot read" in err
    assert "it is a directory" in err


def test_a_missing_ssh_config_and_key_name_the_experiment_lines(tmp_path, capsys):
    (tmp_path / "kh").write_text("")
    path = _experiment(tmp_path, "ssh: {config: cfg/ssh_config, known_hosts: kh}\n",
                       "{name: web, address: 192.0.2.1, key: keys/id}")
    code, err = _latency(capsys, path)
    assert code == 2
    assert (f"{path}:4: field 'ssh.config' cannot read {tmp_path / 'cfg' / 'ssh_config'} "
            "(the ssh_config): No such file or directory") in err
    assert (f"{path}:3: field 'hosts.0.key' cannot read {tmp_path / 'keys' / 'id'} "
            "(the key of host web): No such file or directory") in err


@pytest.mark.parametrize("address", ["a" * 100_000, "web host", "root@web", "a" * 254])
def test_an_address_no_host_can_have_is_exit_2_at_its_field(tmp_path, capsys, address):
    """Before it is ever printed: a 100,000-character address made `run` hang in the
    terminal's highlighter, printing the failure to connect."""
    path = _experiment(tmp_path, "ssh: {known_hosts: kh}\n", f"{{name: web, address: '{address}'}}")
    code, _, err = _run(capsys, "run", str(path))
    assert code == 2
    assert err.startswith(f"linkgrad: error: {path}:3: field 'hosts.0.address' an address is a "
                          "host name of at most 253 characters or an IP address")
    assert len(err) < 400


@pytest.mark.parametrize("value", ["web\n", "run\n"])
def test_a_trailing_newline_is_no_address_nor_run_name(value):
    """A YAML block scalar (`address: |`) ends in a newline, which `$` would let through."""
    from pydantic import TypeAdapter, ValidationError

    from coordinator.config.fields import HostAddress, RunName
    for field in (HostAddress, RunName):
        with pytest.raises(ValidationError):
            TypeAdapter(field).validate_python(value)


def test_a_long_value_in_an_error_prints_as_given(capsys):
    """rich's highlighter is quadratic in a long word: the CLI's consoles do without it."""
    from coordinator.cli.terminal import terminal
    word = "x" * 200_000 + ":22"
    terminal(stderr=True).print(f"failed: {word}", markup=False, soft_wrap=True)
    assert capsys.readouterr().err == f"failed: {word}\n"
    assert terminal().render_str(f"failed: {word} 12 ms", markup=False).spans == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000")
def test_an_unreadable_known_hosts_gives_the_os_reason(tmp_path, capsys):
    path = _experiment(tmp_path, "ssh: {known_hosts: kh}\n")
    (tmp_path / "kh").write_text("")
    (tmp_path / "kh").chmod(0)
    code, err = _latency(capsys, path)
    assert code == 2
    assert "field 'ssh.known_hosts' cannot read" in err
    assert "Permission denied" in err


def test_files_an_ssh_config_gives_are_named_at_its_line(tmp_path, capsys, monkeypatch):
    config = tmp_path / "ssh_config"
    config.write_text("Host web\n  HostName 192.0.2.1\n  IdentityFile ~/no/such/key\n"
                      f"  UserKnownHostsFile {tmp_path / 'gone'}\n")
    path = _experiment(tmp_path, "ssh: {config: ssh_config}\n", "{name: web}")
    code, err = _latency(capsys, path)
    assert code == 2
    assert (f"{config}:4: field 'UserKnownHostsFile' UserKnownHostsFile for Host web: "
            f"{tmp_path / 'gone'} cannot be read: No such file or directory (give another "
            "here, or ssh.known_hosts in the experiment)") in err
    assert (f"{config}:3: field 'IdentityFile' no IdentityFile for Host web can be read: "
            f"{Path('~/no/such/key').expanduser()} (No such file or directory)") in err
    config.write_text("Host web\n  HostName 192.0.2.1\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.ssh/known_hosts
    code, err = _latency(capsys, path)
    assert code == 2
    assert (f"{config}: field 'UserKnownHostsFile' no UserKnownHostsFile for Host web, and "
            f"the default {tmp_path / 'home' / '.ssh' / 'known_hosts'} cannot be read") in err


@pytest.fixture
def refused(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """paramiko's connect refused, after recording (hostname, key_filename): a command that
    gets this far has accepted its local files (exit 1, not 2)."""
    import paramiko

    calls: list[tuple[str, object]] = []

    def connect(self, hostname, port=22, username=None, key_filename=None, **_):
        calls.append((hostname, key_filename))
        raise paramiko.SSHException("refused")

    monkeypatch.setattr(paramiko.SSHClient, "connect", connect)
    return calls


def _identity_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *files: str) -> Path:
    """An experiment whose ssh_config gives web the IdentityFiles `files` and, as a `Host *`
    block does, the default ~/.ssh/id_rsa, which this HOME lacks."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "kh").write_text("")
    given = "".join(f"  IdentityFile = \"{tmp_path / f}\"\n" for f in files)
    (tmp_path / "ssh_config").write_text(f"Host web\n  HostName 192.0.2.1\n{given}"
                                         "Host *\n  IdentityFile ~/.ssh/id_rsa\n")
    return _experiment(tmp_path, "ssh: {config: ssh_config, known_hosts: kh}\n", "{name: web}")


def test_an_identity_file_missing_beside_one_there_is_skipped(tmp_path, capsys, monkeypatch,
                                                              refused):
    """OpenSSH skips an IdentityFile that is not there, and paramiko stops at the first key
    that authenticates: only keys that can be opened are handed to it (it would raise
    FileNotFoundError on a missing one before trying the next)."""
    (tmp_path / "id").write_text("")
    path = _identity_files(tmp_path, monkeypatch, "gone", "id")
    code, err = _latency(capsys, path)
    assert code == 1  # reached the host: refused there, not at the ssh_config
    assert "latency: 1 of 1 host(s) failed: web: (192.0.2.1): refused" in err
    assert refused == [("192.0.2.1", [str(tmp_path / "id")])]


def test_no_identity_file_there_is_exit_2_naming_each(tmp_path, capsys, monkeypatch, refused):
    path = _identity_files(tmp_path, monkeypatch, "gone")
    code, err = _latency(capsys, path)
    assert code == 2
    config = tmp_path / "ssh_config"
    assert (f"{config}:3: field 'IdentityFile' no IdentityFile for Host web can be read: "
            f"{tmp_path / 'gone'} (No such file or directory), "
            f"{tmp_path / 'home' / '.ssh' / 'id_rsa'} (No such file or directory)") in err
    assert refused == []


@pytest.mark.parametrize("command", ["run", "latency", "validate"])
def test_the_ssh_config_is_looked_up_once_per_host(tmp_path, capsys, monkeypatch, refused,
                                                   command):
    """Each lookup runs the ssh_config's `Match exec` commands: the files are checked on the
    endpoints a command connects to, not on a lookup of their own."""
    import paramiko

    from coordinator.config.experiment_file import load_experiment
    from coordinator.live.session import Session

    lookups: list[str] = []
    lookup = paramiko.SSHConfig.lookup
    monkeypatch.setattr(paramiko.SSHConfig, "lookup",
                        lambda self, name: lookups.append(name) or lookup(self, name))
    (tmp_path / "kh").write_text("")
    (tmp_path / "ssh_config").write_text("Host web\n  HostName 192.0.2.1\n"
                                         "Host db\n  HostName 192.0.2.2\n")
    path = _experiment(tmp_path, "ssh: {config: ssh_config, known_hosts: kh}\n",
                       "{name: web}\n  - {name: db}")
    if command == "validate":  # as predict --validate opens it: nothing checked before
        with pytest.raises(RuntimeFailure, match="refused"):
            Session(load_experiment(path)).open()
    else:
        code, _, _ = _run(capsys, command, str(path), *(["--count", "2"] if command ==
                                                        "latency" else []))
        assert code == 1
    assert sorted(lookups) == ["db", "web"]
    assert refused


def test_every_file_readable_reaches_the_hosts(tmp_path, capsys, monkeypatch):
    """The checks refuse nothing that is there: the command goes on to connect."""
    (tmp_path / "kh").write_text("")
    (tmp_path / "id").write_text("")
    path = _experiment(tmp_path, "ssh: {known_hosts: kh}\n",
                       "{name: web, address: 192.0.2.1, key: id}")
    reached = []

    def probe(experiment, src, targets, count):
        reached.append(src.name)
        return {(src.name, d): latency_cli.Estimate(0.1, 0.01) for d in targets}

    monkeypatch.setattr(latency_cli, "_probe", probe)
    code, _ = _latency(capsys, path)
    assert code == 0
    assert reached == ["web"]


def test_a_testbed_s_known_hosts_is_named_at_the_testbed_line(tmp_path, capsys, monkeypatch):
    from coordinator.config import testbed_tag

    report = up_status(tmp_path, {"web": "10.9.0.1"})
    assert report.info is not None
    report = report.model_copy(update={"info": report.info.model_copy(
        update={"known_hosts": tmp_path / "kh"})})
    monkeypatch.setattr(testbed_tag, "status", lambda tag, root: report)
    path = tmp_path / "experiment.yaml"
    path.write_text("name: x\ntestbed: tb\ntransactions: {t: ^/}\n")
    code, err = _latency(capsys, path)
    assert code == 2
    assert (f"{path}:2: field 'testbed' cannot read {tmp_path / 'ssh_config'} (the "
            "ssh_config): No such file or directory (the testbed's ssh.config)") in err


# ------------------------------------- the experiment named where a later check refers to it


def test_a_resumed_run_of_another_experiment_names_both_experiment_files(tmp_path, capsys):
    from coordinator.config.experiment_file import load_experiment

    (tmp_path / "kh").write_text("")
    path = _experiment(tmp_path, "ssh: {known_hosts: kh}\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    before = {**load_experiment(path).model_dump(mode="json"), "name": "other"}
    (run_dir / "experiment.json").write_text(json.dumps(before))
    (run_dir / "run.json").write_text(json.dumps({"status": "failed", "started": 1.7e9,
                                                  "links_done": 0}))
    code, _, err = _run(capsys, "run", str(path), "--resume", str(run_dir))
    assert code == 2
    assert (f"{run_dir / 'experiment.json'}: field 'name' this run directory holds another "
            f"experiment's run (differs in name from {path}): resume it") in err


def test_a_later_check_of_a_limit_is_at_the_experiment_line(tmp_path):
    from coordinator.config.experiment_file import load_experiment
    from coordinator.live.validate import PlacementChanges, _check_applicable
    from linkgrad.prediction import Estimate

    path = _experiment(tmp_path, "ssh: {known_hosts: kh}\n")
    path.write_text(path.read_text() + "parameters:\n  max_delay_ms: 5\n"
                    "  error_rate_limit: 0.1\n")
    experiment = load_experiment(path)
    problem = field_problem(experiment, ("parameters", "error_rate_limit"), "no status")
    assert str(problem) == f"{path}:9: field 'parameters.error_rate_limit' no status"
    with pytest.raises(InputError, match=rf"adds more than the experiment's max_delay_ms 5 "
                                         rf"\({re.escape(str(path))}\) to a->b"):
        _check_applicable([PlacementChanges("p.yaml", {("a", "b"): Estimate(6.0)})],
                          experiment, 60.0)


# ------------------------- `linkgrad run` checks the files it will read before it writes


def _tree(d: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `d` with its bytes and mtime: what "left exactly as it was" means."""
    return {str(p.relative_to(d)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(d.rglob("*")) if p.is_file()}


def test_run_with_a_missing_known_hosts_makes_no_run_directory(tmp_path, capsys):
    path = _experiment(tmp_path, "ssh:\n  known_hosts: known_hosts\n")
    path.write_text(path.read_text() + "output: runs\n")
    (tmp_path / "runs" / "earlier").mkdir(parents=True)  # another run's: stays alone
    code, _, err = _run(capsys, "run", str(path))
    assert code == 2
    assert (f"{path}:5: field 'ssh.known_hosts' cannot read {tmp_path / 'known_hosts'} "
            "(known_hosts): No such file or directory") in err
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["earlier"]
    assert "kept in" not in err  # no run was started


def test_resume_with_a_missing_known_hosts_leaves_the_run_directory_as_it_was(tmp_path, capsys):
    from coordinator.config.experiment_file import load_experiment

    path = _experiment(tmp_path, "ssh:\n  known_hosts: known_hosts\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "experiment.json").write_text(
        json.dumps(load_experiment(path).model_dump(mode="json")))
    (run_dir / "run.json").write_text(json.dumps({"status": "interrupted", "started": 1.7e9,
                                                  "links_done": 0}))
    before = _tree(run_dir)
    code, _, err = _run(capsys, "run", str(path), "--resume", str(run_dir))
    assert code == 2
    assert f"{path}:5: field 'ssh.known_hosts' cannot read" in err
    assert _tree(run_dir) == before

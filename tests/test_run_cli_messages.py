"""What `linkgrad run` says: an experiment file that names a host it does not have, or a
selector that is no selector, is exit 2 at its file, line and field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coordinator.cli.main import main
from tests.fakes.remote import ADDRESSES


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["run", *argv])
    out, err = capsys.readouterr()
    return code, out, err



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

    info = {"up": True, "hosts": [{"name": n, "address": a} for n, a in ADDRESSES.items()],
            "ssh_config": str(tmp_path / "ssh_config"),
            "known_hosts": str(tmp_path / "known_hosts"),
            "web_log": {"host": "web", "path": "/l", "format": "nginx", "log_format": None},
            "frontend_url": "http://10.9.0.1/"}
    monkeypatch.setattr(testbed_tag, "status", lambda tag, root: info)
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
    info["web_log"] = {**info["web_log"], "host": "proxy"}  # a testbed's own web log host
    code, _, err = run([str(write(tmp_path, good))], capsys)
    assert code == 2
    assert "x.yaml:2: field 'web_log.host' 'proxy' (the testbed's) is not one of the hosts" in err

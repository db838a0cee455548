"""Issue 13's security items, each shown as the attack that used to work and now fails: a
testbed directory planted by another user, files reached through symlinks, kept SSH keys,
passwords on command lines, config text pasted into nginx, an option where a path belongs.

The pure checks run anywhere; the planting is done as the user `nobody` (setpriv), so those
tests need root, and the last ones need a running testbed (a non-root user against its
PostgreSQL and memcached)."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.live.logfollow import follow_argv
from linkgrad.errors import RuntimeFailure
from linkgrad.routing import advise, nginx_fixed_ratio, nginx_map, upstream_problem
from testbed import mariadb, mediawiki, postgres, sshd
from testbed.description import DescribedTestbed
from testbed.lifecycle import _app_argv, down, status, up
from testbed.netns import only_from, plan_testbed
from testbed.private_dir import (
    check_testbed_dir,
    ensure_dir,
    make_testbed_dir,
    read_trusted,
    set_owner_mode,
    trusted_parent,
    unsafe_reason,
    write_file,
)
from testbed.topology import DEFAULT, MEDIAWIKI
from tests.marks import needs_root, needs_tool
from tests.netns_tools.testbeds import LINKGRAD, private_testbed, unique_tag

PLAN = plan_testbed(DEFAULT, "sec", ipaddress.IPv4Network("10.201.9.0/24"))
NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]


def _stat(mode: int, uid: int = 0) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


# --- which paths are trusted (pure) ---------------------------------------------------------

@pytest.mark.parametrize(("mode", "uid", "problem"), [
    (stat.S_IFDIR | 0o711, 0, None),
    (stat.S_IFDIR | 0o1777, 0, None),  # /var/tmp: others add entries, cannot replace root's
    (stat.S_IFREG | 0o600, 0, None),
    (stat.S_IFDIR | 0o700, 65534, "owned by uid 65534"),
    (stat.S_IFDIR | 0o777, 0, "writable by its group or others"),
    (stat.S_IFDIR | 0o775, 0, "writable by its group or others"),
    (stat.S_IFREG | 0o1666, 0, "writable by its group or others"),  # sticky means nothing here
    (stat.S_IFLNK | 0o777, 0, "symbolic link"),
])
def test_a_path_is_trusted_only_if_root_alone_can_replace_it(mode, uid, problem):
    reason = unsafe_reason(_stat(mode, uid))
    assert (reason is None) if problem is None else (problem in reason)


# --- generated config and argv (pure) -------------------------------------------------------

def test_the_followed_log_path_is_never_an_option():
    argv = follow_argv("python3", "-n 99999 /etc/shadow")
    assert argv[-2:] == ["--", "-n 99999 /etc/shadow"]
    assert argv.index("--", argv.index("tail")) == len(argv) - 2


NGINX_SYNTAX = set(" \t\r\n;{}\"'$#\\")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_an_accepted_upstream_name_holds_no_nginx_syntax(name):
    if upstream_problem(name) is None:
        assert name
        assert not NGINX_SYNTAX & set(name)


@pytest.mark.parametrize("name", ["app1; } include /etc/shadow; map $a $b {", "app 1", "$host",
                                  "app1\n", "", "a:0", "a:70000", "-app"])
def test_an_upstream_that_is_not_a_name_is_refused(name):
    assert upstream_problem(name) is not None
    advice = advise({"t": 1.0}, ({"t": 1.0}, {"t": 2.0}))
    with pytest.raises(ValueError, match=r"not an upstream name|port"):
        nginx_map(advice, {"t": "^/t"}, (name, "app2"))
    with pytest.raises(ValueError, match=r"not an upstream name|port"):
        nginx_fixed_ratio(0.5, ("app1", name))


@pytest.mark.parametrize("name", ["app1", "app_first", "backend-2.example.org:8080",
                                  "10.201.3.4:8000"])
def test_upstream_names_and_host_names_are_accepted(name):
    assert upstream_problem(name) is None


def test_a_transaction_name_cannot_end_its_comment_and_add_config():
    advice = advise({"t\ninclude /etc/shadow;": 1.0},
                    ({"t\ninclude /etc/shadow;": 1.0}, {"t\ninclude /etc/shadow;": 2.0}))
    text = nginx_map(advice, {"t\ninclude /etc/shadow;": "^/t"}, ("app1", "app2"))
    assert not [line for line in text.splitlines() if line.startswith("include")]
    assert len(text.splitlines()) == 5  # comment, map {, one route, default, }


def test_route_refuses_a_bad_upstream_with_exit_2_before_reading_anything(tmp_path):
    done = subprocess.run([LINKGRAD, "route", "--gradients", str(tmp_path / "none.json"),
                           "--latencies", str(tmp_path / "none.yaml"), "--component", "db",
                           "--copies", "a", "b", "--nginx", "app1; }", "app2"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "--nginx" in done.stderr
    assert "'app1; }' is not an upstream name" in done.stderr
    assert "Traceback" not in done.stderr


def test_postgres_trusts_no_one_and_the_app_role_needs_its_password():
    hba = postgres.pg_hba(["10.201.9.3", "10.201.9.4"])
    assert "trust" not in hba
    assert hba.splitlines() == [
        "local all postgres peer",
        "host rubis rubis 10.201.9.3/32 scram-sha-256",
        "host rubis rubis 10.201.9.4/32 scram-sha-256"]


def test_no_password_is_on_an_app_server_command_line(tmp_path):
    argv = _app_argv("app1", "10.201.9.3", PLAN, DEFAULT, tmp_path / "app.dsn")
    assert argv[argv.index("--dsn-file") + 1] == str(tmp_path / "app.dsn")
    assert not [a for a in argv if "postgresql://" in a or "@" in a]
    assert postgres.dsn(PLAN.host("db"), "s3cret").startswith("postgresql://rubis:s3cret@")


def test_postgres_is_seeded_by_stdin_as_the_superuser_on_its_socket(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(postgres, "sh", lambda argv, **kw: calls.append((argv, kw)) or "")
    postgres.seed(tmp_path / "pg", "pw'1")
    assert all(argv[:4] == ["runuser", "-u", "postgres", "--"] for argv, _ in calls)
    assert all("-U" not in argv and str(tmp_path / "pg") in argv for argv, _ in calls)
    assert not [a for argv, _ in calls for a in argv if "pw" in a]
    assert "PASSWORD 'pw''1'" in calls[0][1]["input"]  # quoted as an SQL literal


def test_memcached_is_reachable_from_the_app_hosts_only():
    cache = PLAN.host("cache")
    steps = only_from(cache, 11211, ("10.201.9.3", "10.201.9.4"))
    assert [s.do[-4:] for s in steps] == [("-s", "10.201.9.3", "-j", "ACCEPT"),
                                          ("-s", "10.201.9.4", "-j", "ACCEPT"),
                                          ("--dport", "11211", "-j", "DROP")]
    assert all(s.do[:4] == ("ip", "netns", "exec", cache.namespace) for s in steps)
    assert all(s.do[s.do.index("-t"):s.do.index("-t") + 2] == ("-t", "raw") for s in steps)


def test_only_root_logs_in_to_the_testbed_hosts():
    config = sshd.sshd_config(PLAN.host("db"), Path("/k"), Path("/a"), Path("/p"))
    assert "AllowUsers root\n" in config
    assert "PasswordAuthentication no\n" in config


def test_the_wiki_account_has_a_fresh_password_given_on_stdin(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(mariadb, "sh", lambda argv, **kw: calls.append((argv, kw)) or "")
    db = mariadb.Database()
    assert db.password != mariadb.Database().password
    assert len(db.password) >= 32
    assert db.password not in repr(db)
    mariadb.create_database(tmp_path, db, "10.201.7.2")
    (argv, kw), = calls
    assert not [a for a in argv if db.password in a]
    assert f"'wiki'@'10.201.7.2' IDENTIFIED BY '{db.password}'" in kw["input"]
    assert "%" not in kw["input"]  # one address, not the subnet the root namespace is on


def test_install_php_gets_the_passwords_in_files(monkeypatch, tmp_path):
    plan = plan_testbed(MEDIAWIKI, "mw", ipaddress.IPv4Network("10.201.7.0/24"))
    calls, files = [], {}
    monkeypatch.setattr(mediawiki, "_php", lambda web, script, *args, **kw: calls.append(args))
    monkeypatch.setattr(mediawiki, "write_file",
                        lambda path, text, *a, **kw: files.__setitem__(path, text))
    (tmp_path / "mediawiki" / "install").mkdir(parents=True)
    settings_ = mediawiki.WikiSettings("http://10.201.7.2", "10.201.7.3", tmp_path, "key")
    mediawiki.install(plan.host("web"), plan.host("db"), tmp_path, settings_)
    install_args = calls[0]
    assert not [a for a in install_args if settings_.db.password in a or "pass=" in a]
    passfile = next(a for a in install_args if a.startswith("--dbpassfile="))
    assert files[Path(passfile.split("=", 1)[1])] == settings_.db.password


# --- the testbed's directory (root: files are planted as nobody) ----------------------------

@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A root-owned sticky directory that every user may write in, as /var/tmp is."""
    root = Path(tempfile.mkdtemp(prefix="lgsec-", dir="/var/tmp"))
    root.chmod(0o1777)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _as_nobody(*argv: str) -> None:
    subprocess.run([*NOBODY, *argv], check=True, timeout=30, capture_output=True)


def _plant(directory: Path, marker: Path) -> None:
    """What an attacker leaves: a state whose undo makes `marker` (were root to run it)."""
    _as_nobody("mkdir", str(directory))
    state = {"plan": asdict(PLAN), "undo": [["touch", str(marker)]], "services": {},
             "info": {}}
    _as_nobody(sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])",
               str(directory / "state.json"), json.dumps(state))


@needs_root
@needs_tool("setpriv")
def test_a_directory_planted_by_another_user_is_refused_and_nothing_in_it_runs(shared_root):
    tag = unique_tag("x")
    directory = shared_root / f"linkgrad-testbed-{tag}"
    marker = shared_root / "root-ran-it"
    _plant(directory, marker)
    for action in (lambda: status(tag, shared_root), lambda: down(tag, root=shared_root),
                   lambda: up(DEFAULT, tag, shared_root)):
        with pytest.raises(RuntimeFailure, match=r"owned by uid 65534.*planted"):
            action()
    done = subprocess.run([LINKGRAD, "testbed", "down", "--tag", tag, "--root",
                           str(shared_root)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1
    assert "owned by uid" in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists()
    assert not any(Path("/run/netns").glob(f"lgtb-{tag}-*"))  # `up` made nothing


@needs_root
@needs_tool("setpriv")
def test_a_symlink_planted_as_the_testbed_directory_is_refused(shared_root, tmp_path):
    tag = unique_tag("x")
    target = tmp_path / "roots-own"  # a directory of root's, with a state in it
    target.mkdir()
    write_file(target / "state.json", json.dumps({"plan": None, "undo": [], "services": {},
                                                   "info": {}}))
    _as_nobody("ln", "-s", str(target), str(shared_root / f"linkgrad-testbed-{tag}"))
    with pytest.raises(RuntimeFailure, match="symbolic link"):
        status(tag, shared_root)


@needs_root
def test_a_testbed_root_another_user_could_replace_is_refused(tmp_path):
    parent = tmp_path / "parent"
    parent.mkdir()
    parent.chmod(0o777)  # writable by all, not sticky: anyone may rename what is in it
    (parent / "root").mkdir()
    with pytest.raises(RuntimeFailure, match=r"parent is writable by its group or others"):
        status("tb", parent / "root")
    parent.chmod(0o755)
    os.chown(parent / "root", 65534, 65534)
    with pytest.raises(RuntimeFailure, match="owned by uid 65534"):
        status("tb", parent / "root")
    with pytest.raises(RuntimeFailure, match="No such file"):
        status("tb", tmp_path / "missing")


@needs_root
def test_a_symlinked_root_is_used_by_its_real_path(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert trusted_parent(tmp_path / "link") == (tmp_path / "real").resolve()


@needs_root
def test_the_testbed_directory_is_made_exclusively_and_root_alone_writes_it(tmp_path):
    directory = tmp_path / "linkgrad-testbed-tb"
    make_testbed_dir(directory)
    st_ = os.lstat(directory)
    assert (st_.st_uid, stat.S_IMODE(st_.st_mode)) == (0, 0o711)
    assert check_testbed_dir(directory)
    with pytest.raises(RuntimeFailure, match="refusing"):
        make_testbed_dir(directory)  # never adopted


@needs_root
def test_chmod_chown_and_writes_never_go_through_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    victim.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(victim)
    with pytest.raises(RuntimeFailure, match="symbolic link"):
        set_owner_mode(link, 0o666, "nobody")
    with pytest.raises(RuntimeFailure, match="symbolic link"):
        ensure_dir(link, 0o777)
    with pytest.raises(RuntimeFailure, match="symbolic link"):
        read_trusted(link)
    write_file(link, "new\n")  # replaces the link itself
    assert (victim.read_text(), stat.S_IMODE(victim.stat().st_mode)) == ("root's\n", 0o600)
    assert victim.stat().st_uid == 0
    assert not link.is_symlink()
    assert link.read_text() == "new\n"


@needs_root
def test_a_state_file_another_user_owns_is_refused(tmp_path):
    write_file(tmp_path / "state.json", "{}")
    os.chown(tmp_path / "state.json", 65534, 65534)
    with pytest.raises(RuntimeFailure, match="owned by uid 65534"):
        read_trusted(tmp_path / "state.json")


@needs_tool("ssh-keygen")
def test_a_key_found_in_place_is_replaced_not_kept(tmp_path):
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True,
                   timeout=30)
    planted = Path(f"{key}.pub").read_text().strip()
    assert sshd.keygen(key, "fresh") != planted
    assert sshd.keygen(key, "fresh").endswith(" fresh")


# --- a running testbed, against a local user who is not root --------------------------------

@pytest.fixture(scope="module")
def rubis() -> Iterator[DescribedTestbed]:
    with private_testbed(unique_tag("y")) as (info, _):
        yield info


def _nobody(argv: list[str], env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NOBODY, *argv], capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(env or {})}, check=False)


@pytest.mark.netns
@needs_root
@needs_tool("nginx")
def test_a_local_user_gets_no_database_session_and_no_cache(rubis):
    db = rubis.with_role("db")[0]
    cache = rubis.with_role("cache")[0]
    directory = rubis.directory
    for user, env in (("postgres", {}), ("rubis", {}), ("rubis", {"PGPASSWORD": "x"})):
        done = _nobody(["psql", "-h", db.address, "-U", user, "-d", "rubis", "-w", "-Atc",
                        "SELECT 1"], {**env, "HOME": "/nonexistent"})
        assert done.returncode != 0, (user, done.stdout)
        assert "no pg_hba.conf entry" in done.stderr, done.stderr
    assert _nobody(["cat", str(directory / "secrets" / "app.dsn")]).returncode != 0
    assert _nobody(["cat", str(directory / "state.json")]).returncode != 0
    assert _nobody(["ls", str(directory)]).returncode != 0  # traverse only
    probe = ("import socket, sys\n"
             "s = socket.create_connection((sys.argv[1], 11211), timeout=2)\n"
             "s.sendall(b'get linkgrad:item\\r\\n'); print(s.recv(100))\n")
    done = _nobody([sys.executable, "-c", probe, cache.address])
    assert done.returncode != 0
    assert "timed out" in done.stderr or "TimeoutError" in done.stderr
    # root's own view is intact: the superuser on its socket, the app's pages through nginx
    rows = subprocess.run([*postgres.psql_argv(directory / "pg"), "-Atc",
                           "SELECT count(*) FROM items"], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    assert rows.strip() == "5000"

"""ProxyJump read from an ssh_config as OpenSSH reads it: hops by alias or
`[user@]host[:port]`, comma-separated, a hop's own ProxyJump first; a loop, a bad hop and
ProxyCommand are errors at the ssh_config's line."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.live.ssh import MAX_JUMPS, resolve
from linkgrad.errors import InputError

CONFIG = """Host bastion
    HostName 203.0.113.1
    User jump
    Port 2222
    IdentityFile /keys/bastion

Host inner
    HostName 10.0.0.1
    ProxyJump bastion

Host db
    HostName 10.0.1.5
    User root
    ProxyJump inner

Host web
    HostName 10.0.1.6
    ProxyJump ops@198.51.100.7:2200,bastion

Host direct
    HostName 10.0.1.7
"""


def _config(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return path


def test_a_hop_that_is_an_entry_comes_after_its_own_jump(tmp_path):
    db = resolve("db", _config(tmp_path))
    assert (db.hostname, db.user) == ("10.0.1.5", "root")
    assert [(h.hostname, h.port, h.user) for h in db.jump] == [
        ("203.0.113.1", 2222, "jump"), ("10.0.0.1", 22, "root")]
    assert db.jump[0].identity_files == ("/keys/bastion",)
    assert all(h.jump == () for h in db.jump)  # flattened, first hop first


def test_hops_given_as_user_host_port(tmp_path):
    web = resolve("web", _config(tmp_path))
    assert [(h.hostname, h.port, h.user) for h in web.jump] == [
        ("198.51.100.7", 2200, "ops"), ("203.0.113.1", 2222, "jump")]


def test_no_jump_without_proxyjump(tmp_path):
    assert resolve("direct", _config(tmp_path)).jump == ()


def test_a_loop_is_an_error_at_its_line(tmp_path):
    text = "Host a\n    ProxyJump b\n\nHost b\n    ProxyJump a\n"
    with pytest.raises(InputError) as e:
        resolve("a", _config(tmp_path, text))
    problem = e.value.problems[0]
    assert "goes round" in problem.message
    assert problem.field == "ProxyJump"
    assert problem.line in (2, 5)
    assert MAX_JUMPS == 8


@pytest.mark.parametrize("hop", ["@", "b:0", "b:x", "b:70000"])
def test_a_hop_that_is_no_host_is_an_error(tmp_path, hop):
    with pytest.raises(InputError, match=r"not \[user@\]host\[:port\]"):
        resolve("a", _config(tmp_path, f"Host a\n    ProxyJump {hop}\n"))


def test_proxycommand_is_refused_at_its_line(tmp_path):
    text = "Host a\n    HostName 10.0.0.1\n    ProxyCommand nc %h %p\n"
    with pytest.raises(InputError) as e:
        resolve("a", _config(tmp_path, text))
    problem = e.value.problems[0]
    assert "ProxyCommand" in problem.message
    assert "ProxyJump" in problem.message
    assert problem.line == 3

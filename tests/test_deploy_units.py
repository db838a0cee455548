"""`linkgrad deploy`'s pure parts: a host's probe output read, its kernel features judged,
what is done on it decided, the wheels' platform tags, and the venv `ssh.python` names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.cli.deploy import target_venv
from coordinator.config.experiment_file import load_experiment
from coordinator.deploy.host_facts import feature_state, parse_facts, probe_script
from coordinator.deploy.plan import manifest, plan_host, venv_of
from coordinator.deploy.wheelhouse import HostKind, platform_tags
from linkgrad.errors import InputError

# what the probe printed on a Debian 12 host (this machine's kernel configuration, abridged)
DEBIAN = """python=3.11.2
libc=glibc 2.36
python_path=/usr/bin/python3
venv_module=yes
python_headers=yes
machine=x86_64
release=6.1.0-18-amd64
cc=/usr/bin/cc
nfq_headers=yes
iptables=/usr/sbin/iptables
bpftrace=/usr/bin/bpftrace
uid=0
config=/boot/config-6.1.0-18-amd64
CONFIG_NETFILTER_NETLINK_QUEUE=m
CONFIG_NETFILTER_XT_TARGET_NFQUEUE=m
CONFIG_INET_DIAG=m
CONFIG_INET_TCP_DIAG=m
CONFIG_NET_SCH_NETEM=m
CONFIG_TRACEPOINTS=y
CONFIG_BPF_EVENTS=y
CONFIG_DEBUG_INFO_BTF=y
CONFIG_CGROUPS=y
module.nfnetlink_queue=on-disk
module.xt_NFQUEUE=on-disk
module.inet_diag=loaded
module.tcp_diag=loaded
module.sch_netem=on-disk
modules_dir=yes
"""
KIND = HostKind((3, 11), "x86_64", (2, 36))


def _facts(text: str = DEBIAN, **changes: str):
    lines = dict(line.split("=", 1) for line in text.splitlines())
    lines.update(changes)
    return parse_facts("\n".join(f"{k}={v}" for k, v in lines.items() if v is not None))


def test_the_probe_output_is_read():
    f = _facts()
    assert f.python == (3, 11, 2)
    assert f.glibc == (2, 36)
    assert f.python_fits
    assert f.root
    assert f.builds_injector == []
    assert f.config["NET_SCH_NETEM"] == "m"
    assert f.modules["inet_diag"] == "loaded"


def test_the_probe_script_runs_under_sh_and_reads_this_machine():
    done = subprocess.run(["sh", "-c", probe_script("/nonexistent/venv")], capture_output=True,
                          text=True, timeout=60, check=True)
    f = parse_facts(done.stdout)
    assert f.python is not None
    assert f.python[:2] >= (3, 11)
    assert f.machine
    assert f.release
    assert f.installed == ""
    assert not f.occupied
    assert feature_state(f, "sock_diag")[0] in ("yes", "unknown")  # the sniffer runs here


def _probed(venv: Path):
    return parse_facts(subprocess.run(["sh", "-c", probe_script(str(venv))],
                                      capture_output=True, text=True, timeout=60,
                                      check=True).stdout)


def test_probe_script_finds_what_deploy_did_not_make_where_its_venv_goes(tmp_path):
    venv = tmp_path / "it's"  # a quote in the path stays inside its quotes
    assert not _probed(venv).occupied  # nothing there
    venv.mkdir()
    assert not _probed(venv).occupied  # an empty directory made for it
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert _probed(venv).occupied
    (venv / "linkgrad-deploy.made").write_text("")
    (venv / "linkgrad-deploy.json").write_text('{"a":\n1}')
    facts = _probed(venv)
    assert not facts.occupied
    assert facts.installed == '{"a":1}'


def test_kernel_features_from_the_configuration_and_modules():
    f = _facts()
    assert feature_state(f, "nfqueue")[0] == "yes"
    assert feature_state(f, "tracing") == ("yes", "built into the kernel "
                                           "(/boot/config-6.1.0-18-amd64)")
    unset = _facts(**{"CONFIG_NET_SCH_NETEM": "n"})
    state, why = feature_state(unset, "netem")
    assert state == "no"
    assert "CONFIG_NET_SCH_NETEM is not set" in why
    gone = parse_facts(DEBIAN.replace("module.sch_netem=on-disk\n", ""))
    assert feature_state(gone, "netem")[0] == "no"
    no_dir = parse_facts(DEBIAN.replace("module.sch_netem=on-disk\n", "")
                         .replace("modules_dir=yes\n", ""))
    assert feature_state(no_dir, "netem")[0] == "unknown"


def test_without_a_configuration_the_running_kernel_says_or_it_is_unknown():
    text = "\n".join(line for line in DEBIAN.splitlines()
                     if not line.startswith(("CONFIG_", "config=", "module.")))
    bare = parse_facts(text + "\nshows=/proc/net/netfilter/nfnetlink_queue\n")
    assert feature_state(bare, "nfqueue")[0] == "yes"
    state, why = feature_state(bare, "netem")
    assert state == "unknown"
    assert "no kernel configuration" in why


def test_a_host_gets_an_install_then_nothing_then_a_replacement():
    wanted = manifest("0.1.0", "abc", KIND, injector=True)
    plan = plan_host("db", _facts(), "/opt/lg", "0.1.0", "abc")
    assert plan.action == "install"
    assert plan.why == "not there"
    assert plan.injector
    assert plan.manifest == wanted
    assert plan_host("db", _facts(installed=wanted), "/opt/lg", "0.1.0", "abc"
                     ).action == "present"
    older = manifest("0.1.0", "old", KIND, injector=True)
    again = plan_host("db", _facts(installed=older), "/opt/lg", "0.1.0", "abc")
    assert again.action == "install"
    assert again.why == "replaces linkgrad 0.1.0 (old)"


@pytest.mark.parametrize(("changes", "reason"), [
    ({"python": None}, "no python3"),
    ({"python": "3.9.2"}, "python3 is 3.9.2 (/usr/bin/python3): linkgrad needs 3.11"),
    ({"venv_module": None}, "has no venv module"),
    ({"libc": ""}, "no glibc"),
    ({"occupied": "yes"}, "/opt/lg is there and deploy did not make it"),
])
def test_a_host_that_cannot_be_deployed_to_says_why(changes, reason):
    lines = dict(line.split("=", 1) for line in DEBIAN.splitlines())
    for k, v in changes.items():
        if v is None:
            lines.pop(k)
        else:
            lines[k] = v
    plan = plan_host("db", parse_facts("\n".join(f"{k}={v}" for k, v in lines.items())),
                     "/opt/lg", "0.1.0", "abc")
    assert plan.action == "cannot"
    assert reason in plan.why


def test_without_a_compiler_or_headers_linkgrad_goes_without_its_injector():
    plan = plan_host("db", parse_facts(DEBIAN.replace("nfq_headers=yes\n", "")
                                       .replace("cc=/usr/bin/cc", "cc=")), "/opt/lg",
                     "0.1.0", "abc")
    assert plan.action == "install"
    assert not plan.injector
    assert json.loads(plan.manifest)["injector"] is False
    (warning,) = [w for w in plan.warnings if w.startswith("no injector")]
    assert "a C compiler (gcc)" in warning
    assert "libnetfilter-queue-dev" in warning


def test_a_user_without_root_or_sudo_is_warned():
    plan = plan_host("db", _facts(uid="1000"), "/opt/lg", "0.1.0", "abc")
    assert any("no password-less sudo" in w for w in plan.warnings)
    assert not any("sudo" in w
                   for w in plan_host("db", _facts(uid="1000", sudo="yes"), "/opt/lg",
                                      "0.1.0", "abc").warnings)


def test_platform_tags_are_every_manylinux_this_glibc_runs():
    tags = platform_tags(HostKind((3, 11), "aarch64", (2, 28)))
    assert tags[0] == "manylinux_2_28_aarch64"
    assert "manylinux_2_17_aarch64" in tags
    assert "manylinux2014_aarch64" in tags
    assert "manylinux1_aarch64" in tags
    assert "manylinux_2_29_aarch64" not in tags
    assert "manylinux2014_x86_64" not in platform_tags(HostKind((3, 12), "x86_64", (2, 12)))


@pytest.mark.parametrize(("python", "venv"), [
    ("/opt/lg/bin/python", "/opt/lg"),
    (".linkgrad/venv/bin/python3", ".linkgrad/venv"),
    ("/srv/v/bin/python3.12", "/srv/v"),
    ("python3", None),
    ("/usr/bin/python3", "/usr"),  # by its shape; the probe finds /usr is none of deploy's
    ("/opt/lg/bin/pip", None),
])
def test_the_venv_ssh_python_names(python, venv):
    assert venv_of(python) == venv


def _experiment(tmp_path: Path, python: str) -> Path:
    path = tmp_path / "e.yaml"
    path.write_text("name: e\ntransactions:\n  all: ^/\nhosts:\n  - name: web\n"
                    f"    address: 10.0.0.1\nssh:\n  python: {python}\n  known_hosts: kh\n"
                    "web_log:\n  host: web\n  path: /var/log/a\n")
    return path


def test_deploy_needs_ssh_python_to_name_a_venv_of_its_own(tmp_path):
    with pytest.raises(InputError) as bare:
        target_venv(load_experiment(_experiment(tmp_path, "python3")))
    problem = bare.value.problems[0]
    assert problem.line == 8
    assert problem.field == "ssh.python"
    assert "no venv's interpreter" in problem.message
    with pytest.raises(InputError, match="this linkgrad's own venv"):
        target_venv(load_experiment(_experiment(tmp_path, f"{sys.prefix}/bin/python")))
    assert target_venv(load_experiment(_experiment(tmp_path, "/opt/lg/bin/python"))
                       ) == "/opt/lg"


def test_a_daemon_that_finds_no_linkgrad_gets_the_next_step():
    from coordinator.live.session import no_linkgrad_hint

    assert "linkgrad deploy" in no_linkgrad_hint("sniffer on a ended (exit status 127): x", "p")
    assert "linkgrad deploy" in no_linkgrad_hint("... No module named sniffer", "p")
    assert no_linkgrad_hint("sniffer on a did not start: no CAP_NET_ADMIN", "p") == ""

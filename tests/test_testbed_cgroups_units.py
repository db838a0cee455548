"""A testbed host's own cgroup, its pure parts and fake hierarchies in temporary directories:
the names, what is detected, what is copied and written, joining, removal's report. The live
cgroups are tests/test_testbed_cgroups_netns.py's."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

import pytest

from linkgrad.errors import RuntimeFailure
from testbed.build import start_argv
from testbed.cgroup_mounts import (
    block_devices,
    host_mounts,
    mount_then_exec,
    mounted_disks,
    whole_disk,
)
from testbed.cgroups import (
    JOIN,
    NO_LIMIT_BPS,
    V1_CONTROLLERS,
    V2_CONTROLLERS,
    Hierarchy,
    cgroup_dirs,
    cpuset_values,
    detect,
    distinct,
    host_cgroup_dirs,
    join_then_exec,
    leftover_cgroups,
    make_testbed_cgroups,
    remove_tree,
    subtree_control,
    tag_dirs,
    throttle_rule,
    unavailable,
)
from testbed.description import DescribedHost
from testbed.netns import HostPlan, plan_testbed
from testbed.state import StateFile
from testbed.topology import DEFAULT

SYS = Path("/sys/fs/cgroup")
# this machine's /proc/self/mountinfo, cut, and a partition mounted as on most machines
MOUNTINFO = """\
23 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
52 23 254:0 /run/netns /run/netns rw,relatime shared:1 - ext4 /dev/vda rw
60 23 8:1 / /boot rw,relatime shared:5 - ext4 /dev/sda1 rw
61 23 253:2 / /srv rw,relatime shared:6 - xfs /dev/mapper/vg-srv rw
"""


def _v1_tree(root: Path, controllers: tuple[str, ...] = V1_CONTROLLERS) -> Hierarchy:
    for c in controllers:
        (root / c).mkdir(parents=True)
        (root / c / "tasks").write_text("")
    if "cpuset" in controllers:  # what the kernel puts in the root's cpuset
        (root / "cpuset" / "cpuset.cpus").write_text("0-1\n")
        (root / "cpuset" / "cpuset.mems").write_text("0\n")
    return Hierarchy(1, root, controllers)


def _v2_tree(root: Path, handed_down: str) -> None:
    root.mkdir(exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "cgroup.subtree_control").write_text(handed_down + "\n")


def test_v1_names_one_directory_per_controller_under_the_tag():
    h = Hierarchy(1, SYS, V1_CONTROLLERS)
    assert cgroup_dirs(h, "t1", "db") == {
        "cpu": SYS / "cpu/linkgrad-t1/db", "cpuacct": SYS / "cpuacct/linkgrad-t1/db",
        "cpuset": SYS / "cpuset/linkgrad-t1/db", "memory": SYS / "memory/linkgrad-t1/db",
        "blkio": SYS / "blkio/linkgrad-t1/db", "pids": SYS / "pids/linkgrad-t1/db"}
    assert tag_dirs(h, "t1")[0] == SYS / "cpu/linkgrad-t1"
    assert cgroup_dirs(Hierarchy(1, SYS, ("memory",)), "t1", "db") == {
        "memory": SYS / "memory/linkgrad-t1/db"}


def test_v2_names_one_directory_for_every_controller():
    h = Hierarchy(2, SYS, ("cpu", "memory", "io"))
    leaf = SYS / "linkgrad-t1" / "web"
    assert cgroup_dirs(h, "t1", "web") == {"cpu": leaf, "memory": leaf, "io": leaf}
    assert tag_dirs(h, "t1") == [SYS / "linkgrad-t1"]
    # no controller handed down: still a cgroup (its cpu.stat counts CPU time)
    assert cgroup_dirs(Hierarchy(2, SYS, ()), "t1", "web") == {"cgroup2": leaf}


def test_detect_prefers_mounted_v1_controllers_then_a_v2_root_then_none(tmp_path):
    v1 = tmp_path / "v1"
    _v1_tree(v1, ("cpu", "memory"))
    _v2_tree(v1 / "unified", "")  # a hybrid machine's unified hierarchy, as here
    assert detect(v1) == Hierarchy(1, v1, ("cpu", "memory"))
    v2 = tmp_path / "v2"
    _v2_tree(v2, "memory pids cpu io")
    # what the root hands down, in V2_CONTROLLERS' order; hugetlb is not one of ours
    assert detect(v2) == Hierarchy(2, v2, ("cpu", "memory", "io", "pids"))
    assert host_cgroup_dirs("t1", "db", root=v2) == dict.fromkeys(
        ("cpu", "memory", "io", "pids"), v2 / "linkgrad-t1" / "db")
    assert detect(tmp_path / "nothing") is None
    assert host_cgroup_dirs("t1", "db", root=tmp_path / "nothing") == {}


def test_controllers_mounted_together_are_one_directory(tmp_path):
    (tmp_path / "cpu,cpuacct").mkdir()
    (tmp_path / "cpu").symlink_to("cpu,cpuacct")
    (tmp_path / "cpuacct").symlink_to("cpu,cpuacct")
    dirs = [tmp_path / "cpu" / "x", tmp_path / "cpuacct" / "x", tmp_path / "memory" / "x"]
    assert distinct(dirs) == [tmp_path / "cpu" / "x", tmp_path / "memory" / "x"]


def test_no_hierarchy_or_one_not_writable_is_said_with_what_it_means(tmp_path):
    assert "no cgroup v1 controller" in (unavailable(None) or "")
    note = unavailable(Hierarchy(1, tmp_path / "absent", ("cpu",)))
    assert note is not None
    assert f"cannot write {tmp_path / 'absent' / 'cpu'}" in note
    assert note.endswith("each testbed host is measured as the machine")
    assert unavailable(_v1_tree(tmp_path / "v1")) is None


def test_the_disks_to_rule_are_the_mounted_ones_whole_and_once(tmp_path):
    assert block_devices(MOUNTINFO) == ["254:0", "8:1", "253:2"]
    sys_block = tmp_path / "dev" / "block"
    sys_block.mkdir(parents=True)
    for disk, majmin in (("vda", "254:0"), ("sda", "8:0"), ("dm-2", "253:2")):
        (tmp_path / "devices" / disk).mkdir(parents=True)
        (tmp_path / "devices" / disk / "dev").write_text(majmin + "\n")
        (sys_block / majmin).symlink_to(tmp_path / "devices" / disk)
    partition = tmp_path / "devices" / "sda" / "sda1"
    partition.mkdir()
    (partition / "partition").write_text("1\n")
    (sys_block / "8:1").symlink_to(partition)
    assert whole_disk("8:1", sys_block) == "8:0"  # a partition's rule is its disk's
    assert whole_disk("253:2", sys_block) == "253:2"  # device-mapper: itself, not its disks
    assert whole_disk("7:0", sys_block) is None
    assert mounted_disks(MOUNTINFO + "70 23 7:0 / /snap - squashfs /dev/loop0 ro\n",
                         sys_block) == ["254:0", "8:0", "253:2"]
    assert throttle_rule("254:0") == "254:0 1125899906842624\n"
    assert NO_LIMIT_BPS == 2 ** 50


HYBRID = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
77 41 0:38 / /mnt/elsewhere rw,relatime - cgroup2 cgroup2 rw
"""


def test_a_host_mounts_the_machine_s_hierarchies_it_is_measured_by():
    """`ip netns exec` leaves /sys/fs/cgroup empty: what a host mounts there."""
    assert host_mounts(HYBRID) == [
        ["mount", "-t", "tmpfs", "-o", "mode=755", "cgroup", "/sys/fs/cgroup"],
        ["mkdir", "/sys/fs/cgroup/cpu,cpuacct"],
        ["mount", "-t", "cgroup", "-o", "cpu,cpuacct", "cgroup", "/sys/fs/cgroup/cpu,cpuacct"],
        ["ln", "-s", "cpu,cpuacct", "/sys/fs/cgroup/cpu"],
        ["ln", "-s", "cpu,cpuacct", "/sys/fs/cgroup/cpuacct"],
        ["mkdir", "/sys/fs/cgroup/memory"],
        ["mount", "-t", "cgroup", "-o", "memory", "cgroup", "/sys/fs/cgroup/memory"],
        ["mkdir", "/sys/fs/cgroup/unified"],
        ["mount", "-t", "cgroup2", "cgroup2", "/sys/fs/cgroup/unified"]]
    v2 = "30 23 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"
    assert host_mounts(v2) == [["mount", "-t", "cgroup2", "cgroup2", "/sys/fs/cgroup"]]
    assert host_mounts(MOUNTINFO.replace("cgroup", "other")) == []
    assert mount_then_exec([], ["true"]) == ["true"]
    script = mount_then_exec([["mkdir", "/a b"]], ["true"])
    assert script == ["sh", "-c", "set -e; mkdir '/a b'; exec \"$@\"", "sh", "true"]


def test_a_daemon_joins_then_enters_then_mounts_then_says_its_pid(tmp_path):
    dirs = {"memory": SYS / "memory/linkgrad-t1/db"}
    mounts = [["mkdir", "/x"]]
    argv = start_argv("lgtb-t1-db", dirs, mounts, tmp_path / "db.pid", ["postgres", "-D", "d"])
    joined = argv.index("--")
    assert argv[:6] == ["setsid", "--fork", "sh", "-c", JOIN, "sh"]
    assert argv[6:joined] == [str(dirs["memory"] / "cgroup.procs")]
    assert argv[joined + 1:joined + 5] == ["ip", "netns", "exec", "lgtb-t1-db"]
    assert argv[-7:] == ["sh", "-c", 'echo $$ > "$0"; exec "$@"', str(tmp_path / "db.pid"),
                         "postgres", "-D", "d"]
    assert "set -e; mkdir /x" in argv[joined + 7]
    # no cgroups (the root namespace's Mininet keeper, or a machine without): as before
    assert start_argv(None, {}, [], tmp_path / "k.pid", ["keeper"]) == [
        "setsid", "--fork", "sh", "-c", 'echo $$ > "$0"; exec "$@"', str(tmp_path / "k.pid"),
        "keeper"]


def test_v2_enables_what_its_parent_is_handed():
    assert subtree_control("cpuset cpu io memory hugetlb pids", V2_CONTROLLERS) == \
        "+cpu +cpuset +memory +io +pids"
    assert subtree_control("memory pids", ("cpu", "memory")) == "+memory"
    assert subtree_control("", V2_CONTROLLERS) == ""


def test_a_cpuset_copies_its_parent_s_cpus_and_mems_and_refuses_none(tmp_path):
    (tmp_path / "cpuset.cpus").write_text("0-1\n")
    (tmp_path / "cpuset.mems").write_text("0\n")
    assert cpuset_values(tmp_path) == {"cpuset.cpus": "0-1", "cpuset.mems": "0"}
    (tmp_path / "cpuset.mems").write_text("\n")  # a new v1 cpuset's: no task may join it
    with pytest.raises(RuntimeFailure, match=r"has no cpuset.mems to copy"):
        cpuset_values(tmp_path)


def test_v1_make_copies_cpusets_rules_blkio_and_refuses_an_existing_one(tmp_path):
    h = _v1_tree(tmp_path)
    made = make_testbed_cgroups(h, "t1", ["web", "db"], ["254:0"])
    assert made["db"] == cgroup_dirs(h, "t1", "db")
    assert all(d.is_dir() for dirs in made.values() for d in dirs.values())
    db = made["db"]
    assert (db["cpuset"] / "cpuset.cpus").read_text() == "0-1"
    assert (db["cpuset"] / "cpuset.mems").read_text() == "0"
    assert (db["cpuset"].parent / "cpuset.cpus").read_text() == "0-1"
    for f in ("read_bps_device", "write_bps_device"):
        assert (db["blkio"] / f"blkio.throttle.{f}").read_text() == "254:0 1125899906842624\n"
    assert leftover_cgroups("t1", tmp_path) == tag_dirs(h, "t1")
    with pytest.raises(RuntimeFailure, match=r"linkgrad-t1 exists: an earlier testbed's"):
        make_testbed_cgroups(h, "t1", ["web"], [])


def test_v2_make_is_one_directory_per_host_without_rules(tmp_path):
    _v2_tree(tmp_path, "cpu memory io")
    h = detect(tmp_path)
    assert h is not None
    made = make_testbed_cgroups(h, "t2", ["web"], ["254:0"])
    leaf = tmp_path / "linkgrad-t2" / "web"
    assert set(made["web"].values()) == {leaf}
    assert leaf.is_dir()
    assert list(leaf.iterdir()) == []  # io.stat counts without a throttle rule
    assert leftover_cgroups("t2", tmp_path) == [tmp_path / "linkgrad-t2"]


def test_join_writes_its_own_pid_into_each_cgroup_then_runs_the_command(tmp_path):
    dirs = {"cpu": tmp_path / "cpu", "memory": tmp_path / "memory"}
    for d in dirs.values():
        d.mkdir()
    argv = join_then_exec(dirs, ["sh", "-c", 'echo "$$ $1"', "sh", "--"])
    assert argv[:4] == ["sh", "-c", JOIN, "sh"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=10).stdout
    pid, arg = out.split()
    assert arg == "--"  # the command's own `--` is its own
    assert [(d / "cgroup.procs").read_text().strip() for d in dirs.values()] == [pid, pid]
    failed = subprocess.run(join_then_exec({"cpu": tmp_path / "gone"}, ["touch", "ran"]),
                            capture_output=True, text=True, cwd=tmp_path, timeout=10)
    assert failed.returncode == 125  # could not join: the command never ran
    assert not (tmp_path / "ran").exists()
    assert join_then_exec({}, ["true"]) == ["true"]


def test_removal_goes_deepest_first_and_reports_what_stays(tmp_path):
    top = tmp_path / "linkgrad-t1"
    (top / "web").mkdir(parents=True)
    (top / "db").mkdir()
    assert remove_tree(top) == []
    assert not top.exists()
    (top / "db").mkdir(parents=True)
    (top / "db" / "cgroup.procs").write_text("")  # a directory that will not go
    failures = remove_tree(top, grace_s=0.1)
    assert len(failures) == 2
    assert failures[0].startswith(f"cgroup {top / 'db'}: Directory not empty")
    assert remove_tree(tmp_path / "never-made") == []


def test_the_state_and_the_description_keep_the_cgroups_and_read_older_ones():
    host = HostPlan("db", "lgtb-t1-db", "10.0.0.2", "lgvt10", ("db",))
    dirs = {"memory": SYS / "memory/linkgrad-t1/db"}
    described = DescribedHost.of(host, dirs)
    assert json.loads(described.model_dump_json())["cgroups"] == {
        "memory": "/sys/fs/cgroup/memory/linkgrad-t1/db"}
    assert DescribedHost.of(host).cgroups == {}  # measured as the machine
    older = '{"plan": null, "undo": [], "services": {}, "info": {}}'
    assert StateFile.model_validate_json(older).cgroups == {}
    saved = StateFile(plan=None, undo=[], services={}, info=None, cgroups={"db": dirs})
    assert StateFile.model_validate_json(saved.model_dump_json()).cgroups == {"db": dirs}


class _Clock:
    """time for `remove_tree`: its grace passes at once."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def monotonic(self) -> float:
        return self.now_s

    def sleep(self, s: float) -> None:
        self.now_s += s


def test_down_without_a_state_reports_a_cgroup_it_could_not_remove(tmp_path, monkeypatch):
    """No state (never made, or a first `down` removed it): `down` goes by the tag's names,
    and a cgroup that stays is its failure, as it is with a state."""
    from testbed import build, cgroups, lifecycle

    ran: list[list[str]] = []

    def ip(argv, **kw):  # no namespace, link or bridge of the tag is there
        ran.append(argv)
        return subprocess.CompletedProcess(argv, 1, "", 'Cannot find device "x"')

    monkeypatch.setattr(build.subprocess, "run", ip)
    monkeypatch.setattr(cgroups, "time", _Clock())
    monkeypatch.setattr(lifecycle, "directory_for", lambda tag, root: root / tag)
    fake = tmp_path / "cgroup"
    _v1_tree(fake, ("cpu", "memory"))
    assert lifecycle.down("t1", root=tmp_path, cgroup_root=fake).removed is False
    (fake / "memory" / "linkgrad-t1" / "db").mkdir(parents=True)
    assert lifecycle.down("t1", root=tmp_path, cgroup_root=fake).removed is True
    assert leftover_cgroups("t1", fake) == []
    plan = plan_testbed(DEFAULT, "t1", ipaddress.IPv4Network("10.201.0.0/24"))
    ours = {plan.bridge} | {n for h in plan.hosts for n in (h.namespace, h.veth)}
    assert ran
    assert {argv[-1] for argv in ran} <= ours  # by the tag's generated names only
    (fake / "cpu" / "linkgrad-t1" / "db").mkdir(parents=True)
    (fake / "cpu" / "linkgrad-t1" / "db" / "cgroup.procs").write_text("")  # will not go
    for _ in range(2):  # and again: still there, still said
        with pytest.raises(RuntimeFailure, match=r"could not remove: cgroup "
                           + str(fake / "cpu" / "linkgrad-t1" / "db") + ": Directory not "):
            lifecycle.down("t1", root=tmp_path, cgroup_root=fake)
    assert leftover_cgroups("t1", fake) == [fake / "cpu" / "linkgrad-t1"]

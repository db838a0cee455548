"""A host measured as its own cgroup: v1 live (this machine's controllers), v2 on files shaped as
the kernel's cgroup-v2 documentation shows them (this machine's unified hierarchy has no
controllers)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from linkgrad.hostprobe.cgroup import CgroupCounters, cgroup_rates, hosts_own, own_cgroups
from sniffer.host_probe import read_cgroup

V2_CPU = "usage_usec {u}\nuser_usec {us}\nsystem_usec {sy}\nnr_periods 0\nnr_throttled 0\n"
V2_IO = "8:16 rbytes={r} wbytes={w} rios={ri} wios={wi} dbytes=0 dios=0\n"


def _v2_tree(root: Path, usage: int, written: int, memory: int) -> None:
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    host = root / "lgtb" / "web"
    host.mkdir(parents=True, exist_ok=True)
    (host / "cpu.stat").write_text(V2_CPU.format(u=usage, us=usage * 3 // 4, sy=usage // 4))
    (host / "memory.current").write_text(f"{memory}\n")
    (host / "memory.max").write_text("max\n")
    (host / "io.stat").write_text(V2_IO.format(r=4096, w=written, ri=1, wi=written // 4096))


def test_v2_a_host_s_cgroup_gives_its_cpu_memory_and_io(tmp_path):
    own = tmp_path / "self"
    own.write_text("0::/lgtb/web\n")
    _v2_tree(tmp_path, usage=1_000_000, written=0, memory=50 << 20)
    before = read_cgroup(tmp_path, own, clock=lambda: 100.0)
    _v2_tree(tmp_path, usage=2_500_000, written=8 << 20, memory=60 << 20)
    after = read_cgroup(tmp_path, own, clock=lambda: 102.0)
    assert before is not None
    assert after is not None
    rates = cgroup_rates(before, after)
    assert rates.cpu_cores == pytest.approx(0.75)  # 1.5 s of CPU in 2 s
    assert rates.user_cores == pytest.approx(0.5625)
    assert rates.memory_bytes == 60 << 20
    assert rates.memory_limit_bytes is None  # "max"
    assert rates.io["8:16"].write_bytes_per_s == pytest.approx(4 << 20)
    assert rates.missing == []


def test_the_machine_s_root_is_no_cgroup_of_one_s_own(tmp_path):
    own = tmp_path / "self"
    own.write_text("4:memory:/\n2:cpu,cpuacct:/\n7:blkio:/\n0::/\n")
    _v2_tree(tmp_path, usage=1, written=0, memory=1)
    assert read_cgroup(tmp_path, own) is None
    assert own_cgroups("4:memory:/a\n2:cpu,cpuacct:/b\n0::/c\n") == (
        {"memory": "/a", "cpuacct": "/b"}, "/c")


@pytest.mark.parametrize(("path", "own"), [
    ("/", False),
    ("/user.slice/user-0.slice/session-4.scope", False),  # an SSH session: the sniffer's
    ("/system.slice/ssh.service", False),
    ("/init.scope", False),
    ("/system.slice/docker-0123abcd.scope", True),  # a container systemd made
    ("/docker/0123abcd", True),
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-pod1.slice/cri-containerd-9.scope",
     True),
    ("/machine.slice/machine-vm1.scope", True),
    ("/linkgrad-tb/db", True),  # a testbed host
])
def test_a_host_s_own_cgroup_is_a_container_s_not_a_session_s(path, own):
    assert hosts_own(path) is own
    v1, v2 = own_cgroups(f"4:memory:{path}\n0::{path}\n")
    assert (v1["memory"] != "/", v2 != "/") == (own, own)


def test_a_controller_the_host_has_not_its_own_is_named_missing():
    rates = cgroup_rates(CgroupCounters(0.0, memory_bytes=5), CgroupCounters(1.0, memory_bytes=6))
    assert rates.cpu_cores is None
    assert "cpu: the host has no cgroup of its own for CPU" in rates.missing
    assert "io: the host has no cgroup of its own for block I/O" in rates.missing


def test_v1_blkio_without_a_throttle_rule_is_said_not_zero(tmp_path):
    own = tmp_path / "self"
    own.write_text("7:blkio:/lgtb/web\n")
    d = tmp_path / "blkio" / "lgtb" / "web"
    d.mkdir(parents=True)
    (d / "blkio.throttle.io_service_bytes").write_text("Total 0\n")
    (d / "blkio.throttle.write_bps_device").write_text("")
    counters = read_cgroup(tmp_path, own)
    assert counters is not None
    assert counters.io is None
    rates = cgroup_rates(counters, CgroupCounters(counters.time_s + 1, notes=counters.notes))
    assert any("only under a throttle rule" in m for m in rates.missing)
    assert not any("no cgroup of its own for block" in m for m in rates.missing)


def test_a_device_first_used_between_readings_counts_from_zero():
    from linkgrad.hostprobe.cgroup import CgroupIo

    rates = cgroup_rates(CgroupCounters(0.0, io={}),
                         CgroupCounters(2.0, io={"8:0": CgroupIo(0, 4096, 0, 1)}))
    assert rates.io["8:0"].write_bytes_per_s == 2048


def test_a_cgroup_re_created_between_readings_gives_no_rate():
    rates = cgroup_rates(CgroupCounters(0.0, cpu_s=10.0), CgroupCounters(1.0, cpu_s=2.0))
    assert rates.cpu_cores is None
    assert any("went back" in m for m in rates.missing)


CHILD = r"""
import json, mmap, os, sys, time
from pathlib import Path
from sniffer.host_probe import read_cgroup
before = read_cgroup()
end = time.process_time() + 0.5
while time.process_time() < end:
    pass
buf = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT needs
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
for _ in range(8):
    os.write(fd, buf)
os.close(fd)
after = read_cgroup()
print(json.dumps([before.__dict__ | {"io": None}, after.__dict__ | {"io": None},
                  {d: io.write_bytes - (before.io[d].write_bytes if d in before.io else 0)
                   for d, io in (after.io or {}).items()}]))
"""


@pytest.mark.netns  # needs root: makes cgroups
def test_v1_live_a_process_in_its_own_cgroups_is_measured_as_them(tmp_path):
    root = Path("/sys/fs/cgroup")
    if not (root / "cpuacct" / "cpuacct.usage").exists():
        pytest.skip("no cgroup v1 cpuacct controller on this machine")
    name = f"lgtest-{uuid.uuid4().hex[:8]}"
    dirs = [root / c / name for c in ("cpuacct", "memory", "blkio")]
    for d in dirs:
        d.mkdir()
    try:
        own = subprocess.run(["findmnt", "-n", "-o", "MAJ:MIN", "-T", str(tmp_path)],
                             capture_output=True, text=True, check=True).stdout.strip()
        device = Path(f"/sys/dev/block/{own}")  # a partition's queue is its disk's
        disk = (device.resolve().parent if (device / "partition").exists()
                else device.resolve()).name
        majmin = Path(f"/sys/block/{disk}/dev").read_text().strip()
        # v1 accounts a cgroup's I/O only under a throttle rule: one far above any disk
        (dirs[2] / "blkio.throttle.write_bps_device").write_text(f"{majmin} {1 << 50}\n")
        join = "; ".join(f"echo $$ > {d}/cgroup.procs" for d in dirs)
        proc = subprocess.run(
            ["sh", "-c", f'{join}; exec "$0" -c "$1" "$2"', sys.executable, CHILD,
             str(tmp_path / "direct.bin")],
            capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
        assert proc.returncode == 0, proc.stderr
        import json

        before, after, written = json.loads(proc.stdout)
        before_c = CgroupCounters(**before)
        after_c = CgroupCounters(**after)
        rates = cgroup_rates(before_c, after_c)
        assert rates.cpu_cores is not None
        assert (after_c.cpu_s or 0) - (before_c.cpu_s or 0) >= 0.5  # the busy loop, at least
        assert rates.memory_bytes is not None
        assert rates.memory_bytes > 0
        assert sum(written.values()) >= 8 << 20  # the direct writes, on the host's device
    finally:
        for d in dirs:
            d.rmdir()  # its processes are gone: nothing left behind


def test_v2_live_is_skipped_with_its_reason():
    unified = Path("/sys/fs/cgroup/unified/cgroup.controllers")
    if unified.exists() and not {"cpu", "memory", "io"} & set(unified.read_text().split()):
        pytest.skip("this machine's cgroup v2 hierarchy has none of the cpu, memory and io "
                    "controllers (hybrid mode, v1 has them): v2 is tested on files above")
    if not Path("/sys/fs/cgroup/cgroup.controllers").exists():
        pytest.skip("no cgroup v2 hierarchy on this machine")
    assert own_cgroups(Path("/proc/self/cgroup").read_text())[1] is not None

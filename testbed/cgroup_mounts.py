"""What a testbed host's cgroups need from the machine's mounts (/proc/self/mountinfo): the
disks that v1's blkio needs a rule on to count a host's I/O, and the cgroup hierarchies to mount
in the host's own mount namespace. Pure parsing and argv building; `testbed.build` runs them."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from testbed.cgroups import CGROUP_ROOT, V1_CONTROLLERS

__all__ = ["block_devices", "host_mounts", "mount_then_exec", "mounted_disks", "whole_disk"]


def block_devices(mountinfo: str) -> list[str]:
    """MAJ:MIN of every block device with a filesystem mounted (/proc/self/mountinfo's third
    field; major 0 is no block device: tmpfs, proc, overlay, nsfs), once each."""
    found: list[str] = []
    for line in mountinfo.splitlines():
        majmin = line.split()[2]
        if not majmin.startswith("0:") and majmin not in found:
            found.append(majmin)
    return found


def whole_disk(majmin: str, sys_dev_block: Path = Path("/sys/dev/block")) -> str | None:
    """The disk a partition is on (blk-throttle takes rules per disk, and a partition's I/O
    is its disk's), a disk itself; None: no block device of that number."""
    device = sys_dev_block / majmin
    if not device.exists():
        return None
    if (device / "partition").exists():
        return (device.resolve().parent / "dev").read_text().strip()
    return majmin


def mounted_disks(mountinfo: str, sys_dev_block: Path = Path("/sys/dev/block")) -> list[str]:
    """The disks a host's processes can read or write through a filesystem: the testbed's
    directory, the databases in it, binaries, /tmp. A device-mapper or md device counts as
    mounted itself, so its I/O is not counted again on the disks under it."""
    disks: list[str] = []
    for majmin in block_devices(mountinfo):
        disk = whole_disk(majmin, sys_dev_block)
        if disk is not None and disk not in disks:
            disks.append(disk)
    return disks


def host_mounts(mountinfo: str, root: Path = CGROUP_ROOT) -> list[list[str]]:
    """Commands that mount, in a host's mount namespace, the cgroup hierarchies mounted at
    `root` on the machine (`mountinfo`: /proc/self/mountinfo), so that the host probe finds
    its cgroup's files there: `ip netns exec` gives every process it starts a sysfs of its
    own, with nothing at /sys/fs/cgroup. v1's hierarchies are mounted again with their own
    options, which attaches the same hierarchy; controllers mounted together get a link for
    each name, as systemd makes them. The mounts go with the host's processes."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        point = left.split()[4]
        fstype, _, options = right.split()[:3]
        if fstype not in ("cgroup", "cgroup2") or root not in (Path(point), Path(point).parent):
            continue
        opts = [o for o in options.split(",") if o not in ("rw", "ro")]
        if fstype == "cgroup" and not set(opts) & set(V1_CONTROLLERS):
            continue  # name=systemd, devices, freezer: the probe reads none of them
        found.append((Path(point), fstype, opts))
    if any(point == root for point, _, _ in found):  # v2 only: the hierarchy is the root
        return [["mount", "-t", "cgroup2", "cgroup2", str(root)]]
    commands = [["mount", "-t", "tmpfs", "-o", "mode=755", "cgroup", str(root)]] if found else []
    for point, fstype, opts in found:
        commands.append(["mkdir", str(point)])
        commands.append(["mount", "-t", "cgroup2", "cgroup2", str(point)] if fstype == "cgroup2"
                        else ["mount", "-t", "cgroup", "-o", ",".join(opts), "cgroup",
                              str(point)])
        names = point.name.split(",")
        commands += [["ln", "-s", point.name, str(root / c)] for c in names
                     if len(names) > 1 and c in V1_CONTROLLERS]
    return commands


def mount_then_exec(mounts: Sequence[Sequence[str]], argv: Sequence[str]) -> list[str]:
    """`argv` run after `mounts` (`host_mounts`), in the mount namespace it is in; a mount that
    fails ends it first."""
    if not mounts:
        return list(argv)
    script = "; ".join(["set -e", *(shlex.join(m) for m in mounts), 'exec "$@"'])
    return ["sh", "-c", script, "sh", *argv]

"""sshd in every host: keys made per testbed, a known_hosts file and an ssh_config whose host
names are the hosts' names, strict host key checking on (keys are verified, never added).

Everything is in the testbed's `ssh/` (root's, 0700) and every key is generated afresh: a key
file found there is never trusted (whoever planted it would hold the testbed's root login).
Only root may log in, by key."""

from __future__ import annotations

from pathlib import Path

from testbed.build import sh
from testbed.netns import HostPlan, TestbedPlan
from testbed.private_dir import ensure_dir, write_file

SSHD = "/usr/sbin/sshd"


def keygen(path: Path, comment: str) -> str:
    """A new ed25519 key at `path` (whatever was there is removed first); returns the public
    key line."""
    for old in (path, Path(f"{path}.pub")):
        old.unlink(missing_ok=True)
    sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return Path(f"{path}.pub").read_text().strip()


def sshd_config(host: HostPlan, host_key: Path, authorized_keys: Path, pid_file: Path) -> str:
    return "\n".join([
        f"ListenAddress {host.address}",
        "Port 22",
        f"HostKey {host_key}",
        f"PidFile {pid_file}",
        f"AuthorizedKeysFile {authorized_keys}",
        "PermitRootLogin prohibit-password",
        "AllowUsers root",  # AuthorizedKeysFile is one absolute path, for whichever user
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",  # /var/tmp is world-writable; testbed.private_dir checks instead
        "AcceptEnv LANG LC_*",
        "Subsystem sftp internal-sftp",
        "",
    ])


def ssh_config(plan: TestbedPlan, identity: Path, known_hosts: Path) -> str:
    blocks = []
    for h in plan.hosts:
        blocks.append("\n".join([
            f"Host {h.name}",
            f"    HostName {h.address}",
            "    User root",
            "    Port 22",
            f"    IdentityFile {identity}",
            "    IdentitiesOnly yes",
            f"    UserKnownHostsFile {known_hosts}",
            "    StrictHostKeyChecking yes",
            "    BatchMode yes",
            "    ConnectTimeout 5",
        ]))
    return "\n\n".join(blocks) + "\n"


def prepare(plan: TestbedPlan, directory: Path) -> dict[str, Path]:
    """Keys and configs for every host; returns the paths the coordinator needs."""
    ssh_dir = ensure_dir(directory / "ssh", 0o700)
    identity = ssh_dir / "id_ed25519"
    client_key = keygen(identity, f"linkgrad-testbed-{plan.tag}")
    authorized = ssh_dir / "authorized_keys"
    write_file(authorized, client_key + "\n")
    known = []
    for h in plan.hosts:
        host_key = ssh_dir / f"{h.name}_host_ed25519_key"
        public = keygen(host_key, f"{h.name}.{plan.tag}")
        algo, key = public.split()[:2]
        known.append(f"{h.name},{h.address} {algo} {key}")
        write_file(ssh_dir / f"{h.name}_sshd_config",
                   sshd_config(h, host_key, authorized, ssh_dir / f"{h.name}_sshd.pid"))
    known_hosts = ssh_dir / "known_hosts"
    write_file(known_hosts, "\n".join(known) + "\n", mode=0o644)
    config = ssh_dir / "ssh_config"
    write_file(config, ssh_config(plan, identity, known_hosts), mode=0o644)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    return {"ssh_config": config, "known_hosts": known_hosts, "identity": identity}


def sshd_argv(host: HostPlan, directory: Path) -> list[str]:
    return [SSHD, "-D", "-e", "-f", str(directory / "ssh" / f"{host.name}_sshd_config")]

"""sshd in every host: keys made per testbed, a known_hosts file and an ssh_config whose host
names are the hosts' names, strict host key checking on (DESIGN.md: keys are verified)."""

from __future__ import annotations

from pathlib import Path

from testbed.build import sh
from testbed.netns import HostPlan, TestbedPlan

SSHD = "/usr/sbin/sshd"


def keygen(path: Path, comment: str) -> str:
    """An ed25519 key at `path` (made once); returns the public key line."""
    if not path.exists():
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
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
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
    ssh_dir = directory / "ssh"
    ssh_dir.mkdir(parents=True, exist_ok=True)
    identity = ssh_dir / "id_ed25519"
    client_key = keygen(identity, f"linkgrad-testbed-{plan.tag}")
    authorized = ssh_dir / "authorized_keys"
    authorized.write_text(client_key + "\n")
    known = []
    for h in plan.hosts:
        host_key = ssh_dir / f"{h.name}_host_ed25519_key"
        public = keygen(host_key, f"{h.name}.{plan.tag}")
        algo, key = public.split()[:2]
        known.append(f"{h.name},{h.address} {algo} {key}")
        (ssh_dir / f"{h.name}_sshd_config").write_text(
            sshd_config(h, host_key, authorized, ssh_dir / f"{h.name}_sshd.pid"))
    known_hosts = ssh_dir / "known_hosts"
    known_hosts.write_text("\n".join(known) + "\n")
    config = ssh_dir / "ssh_config"
    config.write_text(ssh_config(plan, identity, known_hosts))
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    return {"ssh_config": config, "known_hosts": known_hosts, "identity": identity}


def sshd_argv(host: HostPlan, directory: Path) -> list[str]:
    return [SSHD, "-D", "-e", "-f", str(directory / "ssh" / f"{host.name}_sshd_config")]

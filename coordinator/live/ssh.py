"""SSH to the hosts (paramiko): verified host keys, daemons spoken to in JSON lines over the
channel's stdio, and a followed remote file. The channel is the lease: closing it (or losing it)
closes the daemon's stdin, and the daemon stops every injection.

Commands are built with shlex.join from argument lists, never by pasting strings into a shell.
"""

from __future__ import annotations

import re
import shlex
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import paramiko
from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

from coordinator.config.experiment_files import cannot_open
from linkgrad.errors import InputError, Problem, RuntimeFailure
from linkgrad.reading import read_text


@dataclass(frozen=True)
class Endpoint:
    name: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    known_hosts: Path
    # the options (lower case) the ssh_config set for the host: a later check tells its files
    # from defaults without a second lookup (each runs the ssh_config's `Match exec` commands)
    config_gives: frozenset[str] = frozenset()
    # the ssh_config's ProxyJump hops, first hop first (each resolved as its own entry)
    jump: tuple[Endpoint, ...] = ()


def endpoint_for(host: Any, ssh: Any) -> Endpoint:
    """An experiment host's endpoint: its ssh_config entry (if there is a config), overridden
    by the address, port, user and key the experiment gives."""
    if ssh.config is not None:
        base = resolve(host.name, ssh.config, ssh.known_hosts)
    else:
        base = Endpoint(host.name, host.address, 22, "root", (), ssh.known_hosts)
    return Endpoint(host.name, host.address or base.hostname, host.port or base.port,
                    host.user or base.user,
                    (str(host.key),) if host.key else base.identity_files, base.known_hosts,
                    base.config_gives, base.jump)


MAX_JUMPS = 8  # ProxyJump hops, counting those each hop's own entry adds


def resolve(name: str, ssh_config: Path, known_hosts: Path | None = None,
            _via: tuple[str, ...] = ()) -> Endpoint:
    """Where `name` is, by the ssh_config's Host entry (HostName, Port, User, IdentityFile,
    UserKnownHostsFile, ProxyJump); InputError naming the ssh_config when it cannot be read,
    gives no usable port, or asks for what paramiko cannot do (ProxyCommand)."""
    text = read_text(ssh_config, "the ssh_config")
    try:
        config = paramiko.SSHConfig.from_text(text).lookup(name)
    except (paramiko.SSHException, ValueError, KeyError) as e:
        raise InputError(Problem(f"not a usable ssh_config: {e}", str(ssh_config))) from e
    port = str(config.get("port", "22"))
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise InputError(Problem(f"Port {port!r} (for Host {name}) is not a port number "
                                 "(1-65535)", str(ssh_config), _line_of_option(text, "port", port),
                                 "Port"))
    if "proxycommand" in config and str(config["proxycommand"]).lower() != "none":
        raise InputError(Problem(f"ProxyCommand (for Host {name}) is not supported: give the "
                                 "bastion as ProxyJump", str(ssh_config),
                                 _first_line_of(text, "proxycommand"), "ProxyCommand"))
    known = known_hosts or Path(str(config.get("userknownhostsfile", "~/.ssh/known_hosts"))
                                .split()[0]).expanduser()
    jump = _jumps(name, str(config.get("proxyjump", "none")), ssh_config, known_hosts, text,
                  _via)
    return Endpoint(name, config.get("hostname", name), int(port),
                    config.get("user", "root"), tuple(config.get("identityfile", [])),
                    Path(known), frozenset(config), jump)


def _jumps(name: str, value: str, ssh_config: Path, known_hosts: Path | None, text: str,
           via: tuple[str, ...]) -> tuple[Endpoint, ...]:
    """ProxyJump's hops (`[user@]host[:port]`, comma-separated; a host may be another entry
    of the ssh_config, whose own ProxyJump comes first), as OpenSSH reads them."""
    if value.lower() == "none":
        return ()
    hops: list[Endpoint] = []
    for spec in value.split(","):
        user, _, rest = spec.strip().rpartition("@")
        host, _, port = rest.partition(":")
        where = (str(ssh_config), _line_of_option(text, "proxyjump", value), "ProxyJump")
        if not host or (port and not (port.isdigit() and 1 <= int(port) <= 65535)):
            raise InputError(Problem(f"ProxyJump {value!r} (for Host {name}): not "
                                     "[user@]host[:port]", *where))
        if host in via or len(via) >= MAX_JUMPS:
            raise InputError(Problem(f"ProxyJump for Host {name} goes round or through more "
                                     f"than {MAX_JUMPS} hops: {' -> '.join((*via, host))}",
                                     *where))
        hop = resolve(host, ssh_config, known_hosts, (*via, name))
        hop = Endpoint(spec.strip(), hop.hostname, int(port) if port else hop.port,
                       user or hop.user, hop.identity_files, hop.known_hosts, hop.config_gives,
                       hop.jump)
        hops += [*hop.jump, replace(hop, jump=())]
    return tuple(hops)


def _line_of_option(text: str, option: str, value: str | Path) -> int | None:
    """The first line setting `option` to `value` in an ssh_config (paramiko keeps no lines),
    read as paramiko reads it (`Option value`, `Option=value`, quotes stripped). A path is
    compared expanded, as paramiko gives it; one it rewrote (a %h token) is at the option's
    first line."""
    pattern = re.compile(rf"{option}(?:\s*=\s*|\s+)(.+)", re.IGNORECASE)
    found = [(i, m[1]) for i, line in enumerate(text.splitlines(), 1)
             if (m := pattern.fullmatch(line.strip()))]
    for i, given in found:
        given = given[1:-1] if given.startswith('"') and given.endswith('"') else given
        if (Path(given).expanduser() if isinstance(value, Path) else given) == value:
            return i
    return found[0][0] if found and isinstance(value, Path) else None


def _first_line_of(text: str, option: str) -> int | None:
    """The first line setting `option` (its value as paramiko gives it may be expanded)."""
    pattern = re.compile(rf"{option}(?:\s*=\s*|\s+)", re.IGNORECASE)
    return next((i for i, line in enumerate(text.splitlines(), 1)
                 if pattern.match(line.strip())), None)


def check_known_hosts(path: Path) -> None:
    """InputError naming the file and line of a known_hosts entry that is no entry (paramiko
    would skip it silently, and the host it meant would then be refused as unknown)."""
    for number, line in enumerate(read_text(path, "known_hosts").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entry = HostKeyEntry.from_line(line, number)
        except (InvalidHostKey, paramiko.SSHException, ValueError) as e:
            cause = e.args[1] if isinstance(e, InvalidHostKey) and len(e.args) > 1 else e
            raise InputError(Problem(f"not a known_hosts line (HOSTS KEYTYPE BASE64-KEY): "
                                     f"{cause}", str(path), number)) from e
        if entry is None and len(line.split()) < 3:
            raise InputError(Problem("not a known_hosts line (HOSTS KEYTYPE BASE64-KEY)",
                                     str(path), number))


def check_endpoints(hosts: Sequence[Any], ssh: Any) -> dict[str, Endpoint]:
    """Every host's endpoint and its known_hosts checked, before any host is connected to:
    an unreadable ssh_config or known_hosts is InputError naming it, not a failure found
    halfway through connecting."""
    ends = {h.name: endpoint_for(h, ssh) for h in hosts}
    if ssh.config is not None and (problems := _config_file_problems(hosts, ends, ssh)):
        raise InputError(problems)
    for path in sorted({e.known_hosts for e in ends.values()}):
        check_known_hosts(path)
    return ends


def _config_file_problems(hosts: Sequence[Any], ends: dict[str, Endpoint], ssh: Any
                          ) -> list[Problem]:
    """The files the ssh_config gives a host that paramiko could not do without, at the
    ssh_config's line: its UserKnownHostsFile (or the default), and its IdentityFiles when none
    of them can be opened. paramiko would fail at connect (exit 1), when the mistake is in that
    file (or the experiment, which could give its own). Some IdentityFiles missing is no
    mistake: OpenSSH skips them (a `Host *` block's ~/.ssh/id_rsa often is), and `Connection`
    gives paramiko only the others. The experiment's own ssh.known_hosts and keys are checked
    at its fields (`require_local_files`)."""
    text = read_text(ssh.config, "the ssh_config")
    problems: list[Problem] = []
    seen_known: set[Path] = set()
    seen_keys: set[tuple[Path, ...]] = set()
    for host in hosts:
        end = ends[host.name]
        known = end.known_hosts
        if ssh.known_hosts is None and known not in seen_known \
                and (reason := cannot_open(known)) is not None:
            seen_known.add(known)
            given = "userknownhostsfile" in end.config_gives
            what = f"UserKnownHostsFile for Host {host.name}:" if given else \
                f"no UserKnownHostsFile for Host {host.name}, and the default"
            problems.append(Problem(
                f"{what} {known} cannot be read: {reason} (give another here, or "
                "ssh.known_hosts in the experiment)", str(ssh.config),
                _line_of_option(text, "UserKnownHostsFile", known) if given else None,
                "UserKnownHostsFile"))
        keys = tuple(Path(f) for f in end.identity_files)
        if host.key is not None or not keys or keys in seen_keys:
            continue
        reasons = [(key, reason) for key in keys if (reason := cannot_open(key)) is not None]
        if len(reasons) == len(keys):  # paramiko would have no key to try
            seen_keys.add(keys)
            listed = ", ".join(f"{key} ({reason})" for key, reason in reasons)
            problems.append(Problem(f"no IdentityFile for Host {host.name} can be read: "
                                    f"{listed}", str(ssh.config),
                                    _line_of_option(text, "IdentityFile", keys[0]),
                                    "IdentityFile"))
    return problems


class Connection:
    """One verified SSH connection to a host."""

    def __init__(self, endpoint: Endpoint, timeout_s: float = 10.0) -> None:
        self.endpoint = endpoint
        self.client = paramiko.SSHClient()
        check_known_hosts(endpoint.known_hosts)
        try:
            self.client.load_host_keys(str(endpoint.known_hosts))
        except (OSError, ValueError, InvalidHostKey, paramiko.SSHException) as e:
            # the file changed since it was checked
            raise RuntimeFailure(f"cannot read known_hosts {endpoint.known_hosts}: {e}") from e
        self.client.set_missing_host_key_policy(paramiko.RejectPolicy())  # never auto-add
        # only the keys that can be opened: paramiko stops at the first it cannot open
        # (FileNotFoundError) where OpenSSH skips it; none left (removed since they were
        # checked) and paramiko's error names the first
        keys = [f for f in endpoint.identity_files if cannot_open(Path(f)) is None] \
            or list(endpoint.identity_files)
        self.jump: Jump | None = None
        try:
            sock = None
            if endpoint.jump:
                self.jump = JUMPS.take(endpoint.jump, timeout_s)
                sock = self.jump.channel_to(endpoint, timeout_s)
            self.client.connect(endpoint.hostname, endpoint.port, endpoint.user,
                                key_filename=keys or None, sock=sock,
                                timeout=timeout_s, banner_timeout=timeout_s,
                                auth_timeout=timeout_s, look_for_keys=False, allow_agent=False)
        except (paramiko.SSHException, OSError, ValueError, RuntimeFailure) as e:
            # ValueError: a bad name
            self.close()
            if isinstance(e, RuntimeFailure):
                raise
            raise RuntimeFailure(f"ssh {endpoint.name} ({endpoint.hostname}): {e}") from e

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> str:
        """Run a command to completion; its stdout, or RuntimeFailure with its stderr."""
        _, stdout, stderr = self.client.exec_command(shlex.join(argv), timeout=timeout_s)
        out = stdout.read().decode()
        status = stdout.channel.recv_exit_status()
        if status != 0:
            raise RuntimeFailure(f"{self.endpoint.name}: {shlex.join(argv)} exited {status}: "
                                 f"{stderr.read().decode().strip()}")
        return out

    @property
    def name(self) -> str:
        return self.endpoint.name

    @property
    def address(self) -> str:
        return self.endpoint.hostname

    def open_lines(self, argv: Sequence[str]) -> SshChannel:
        """A command whose stdio is a channel of lines (a daemon, a followed file)."""
        transport = self.client.get_transport()
        if transport is None:
            raise RuntimeFailure(f"ssh {self.endpoint.name}: connection lost")
        channel = transport.open_session()
        channel.exec_command(shlex.join(argv))
        return SshChannel(channel)

    def close(self) -> None:
        self.client.close()
        if self.jump is not None:
            JUMPS.give_back(self.jump)
            self.jump = None


class Jump:
    """One connection to a bastion (through the hops before it), shared by every host behind
    it: each host's SSH connection is a direct-tcpip channel on it. OpenSSH's `ssh -J` makes a
    bastion connection per host, and the bastion's sshd counts each against MaxStartups (10
    unauthenticated at once by default); one authenticated connection is never refused."""

    def __init__(self, hops: tuple[Endpoint, ...], timeout_s: float) -> None:
        self.hops, self.users = hops, 0
        self.connection = Connection(hops[-1] if len(hops) == 1 else
                                     replace(hops[-1], jump=hops[:-1]),
                                     timeout_s)

    def channel_to(self, target: Endpoint, timeout_s: float) -> paramiko.Channel:
        transport = self.connection.client.get_transport()
        if transport is None or not transport.is_active():
            raise RuntimeFailure(f"ssh {target.name}: the connection to its ProxyJump "
                                 f"{self.hops[-1].name} was lost")
        try:
            return transport.open_channel("direct-tcpip", (target.hostname, target.port),
                                          ("127.0.0.1", 0), timeout=timeout_s)
        except (paramiko.SSHException, OSError) as e:
            raise RuntimeFailure(f"ssh {target.name} ({target.hostname}) through ProxyJump "
                                 f"{self.hops[-1].name}: {e}") from e


class _Jumps:
    """The bastion connections in use, by their hops: made by the first host that needs one
    (the others behind it wait for it), closed when the last host behind it closes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[tuple[Endpoint, ...], Jump] = {}
        self.making: dict[tuple[Endpoint, ...], threading.Lock] = {}

    def take(self, hops: tuple[Endpoint, ...], timeout_s: float) -> Jump:
        with self.lock:
            making = self.making.setdefault(hops, threading.Lock())
        with making:  # one host connects to the bastion; those behind it then share it
            with self.lock:
                jump = self.open.get(hops)
                if jump is not None and _active(jump):
                    jump.users += 1
                    return jump
            jump = Jump(hops, timeout_s)
            with self.lock:
                jump.users += 1
                self.open[hops] = jump
                return jump

    def give_back(self, jump: Jump) -> None:
        with self.lock:
            jump.users -= 1
            if jump.users > 0:
                return
            if self.open.get(jump.hops) is jump:
                del self.open[jump.hops]
        jump.connection.close()


def _active(jump: Jump) -> bool:
    transport = jump.connection.client.get_transport()
    return transport is not None and transport.is_active()


JUMPS = _Jumps()


class SshChannel:
    """A command's SSH channel as a `linkgrad.protocol.jsonlines.Channel`."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self.channel = channel

    def send(self, data: bytes) -> None:
        self.channel.sendall(data)

    def lines(self) -> Iterator[str]:
        with self.channel.makefile("r") as lines:
            for line in lines:
                yield line.rstrip("\n")

    def close_input(self) -> None:
        if not self.channel.closed:
            self.channel.shutdown_write()

    def exit_status(self, timeout_s: float) -> int | None:
        return self.channel.exit_status if self.channel.status_event.wait(timeout_s) else None

    def stderr_tail(self, limit: int = 600) -> str:
        """The end of what the command wrote to stderr so far (what a daemon that ended at
        once said: `python: not found`, `No module named sniffer`)."""
        data = b""
        while self.channel.recv_stderr_ready() and len(data) < 1 << 20:
            data += self.channel.recv_stderr(65536)
        text = data.decode(errors="replace").strip()
        return text[-limit:]

    def close(self) -> None:
        self.close_input()
        self.channel.close()

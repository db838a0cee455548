"""MariaDB on the db host: its own datadir in the testbed directory (mariadb-install-db), one
`mariadbd` run as the mysql user and bound to the db address, never the system service.

Every file it uses is named on the command line (`--no-defaults`: /etc/mysql is not read), so
two testbeds and the machine's own MariaDB never share a socket, pid file or datadir.

Authentication: the server's root is reached only on its socket, as the system's root
(unix_socket: mariadb-install-db makes no other account); the wiki's account has a password
made for this testbed and may connect from the web host's address only. SQL goes to the
client on stdin, never on its command line (visible to every local user in /proc).
"""

from __future__ import annotations

import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from linkgrad.errors import RuntimeFailure
from testbed.build import sh
from testbed.netns import HostPlan
from testbed.private_dir import ensure_dir

PORT = 3306
MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "mariadb-install-db"
CLIENT = "mariadb"


@dataclass(frozen=True)
class Database:
    """The application's database and its account (reached over TCP from the web host)."""

    name: str = "wiki"
    user: str = "wiki"
    password: str = field(default_factory=lambda: secrets.token_hex(24), repr=False)


def paths(directory: Path) -> dict[str, Path]:
    """Where the instance keeps things, all under the testbed's directory."""
    base = directory / "mariadb"
    return {"base": base, "datadir": base / "data", "socket": base / "mariadb.sock",
            "pid": base / "mariadbd.pid", "log": directory / "logs" / "mariadb-error.log",
            "general_log": base / "general.log"}


def init_datadir(directory: Path) -> None:
    """A fresh datadir owned by mysql (system tables only, no test database)."""
    p = paths(directory)
    ensure_dir(p["base"], 0o700, "mysql", "mysql")
    ensure_dir(p["log"].parent, 0o700)
    sh([INSTALL_DB, "--no-defaults", "--user=mysql", f"--datadir={p['datadir']}",
        "--auth-root-authentication-method=socket", "--skip-test-db", "--skip-name-resolve"],
       timeout_s=180)


def mariadbd_argv(host: HostPlan, directory: Path) -> list[str]:
    """The server in the foreground; it drops to the mysql user itself (`--user`)."""
    p = paths(directory)
    return [MARIADBD, "--no-defaults", "--user=mysql", f"--datadir={p['datadir']}",
            f"--socket={p['socket']}", f"--pid-file={p['pid']}", f"--log-error={p['log']}",
            f"--bind-address={host.address}", f"--port={PORT}", "--skip-name-resolve",
            f"--general-log-file={p['general_log']}", "--general-log=0",
            "--max-connections=500", "--innodb-buffer-pool-size=128M",
            "--innodb-flush-log-at-trx-commit=2", "--skip-log-bin", "--performance-schema=0"]


def sql(directory: Path, statements: str, timeout_s: float = 60.0) -> str:
    """Run SQL as the server's root over its socket (unix-socket authentication)."""
    return sh([CLIENT, "--no-defaults", f"--socket={paths(directory)['socket']}", "-u", "root",
               "--batch", "--skip-column-names"], input=statements, timeout_s=timeout_s)


def create_database(directory: Path, db: Database, client: str) -> None:
    """The wiki's database and its account, which may connect from `client` (the web host's
    address) only."""
    account = f"'{db.user}'@'{client}'"
    sql(directory, f"CREATE DATABASE `{db.name}` CHARACTER SET binary;\n"
                   f"CREATE USER {account} IDENTIFIED BY '{db.password}';\n"
                   f"GRANT ALL ON `{db.name}`.* TO {account};\nFLUSH PRIVILEGES;\n")


def general_log(directory: Path, on: bool) -> Path:
    """Switch the general query log (every statement, with its connection id) on or off;
    returns its file."""
    sql(directory, f"SET GLOBAL general_log = {'ON' if on else 'OFF'}")
    return paths(directory)["general_log"]


def check_installed() -> None:
    if not Path(MARIADBD).exists() or shutil.which(INSTALL_DB) is None:
        raise RuntimeFailure("MariaDB is not installed: run scripts/setup")

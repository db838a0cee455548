"""What `linkgrad testbed up`, `status` and `down` answer: typed, and printed by `--json` as
they always were. A model's fields, in their order, are that JSON's keys (`up`'s description is
also kept in the testbed's state file, `testbed.state`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from testbed.netns import HostPlan
from testbed.transactions import Transaction

__all__ = ["DescribedHost", "DescribedTestbed", "DescribedTransaction", "DescribedWebLog",
           "RemovalReport", "StatusReport"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DescribedHost(_Record):
    name: str
    namespace: str
    address: str
    ssh_port: int
    roles: tuple[str, ...]
    # controller -> the host's own cgroup, which every process in the host is in
    # (`testbed.cgroups`); {}: the host is measured as the machine
    cgroups: dict[str, Path] = {}

    @classmethod
    def of(cls, host: HostPlan, cgroups: dict[str, Path] | None = None) -> DescribedHost:
        return cls(name=host.name, namespace=host.namespace, address=host.address,
                   ssh_port=22, roles=host.roles,  # every host's sshd (testbed.sshd)
                   cgroups=cgroups or {})


class DescribedWebLog(_Record):
    """The front end's access log: its host, its file, and how to read it."""

    host: str
    path: Path
    format: Literal["nginx", "apache"]
    log_format: str


class DescribedTransaction(_Record):
    name: str
    path: str
    pattern: str
    expected: dict[str, float | None]  # link "a->b" -> gradient; None: unknown
    url: str

    @classmethod
    def of(cls, transaction: Transaction, frontend_url: str) -> DescribedTransaction:
        return cls(name=transaction.name, path=transaction.path, pattern=transaction.pattern,
                   expected=transaction.expected, url=frontend_url + transaction.path)


class DescribedTestbed(_Record):
    """A testbed that is up: what `up --json` prints."""

    tag: str
    app: str
    directory: Path
    subnet: str
    recovered_stale: bool  # `up` removed what an earlier run of the tag left
    hosts: tuple[DescribedHost, ...]
    frontend_url: str
    web_log: DescribedWebLog
    ssh_config: Path
    known_hosts: Path
    transactions: tuple[DescribedTransaction, ...]
    network: str  # "netns", or Mininet's
    cgroups_note: str | None = None  # why the hosts have no cgroups of their own

    def host(self, name: str) -> DescribedHost:
        return next(h for h in self.hosts if h.name == name)

    def with_role(self, role: str) -> list[DescribedHost]:
        return [h for h in self.hosts if role in h.roles]


class StatusReport(_Record):
    """`testbed status`: whether every service of the testbed runs, and its description."""

    tag: str
    up: bool
    services: dict[str, bool] | None = None  # "host/name" -> running; None: no testbed
    info: DescribedTestbed | None = None  # None: no testbed, or `up` has not finished

    def json_text(self) -> str:
        """What `status --json` prints: one object, the description's keys after `services`
        (absent: not there)."""
        head = self.model_dump(mode="json", include={"tag", "up", "services"}, exclude_none=True)
        info = self.info.model_dump(mode="json") if self.info is not None else {}
        return json.dumps(head | info, indent=2)


class RemovalReport(_Record):
    """`testbed down`: whether there was anything to remove."""

    tag: str
    removed: bool
    failures: tuple[str, ...] = ()

"""A testbed topology is a description: hosts, their roles, and the application's parameters.

Validated from YAML (`coordinator.config.topology_file`) or a built-in one: the default
(`app: rubis`: client, web, app1, app2, db, cache), MediaWiki's (`app: mediawiki`: client, web,
db) or Redmine's (`app: redmine`: client, web, db). A separate builder (`testbed.netns`) turns
it into live namespaces.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from linkgrad.errors import InputError, Problem

Role = Literal["client", "web", "app", "db", "cache"]
App = Literal["rubis", "mediawiki", "redmine", "services"]
# Per application: the roles a topology must have (exactly one host each, except "app").
REQUIRED_ROLES: dict[str, tuple[Role, ...]] = {
    "rubis": ("client", "web", "app", "db", "cache"),
    "mediawiki": ("client", "web", "db"),  # Apache + mod_php on web, MariaDB on db
    "redmine": ("client", "web", "db"),  # Apache + Passenger on web, PostgreSQL on db
    "services": ("client", "web"),  # nginx and the front service on web, the rest role-less
}
MAX_HOSTS = 64  # the generated application's client and 63 services; the others have fewer
_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")
# the default application's transactions that can be given an extra query (testbed.app's
# names for its routes; MediaWiki is not ours to change)
EXTRA_QUERY_TRANSACTIONS = ("ViewItem", "PutBidAuth", "PutBid", "StoreBid", "single",
                            "sequential", "cache", "parallel_all", "parallel_first", "async",
                            "balanced")


class HostSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    roles: tuple[Role, ...]

    @field_validator("name")
    @classmethod
    def _short_name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError("1-8 lowercase letters or digits, starting with a letter")
        return name


class ServiceTimes(BaseModel):
    """The application's knobs (thesis §4.7: S2 ~ N(100, 30) ms, S3 ~ N(200, 60) ms, p = 0.3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    s2_mean_ms: float = Field(100.0, gt=0)  # the database call (pg_sleep)
    s2_sd_ms: float = Field(30.0, ge=0)
    s3_mean_ms: float = Field(200.0, gt=0)  # the second app server's /svc/work
    s3_sd_ms: float = Field(60.0, ge=0)
    cache_miss_p: float = Field(0.3, ge=0, le=1)
    sequential_m: int = Field(2, ge=1, le=20)
    # a planted regression: each named RUBiS/pattern transaction makes one more database
    # round trip before its own work (a release that added a query; `linkgrad regress` must
    # catch it)
    extra_query: tuple[str, ...] = ()

    @field_validator("extra_query")
    @classmethod
    def _known_transactions(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(names) - set(EXTRA_QUERY_TRANSACTIONS))
        if unknown:
            raise ValueError(f"no such transaction {', '.join(unknown)}: one of "
                             f"{', '.join(EXTRA_QUERY_TRANSACTIONS)}")
        if len(set(names)) != len(names):
            raise ValueError("a transaction is named twice")
        return names


class Generated(BaseModel):
    """The generated application (`testbed.service_graph`): its size and seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    services: int = Field(ge=2, le=MAX_HOSTS - 1)
    seed: int = Field(1, ge=0, le=2**31)
    transactions: int = Field(4, ge=1, le=16)


class Topology(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "default"
    app: App = "rubis"  # the application the testbed runs
    hosts: tuple[HostSpec, ...]
    subnet: str | None = None  # a /24; default: the first free one in 10.201.0.0/16
    service: ServiceTimes = ServiceTimes()
    generated: Generated | None = None  # app: services only

    @model_validator(mode="after")
    def _roles(self) -> Topology:
        names = [h.name for h in self.hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"host names must be unique: {names}")
        if not 2 <= len(self.hosts) <= MAX_HOSTS:
            raise ValueError(f"a topology has 2 to {MAX_HOSTS} hosts")
        if (self.app == "services") != (self.generated is not None):
            raise ValueError("app: services and generated go together (testbed up "
                             "--services N makes both)")
        if self.generated is not None and [h.name for h in self.hosts] != [
                "client", *(f"s{i}" for i in range(self.generated.services))]:
            raise ValueError("a generated application's hosts are client, s0, s1, ...")
        required = REQUIRED_ROLES[self.app]
        for role in required:
            if not self.with_role(role):
                raise ValueError(f"no host has the role {role!r}")
        for role in ("client", "web", "db", "cache"):
            if len(self.with_role(role)) > 1:
                raise ValueError(f"only one host may have the role {role!r}")
        for role in ("app", "cache"):
            if role not in required and self.with_role(role):
                raise ValueError(f"app {self.app!r} has no {role!r} role (roles: "
                                 f"{', '.join(required)})")
        if self.service.extra_query and self.app != "rubis":
            raise ValueError(f"service.extra_query is for app rubis, not {self.app!r}")
        if len(self.with_role("app")) > 2:
            raise ValueError("at most two app hosts (app1 serves, app2 is also S3)")
        return self

    def with_role(self, role: str) -> list[HostSpec]:
        return [h for h in self.hosts if role in h.roles]

    def host(self, role: str) -> HostSpec:
        return self.with_role(role)[0]


DEFAULT = Topology(hosts=(
    HostSpec(name="client", roles=("client",)),
    HostSpec(name="web", roles=("web",)),
    HostSpec(name="app1", roles=("app",)),
    HostSpec(name="app2", roles=("app",)),
    HostSpec(name="db", roles=("db",)),
    HostSpec(name="cache", roles=("cache",)),
))


MEDIAWIKI = Topology(name="mediawiki", app="mediawiki", hosts=(
    HostSpec(name="client", roles=("client",)),
    HostSpec(name="web", roles=("web",)),
    HostSpec(name="db", roles=("db",)),
))

REDMINE = Topology(name="redmine", app="redmine", hosts=(
    HostSpec(name="client", roles=("client",)),
    HostSpec(name="web", roles=("web",)),
    HostSpec(name="db", roles=("db",)),
))

def services_topology(services: int, seed: int = 1, transactions: int = 4) -> Topology:
    """The generated application of `services` services: client, then s0 (the front: nginx
    and the front service) and s1... each on a host of its own."""
    return Topology(name=f"services-{services}-{seed}", app="services", hosts=(
        HostSpec(name="client", roles=("client",)),
        HostSpec(name="s0", roles=("web",)),
        *(HostSpec(name=f"s{i}", roles=()) for i in range(1, services))),
        generated=Generated(services=services, seed=seed, transactions=transactions))


BUILT_IN: dict[str, Topology] = {"rubis": DEFAULT, "mediawiki": MEDIAWIKI, "redmine": REDMINE}


def with_extra_query(topology: Topology, transactions: tuple[str, ...]) -> Topology:
    """`topology` whose application makes one more database round trip in each of
    `transactions` (validated as the file's field is: InputError naming --extra-query)."""
    data = topology.model_dump()
    data["service"]["extra_query"] = transactions
    try:
        return Topology.model_validate(data)
    except ValidationError as e:
        raise InputError([Problem(err["msg"].removeprefix("Value error, "),
                                  field="--extra-query") for err in e.errors()]) from e

"""PostgreSQL on the db host: its own cluster in the testbed directory, an auction schema like
RUBiS (users, items, bids, categories, regions) and seeded data.

Authentication: the app servers connect over TCP as the role `rubis` (owner of the database,
not a superuser) with a password made for this testbed (scram-sha-256), and only from their own
addresses. The superuser `postgres` has no password and is reached only by peer authentication
on the cluster's socket, in its 0700 data directory: as the postgres user, never over TCP.
"""

from __future__ import annotations

import glob
from collections.abc import Iterable
from pathlib import Path

from linkgrad.errors import RuntimeFailure
from testbed.build import sh
from testbed.netns import HostPlan
from testbed.private_dir import ensure_dir, write_file

DATABASE = "rubis"
ROLE = "rubis"  # the application's role: owns the database, nothing else

SCHEMA = """
CREATE TABLE regions (id serial PRIMARY KEY, name text NOT NULL);
CREATE TABLE categories (id serial PRIMARY KEY, name text NOT NULL);
CREATE TABLE users (
    id serial PRIMARY KEY, nickname text UNIQUE NOT NULL, password text NOT NULL,
    email text NOT NULL, rating integer NOT NULL DEFAULT 0, balance numeric NOT NULL DEFAULT 0,
    region integer NOT NULL REFERENCES regions(id), creation_date timestamptz NOT NULL);
CREATE TABLE items (
    id serial PRIMARY KEY, name text NOT NULL, description text NOT NULL,
    initial_price numeric NOT NULL, quantity integer NOT NULL, reserve_price numeric,
    buy_now numeric, nb_of_bids integer NOT NULL DEFAULT 0, max_bid numeric NOT NULL DEFAULT 0,
    start_date timestamptz NOT NULL, end_date timestamptz NOT NULL,
    seller integer NOT NULL REFERENCES users(id), category integer NOT NULL
        REFERENCES categories(id));
CREATE TABLE bids (
    id serial PRIMARY KEY, user_id integer NOT NULL REFERENCES users(id),
    item_id integer NOT NULL REFERENCES items(id), qty integer NOT NULL, bid numeric NOT NULL,
    max_bid numeric NOT NULL, date timestamptz NOT NULL);
CREATE INDEX bids_item ON bids(item_id);
CREATE INDEX items_category ON items(category);
"""

SEED = """
INSERT INTO regions (name) SELECT 'region-' || g FROM generate_series(1, 62) g;
INSERT INTO categories (name) SELECT 'category-' || g FROM generate_series(1, 20) g;
INSERT INTO users (nickname, password, email, rating, region, creation_date)
    SELECT 'user' || g, 'password' || g, 'user' || g || '@rubis.example', g % 50,
           1 + g % 62, now() - (g || ' hours')::interval FROM generate_series(1, {users}) g;
INSERT INTO items (name, description, initial_price, quantity, start_date, end_date, seller,
                   category)
    SELECT 'item-' || g, repeat('An item for sale. ', 8), 1 + g % 100, 1 + g % 5,
           now() - interval '1 day', now() + interval '6 days', 1 + g % {users}, 1 + g % 20
    FROM generate_series(1, {items}) g;
INSERT INTO bids (user_id, item_id, qty, bid, max_bid, date)
    SELECT 1 + (g * 7) % {users}, 1 + g % {items}, 1, 1 + g % 300, 1 + g % 400,
           now() - (g || ' minutes')::interval FROM generate_series(1, {bids}) g;
UPDATE items i SET nb_of_bids = b.n, max_bid = b.m
    FROM (SELECT item_id, count(*) n, max(bid) m FROM bids GROUP BY item_id) b
    WHERE b.item_id = i.id;
ANALYZE;
"""

SIZES = {"users": 1000, "items": 5000, "bids": 20000}


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not found:
        raise RuntimeFailure("PostgreSQL is not installed: apt-get install postgresql")
    return Path(found[-1]).parent


def pg_hba(clients: Iterable[str], database: str = DATABASE, role: str = ROLE) -> str:
    """Who may connect: the superuser by peer on the socket; the app's role to its database
    by password from each client address; nobody else, from anywhere (no line: refused)."""
    lines = ["local all postgres peer"]
    lines += [f"host {database} {role} {address}/32 scram-sha-256" for address in clients]
    return "\n".join(lines) + "\n"


def init_cluster(data: Path, clients: Iterable[str], database: str = DATABASE,
                 role: str = ROLE) -> None:
    """initdb as the postgres user; `clients` are the app servers' addresses."""
    ensure_dir(data, 0o700, "postgres", "postgres")
    sh(["runuser", "-u", "postgres", "--", str(postgres_bin() / "initdb"), "-D", str(data),
        "--auth-local=peer", "--auth-host=scram-sha-256", "-U", "postgres", "--no-sync",
        "--encoding=UTF8", "--locale=C"], timeout_s=120)
    write_file(data / "pg_hba.conf", pg_hba(clients, database, role), 0o600, "postgres",
               "postgres")


def postgres_argv(host: HostPlan, data: Path) -> list[str]:
    return ["runuser", "-u", "postgres", "--", str(postgres_bin() / "postgres"), "-D", str(data),
            "-c", f"listen_addresses={host.address}", "-c", f"unix_socket_directories={data}",
            "-c", "max_connections=200", "-c", "synchronous_commit=off",
            "-c", "shared_buffers=64MB"]


def psql_argv(data: Path, database: str = DATABASE) -> list[str]:
    """psql as the superuser, on the cluster's socket (peer authentication)."""
    return ["runuser", "-u", "postgres", "--", "psql", "-h", str(data), "-d", database,
            "-v", "ON_ERROR_STOP=1", "-q"]


def create_database(data: Path, password: str, database: str = DATABASE,
                    role: str = ROLE) -> None:
    """The app's role (not a superuser) and its database, owned by it. SQL goes on stdin: a
    password on a command line is visible to every local user."""
    sh(psql_argv(data, "postgres"),
       input=f"CREATE ROLE {role} LOGIN PASSWORD {_literal(password)};\n")
    sh([*psql_argv(data, "postgres"), "-c", f"CREATE DATABASE {database} OWNER {role}"])


def seed(data: Path, password: str) -> None:
    """The auction's role and database, the schema (owned by the role) and the data."""
    create_database(data, password)
    sh(psql_argv(data), input=f"SET ROLE {ROLE};\n" + SCHEMA + SEED.format(**SIZES),
       timeout_s=120)


def statement_log(data: Path, on: bool) -> None:
    """Switch logging of every statement on or off (reloaded, no restart) in the server's
    own log (its stderr: the service's log): each line starts with its time in ms and the
    backend's pid, which names the connection it came on."""
    statements = ([f"ALTER SYSTEM SET log_statement = '{'all' if on else 'none'}'",
                   "ALTER SYSTEM SET log_line_prefix = '%m [%p] '",
                   "SELECT pg_reload_conf()"])
    sh([*psql_argv(data, "postgres"), *(a for st in statements for a in ("-c", st))])


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def dsn(host: HostPlan, password: str) -> str:
    """The app servers' connection string (it holds the password: keep it in a 0600 file)."""
    return f"postgresql://{ROLE}:{password}@{host.address}:5432/{DATABASE}"

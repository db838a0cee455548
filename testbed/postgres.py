"""PostgreSQL on the db host: its own cluster in the testbed directory, an auction schema like
RUBiS (users, items, bids, categories, regions) and seeded data."""

from __future__ import annotations

import glob
import shutil
from pathlib import Path

from common.errors import RuntimeFailure
from testbed.build import sh
from testbed.netns import HostPlan

DATABASE = "rubis"

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


def init_cluster(data: Path, subnet: str) -> None:
    """initdb as the postgres user, trust for the testbed subnet only."""
    data.parent.mkdir(parents=True, exist_ok=True)
    data.mkdir(exist_ok=True)
    shutil.chown(data, "postgres", "postgres")
    data.chmod(0o700)
    sh(["runuser", "-u", "postgres", "--", str(postgres_bin() / "initdb"), "-D", str(data),
        "-A", "trust", "-U", "postgres", "--no-sync"], timeout_s=120)
    (data / "pg_hba.conf").write_text(
        "local all all trust\n"
        f"host all all {subnet} trust\n")


def postgres_argv(host: HostPlan, data: Path) -> list[str]:
    return ["runuser", "-u", "postgres", "--", str(postgres_bin() / "postgres"), "-D", str(data),
            "-c", f"listen_addresses={host.address}", "-c", f"unix_socket_directories={data}",
            "-c", "max_connections=200", "-c", "synchronous_commit=off",
            "-c", "shared_buffers=64MB"]


def seed(host: HostPlan) -> None:
    psql = ["psql", "-h", host.address, "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-q"]
    sh([*psql, "-d", "postgres", "-c", f"CREATE DATABASE {DATABASE}"])
    sh([*psql, "-d", DATABASE], input=SCHEMA + SEED.format(**SIZES), timeout_s=120)


def dsn(host: HostPlan) -> str:
    return f"postgresql://postgres@{host.address}:5432/{DATABASE}"

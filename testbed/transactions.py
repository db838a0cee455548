"""The testbed's transactions and their expected link gradients (ground truth for tests and
benchmarks), from the crossings of each link on the critical path (thesis §2.1, Table 2.1).

Links are one-way and named `src->dst` by host. A request-response crosses each direction
once, so both directions share the number. Every transaction crosses client->web once each
way (keep-alive connections) and the web->app hop the number of times nginx routes it there.

MediaWiki's and Redmine's page types (`app: mediawiki`, `app: redmine`) are somebody else's
code: their crossings are not known in advance, so their expected gradients are None;
`benchmarks/mediawiki_truth.py` measures them (packet turns on web<->db, and slopes under
constant delays).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from testbed.service_graph import ServiceGraph, generate, true_gradients
from testbed.topology import ServiceTimes, Topology


@dataclass(frozen=True)
class Transaction:
    name: str
    path: str
    pattern: str  # thesis Table 2.1 row, or the RUBiS transaction
    expected: dict[str, float | None]  # link "a->b" -> gradient (each direction); None: unknown


def _both(a: str, b: str, g: float) -> dict[str, float | None]:
    return {f"{a}->{b}": g, f"{b}->{a}": g}


def prob_slower(mean_a: float, sd_a: float, mean_b: float, sd_b: float) -> float:
    """P[A > B] for independent normals: the chance A is on the critical path of wait-for-all."""
    spread = math.hypot(sd_a, sd_b)
    if spread == 0:
        return 1.0 if mean_a > mean_b else 0.0 if mean_a < mean_b else 0.5
    return 0.5 * (1 + math.erf((mean_a - mean_b) / (spread * math.sqrt(2))))


# MediaWiki page types: name, path (the titles are those `testbed.mediawiki` seeds), what it is.
MEDIAWIKI_PAGES = (
    ("article", "/index.php?title=Topic_7", "article view: an infobox, links, categories"),
    ("hub", "/index.php?title=Hub", "article with ~40 links and several templates"),
    ("category", "/index.php?title=Category:Rivers", "category page listing its members"),
    ("recent", "/index.php?title=Special:RecentChanges&days=90&limit=50",
     "Special:RecentChanges, 50 rows"),
    ("api", "/api.php?action=query&prop=links&titles=Hub&pllimit=max&format=json",
     "api.php query: the links of a page"),
    ("search", "/index.php?title=Special:Search&search=river&fulltext=1",
     "full-text search (MySQL FULLTEXT on searchindex)"),
)


# Redmine's page types (the project and issues `testbed.redmine` seeds; anonymous views).
REDMINE_PAGES = (
    ("issues", "/projects/demo/issues", "a project's issue list, 25 to a page"),
    ("issue", "/issues/42", "an issue with its journal"),
    ("search", "/search?q=river&scope=all", "full-text search of issues and journals"),
    ("activity", "/projects/demo/activity", "a project's activity, the last 30 days"),
    ("login", "/login", "the login form"),
)


def transactions_of(topology: Topology) -> list[Transaction]:
    if topology.app == "services":
        return generated_transactions(topology)
    if topology.app == "mediawiki":
        return packaged_transactions(topology, "MediaWiki", MEDIAWIKI_PAGES)
    if topology.app == "redmine":
        return packaged_transactions(topology, "Redmine", REDMINE_PAGES)
    return rubis_transactions(topology)


def generated_transactions(topology: Topology) -> list[Transaction]:
    """The generated application's endpoints /t0, /t1...: their expected gradients exact from
    the call graph (`testbed.service_graph.true_gradients`), every link of the graph listed
    (0 where the transaction does not cross it)."""
    truth = true_gradients(graph_of(topology), topology.host("client").name)
    return [Transaction(name, f"/{name}", "generated: its endpoint's calls",
                        dict(expected)) for name, expected in truth.items()]


def graph_of(topology: Topology) -> ServiceGraph:
    """The generated application's graph, drawn again from its seed (deterministic)."""
    g = topology.generated
    assert g is not None, "a generated application's topology"
    return generate(g.services, g.seed, g.transactions)


def packaged_transactions(topology: Topology, app: str,
                          pages: tuple[tuple[str, str, str], ...]) -> list[Transaction]:
    """Every page type crosses web<->db an unknown number of times (None, measured by a
    benchmark), and client<->web once each way."""
    client, web, db = (topology.host(r).name for r in ("client", "web", "db"))
    unknown: dict[str, float | None] = {f"{web}->{db}": None, f"{db}->{web}": None}
    return [Transaction(name, path, f"{app}: {what}", {**_both(client, web, 1.0), **unknown})
            for name, path, what in pages]


def rubis_transactions(topology: Topology) -> list[Transaction]:
    s: ServiceTimes = topology.service
    client, web = topology.host("client").name, topology.host("web").name
    apps = [h.name for h in topology.with_role("app")]
    app, peer = apps[0], apps[-1]
    db, cache = topology.host("db").name, topology.host("cache").name
    front = {**_both(client, web, 1.0), **_both(web, app, 1.0)}

    def on_app(pattern: str, name: str, path: str, **links: float) -> Transaction:
        if name in s.extra_query:  # one more round trip to the database, before its work
            links["db"] = links.get("db", 0.0) + 1.0
        expected = dict(front)
        for target, g in links.items():
            expected.update(_both(app, {"db": db, "cache": cache, "peer": peer}[target], g))
        return Transaction(name, path, pattern, expected)

    s2_slowest = prob_slower(s.s2_mean_ms, s.s2_sd_ms, s.s3_mean_ms, s.s3_sd_ms)
    found = [
        on_app("RUBiS: item, then its bids", "ViewItem", "/rubis/ViewItem?id=42", db=2.0),
        on_app("RUBiS: one authentication query", "PutBidAuth", "/rubis/PutBidAuth?user=7",
               db=1.0),
        on_app("RUBiS: user, item, top bid", "PutBid", "/rubis/PutBid?id=42&user=7", db=3.0),
        on_app("RUBiS: BEGIN, INSERT, UPDATE, COMMIT (a random item)", "StoreBid",
               "/rubis/StoreBid?user=7", db=4.0),
        on_app("single request-response", "single", "/pattern/single", db=1.0),
        on_app(f"{s.sequential_m} sequential messages", "sequential", "/pattern/sequential",
               db=float(s.sequential_m)),
        on_app(f"cached, miss probability {s.cache_miss_p:g}", "cache", "/pattern/cache",
               cache=1.0, db=s.cache_miss_p),
        on_app("concurrent, wait for all", "parallel_all", "/pattern/parallel_all",
               db=s2_slowest, peer=1 - s2_slowest),
        on_app("concurrent, wait for first", "parallel_first", "/pattern/parallel_first",
               db=1 - s2_slowest, peer=s2_slowest),
        on_app("asynchronous (fire and forget)", "async", "/pattern/async", db=0.0),
    ]
    share = 1.0 / len(apps)
    balanced = {**_both(client, web, 1.0)}
    extra = 1.0 if "balanced" in s.extra_query else 0.0
    for a in apps:
        balanced.update({**_both(web, a, share), **_both(a, db, share * (1.0 + extra))})
    found.append(Transaction("balanced", "/lb/single", "symmetric load balanced", balanced))
    return found

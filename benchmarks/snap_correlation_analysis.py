"""The analysis of benchmarks/snap_correlation.py's runs (pure: the saved reports in, tables out).

Every socket each host reported in a run's window, as linkgrad.snap.evidence's
`correlated_resources` counts them, gets one performance vector (§2.3, t = 2 s); the vectors are
ranked by ACC under two groupings of the sockets:

  now     `shared_resources`, each socket under the direction it sends: from:H, to:H,
          path:A->B, process:P (checked equal, ACC for ACC, to `correlated_resources`).
  before  the paper's grouping taken literally to sockets, as the code had it: host:H holds
          every socket on H or with peer H, link:A-B those between A and B either way, so each
          group holds both ends of its connections, the receiving end's vector mostly zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coordinator.config.snap_file import HostSnapReport
from linkgrad.snap.correlate import (
    ResourceScore,
    average_correlation,
    performance_vectors,
    rank_resources,
    shared_resources,
)
from linkgrad.snap.evidence import _classes, correlated_resources

ALPHA, AGGREGATION_S = 0.4, 2.0  # §3.2, §4.1
PAPER_INCAST_ACC, PAPER_RWND_ACC, PAPER_SHARE_ABOVE = 0.45, 0.8, 0.027  # §4.1, Figure 2
APPLICATION = ("incast_agg", "incast_wrk")
SLOW_S = 0.15  # a request or round slower than this waited for a retransmission timeout
TOP = 8
GROUPINGS = ("now", "before")
TITLE = {"now": "now: from/to/path/process", "before": "before: host/link, both ends"}

ROLES = """\
Roles. The problem is put on one direction, into host P (the tbf queue on the bridge port \
into the aggregator; the injector's drops at the lossy host's INPUT). *injected*: the host and \
path groups of that direction, to:P and path:X->P (before: host:P and link:X-P). \
*application*: the incast's processes (process:incast_wrk sends into P too: the correlation \
by application of the paper's footnote 8). *spanning*: the background's processes, which run \
on every host and so hold sockets into P among the others. *healthy*: every other group, \
from:X for every X, to:Y and path:X->Y for Y ≠ P (before: host:Y and link:X-Y for X, Y ≠ P); \
from:X for X ≠ P holds X's sockets into P among its others (2 of 10; 3 of 11 on an incast \
worker), as the paper's other machines talk to the bad one. In the control run every group is \
healthy. *Goal met*: the injected to:P (before: host:P) above α and every healthy group below \
it. *members (with a problem)*: a member never in trouble has a constant vector and adds 0 to \
every pair, so ACC = k(k−1)/(n(n−1)) × the ACC among the k with a problem."""


def before_groups(conn_host: Mapping[int, str], conn_peer: Mapping[int, str],
                  conn_process: Mapping[int, str]) -> dict[str, list[int]]:
    """The grouping `shared_resources` had before (commit 417a4b5): host:H = every socket with
    H at either end, link:A-B = those between A and B either way, process:P = P's."""
    groups: dict[str, list[int]] = {}
    for conn, host in conn_host.items():
        peer, process = conn_peer.get(conn), conn_process.get(conn)
        names = [f"host:{host}"]
        if peer:
            names += [f"host:{peer}", "link:" + "-".join(sorted((host, peer)))]
        if process:
            names.append(f"process:{process}")
        for name in dict.fromkeys(names):
            groups.setdefault(name, []).append(int(conn))
    return groups


def old_name(resource: str) -> str:
    """The before-group a now-group's sockets all fall in."""
    kind, _, what = resource.partition(":")
    if kind in ("from", "to"):
        return f"host:{what}"
    if kind == "path":
        return "link:" + "-".join(sorted(what.split("->")))
    return resource


def role(resource: str, problem: str | None) -> str:
    """injected, application, spanning or healthy (the rule: ROLES)."""
    kind, _, what = resource.partition(":")
    if kind == "process":
        return ("application" if what in APPLICATION else "spanning") if problem else "healthy"
    injected = {"to": what == problem, "path": what.endswith(f"->{problem}"),
                "host": what == problem, "link": problem in what.split("-")}.get(kind, False)
    return "injected" if problem and injected else "healthy"


def scores(reports: Sequence[Mapping[str, Any]], hosts: Mapping[str, str],
           window: tuple[float, float], problem: str | None
           ) -> tuple[dict[str, list[ResourceScore]], set[int], dict[str, Any]]:
    """Both groupings' ranked scores over one set of vectors, the sockets with a problem, and
    to:problem split by the sending process (ACC, sockets)."""
    ids: dict[tuple[Any, ...], int] = {}
    host_of: dict[int, str] = {}
    peer_of: dict[int, str] = {}
    process_of: dict[int, str] = {}
    rows: list[tuple[int, float, float, tuple[str, ...]]] = []
    for report in reports:  # as correlated_resources counts them: a socket per host's report
        for item, classes in [*((c, ()) for c in report.get("connections", ())),
                              *((r, tuple(r["classes"])) for r in report.get("records", ()))]:
            local, remote = item["local"], item["remote"]
            conn = ids.setdefault((report["host"], local["addr"], local["port"], remote["addr"],
                                   remote["port"]), len(ids))
            host_of[conn], peer_of[conn] = str(report["host"]), hosts.get(remote["addr"]) or ""
            if item.get("process"):
                process_of[conn] = str(item["process"])
            start, end = ((item["from"], item["to"]) if classes
                          else (item["first_s"], item["last_s"]))
            rows.append((conn, float(start), float(end), classes))
    vectors = performance_vectors(_classes([r[3] for r in rows]), [r[0] for r in rows],
                                  [r[1] for r in rows], [r[2] for r in rows],
                                  from_s=window[0], to_s=window[1], aggregation_s=AGGREGATION_S)
    sick = vectors.seconds.reshape(len(vectors.connections), -1).any(axis=1)
    out = {"now": rank_resources(shared_resources(host_of, peer_of, process_of), vectors, ALPHA),
           "before": rank_resources(before_groups(host_of, peer_of, process_of), vectors, ALPHA)}
    typed = [HostSnapReport.model_validate(r) for r in reports]  # the run's snap.json reports
    theirs = {s.resource: s.acc for s in correlated_resources(typed, hosts, window,
                                                              AGGREGATION_S, ALPHA)}
    ours = {s.resource: s.acc for s in out["now"]}
    if theirs.keys() != ours.keys() or any(
            (theirs[k] is None) != (ours[k] is None)
            or (ours[k] is not None and abs(theirs[k] - ours[k]) > 1e-9) for k in ours):
        raise SystemExit("the now-grouping here differs from correlated_resources'")
    into = {c for c, peer in peer_of.items() if problem and peer == problem}
    split = {}
    for process in sorted({process_of.get(c, "") for c in into}):
        rows_ = vectors.rows([c for c in into if process_of.get(c, "") == process])
        split[process or "?"] = (average_correlation(vectors.seconds[rows_]), len(rows_))
    return out, set(vectors.connections[sick].tolist()), split


def _row(score: ResourceScore, sick: set[int], problem: str | None) -> dict[str, Any]:
    return {"resource": score.resource, "role": role(score.resource, problem),
            "acc": score.acc, "above_alpha": score.above_alpha,
            "members": len(score.connections),
            "with_problem": sum(c in sick for c in score.connections),
            "problems_s": {p: round(v, 1) for p, v in score.problems.items() if v > 0}}


def verdict(rows: list[dict[str, Any]], target: str | None) -> dict[str, Any]:
    """Where the injected group ranks, and which healthy groups pass α."""
    rank = {r["resource"]: i + 1 for i, r in enumerate(rows)}
    at = next((r for r in rows if r["resource"] == target), None)
    injected = [r for r in rows if r["role"] == "injected"]
    healthy = [r for r in rows if r["role"] == "healthy"]
    hosts = [r for r in healthy if r["resource"].partition(":")[0] in ("from", "to", "host")]
    top = max(healthy, key=lambda r: r["acc"] if r["acc"] is not None else -1.0, default=None)
    above = [(r["resource"], r["acc"]) for r in healthy if r["above_alpha"]]
    return {
        "target": target, "acc": at["acc"] if at else None, "rank": rank.get(target or ""),
        "above_alpha": bool(at and at["above_alpha"]), "resources": len(rows),
        "injected": len(injected), "injected_above_alpha": sum(r["above_alpha"] for r in injected),
        "best_injected": ((injected[0]["resource"], injected[0]["acc"],
                           rank[injected[0]["resource"]]) if injected else None),
        "healthy": len(healthy), "healthy_above_alpha": above,
        "healthy_max": (top["resource"], top["acc"]) if top else None,
        "healthy_hosts": len(hosts), "healthy_hosts_above_alpha": sum(r["above_alpha"]
                                                                      for r in hosts),
        "others_above_alpha": [(r["resource"], r["acc"]) for r in rows if r["above_alpha"]
                               and r["role"] in ("application", "spanning")],
        "goal_met": (target is None or bool(at and at["above_alpha"])) and not above}


def traffic(reports: Sequence[Mapping[str, Any]], hosts: Mapping[str, str],
            problem: str | None) -> dict[str, Any]:
    """Retransmissions, RTOs and segments sent (the connections' sums) of the sockets sending
    into the problem host and of the others; sockets without a process name."""
    out = {k: dict.fromkeys(("retrans", "rto", "data_segs_out"), 0.0) for k in ("into", "other")}
    named: dict[tuple[Any, ...], bool] = {}
    for report in reports:
        for c in report.get("connections", ()):
            into = problem is not None and hosts.get(c["remote"]["addr"]) == problem
            for key, total in out["into" if into else "other"].items():
                out["into" if into else "other"][key] = total + c["sums"].get(key, 0.0)
            key = (report["host"], c["local"]["port"], c["remote"]["addr"], c["remote"]["port"])
            named[key] = named.get(key, False) or bool(c.get("process"))
    return {**out, "sockets": len(named), "without_process": sum(not v for v in named.values())}


def analyse(run: Mapping[str, Any], hosts: Mapping[str, str], problem: str | None
            ) -> dict[str, Any]:
    reports = run["reports"]
    window = (min(r["from"] for r in reports), max(r["to"] for r in reports))
    ranked, sick, split = scores(reports, hosts, window, problem)
    out: dict[str, Any] = {"window": window, "problem_host": problem, "into_by_process": split,
                           "traffic": traffic(reports, hosts, problem)}
    for grouping in GROUPINGS:
        rows = [_row(s, sick, problem) for s in ranked[grouping]]
        target = (f"to:{problem}" if grouping == "now" else f"host:{problem}") if problem else None
        out[grouping] = {"resources": rows, "verdict": verdict(rows, target)}
    return out


# ---------------------------------------------------------------- markdown


def _acc(x: float | None, bold: bool = False) -> str:
    text = "—" if x is None else f"{x:.2f}"
    return f"**{text}**" if bold and x is not None and x > ALPHA else text


def _listed(items: list[tuple[str, float | None]]) -> str:
    return ", ".join(f"{name} {_acc(acc, True)}" for name, acc in items) or "none"


FIGURES: list[tuple[str, Any]] = [
    ("injected group's ACC (rank of all)", lambda v: f"{v['target']} {_acc(v['acc'], True)} "
     f"(#{v['rank']} of {v['resources']})" if v["target"] else "—"),
    ("injected groups above α; the best", lambda v: "—" if not v["best_injected"] else
     f"{v['injected_above_alpha']} of {v['injected']}; {v['best_injected'][0]} "
     f"{_acc(v['best_injected'][1], True)} (#{v['best_injected'][2]})"),
    ("healthy groups above α (the highest)", lambda v: f"{len(v['healthy_above_alpha'])} of "
     f"{v['healthy']} ({_listed([v['healthy_max']] if v['healthy_max'] else [])})"),
    ("process groups above α", lambda v: _listed(v["others_above_alpha"])),
    ("goal met", lambda v: "**yes**" if v["goal_met"] else "no"),
]


def summary(analyses: Mapping[str, Mapping[str, Any]]) -> list[str]:
    paper = {"incast": (PAPER_INCAST_ACC, "0.45 (incast)"),
             "loss": (PAPER_RWND_ACC, "0.8 (the receiver-window case)")}
    out = [f"| run | figure | {TITLE['now']} | {TITLE['before']} | paper | now / paper |",
           "|---|---|---|---|---|---|"]
    for scenario, a in analyses.items():
        for i, (figure, cell) in enumerate(FIGURES):
            if not a["problem_host"] and i < 2:
                continue
            value, text = paper.get(scenario, (None, "—")) if i == 0 else (None, "—")
            acc = a["now"]["verdict"]["acc"]
            ratio = f"{acc / value:.2f}" if value and acc is not None else "—"
            out.append(f"| {scenario} | {figure} | {cell(a['now']['verdict'])} | "
                       f"{cell(a['before']['verdict'])} | {text} | {ratio} |")
    share = {g: [sum(a[g]["verdict"][k] for a in analyses.values())
                 for k in ("healthy_hosts_above_alpha", "healthy_hosts")] for g in GROUPINGS}
    ours = share["now"][0] / share["now"][1] if share["now"][1] else None
    out.append("| all | healthy host groups above α | " + " | ".join(
        f"{n} of {d} ({n / d:.1%})" if d else "—" for n, d in share.values())
        + f" | {PAPER_SHARE_ABOVE:.1%} of the other machines | "
        + ("—" if ours is None else f"{ours / PAPER_SHARE_ABOVE:.2f}") + " |")
    return out


def top_table(a: Mapping[str, Any]) -> list[str]:
    before = {r["resource"]: r for r in a["before"]["resources"]}
    out = ["| # | resource | role | ACC | members (with a problem) | problem seconds | before: "
           "the group holding it, ACC (members) |", "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(a["now"]["resources"]):
        if i >= TOP and not r["above_alpha"]:
            continue
        old = before.get(old_name(r["resource"]))
        probs = ", ".join(f"{p} {v:g}" for p, v in r["problems_s"].items()) or "—"
        was = f"{old['resource']} {_acc(old['acc'], True)} ({old['members']})" if old else "—"
        out.append(f"| {i + 1} | {r['resource']} | {r['role']} | {_acc(r['acc'], True)} | "
                   f"{r['members']} ({r['with_problem']}) | {probs} | {was} |")
    return out


def evidence(run: Mapping[str, Any], a: Mapping[str, Any]) -> str:
    """What the run did to the network, from the qdisc, the injector and the clients."""
    said = []
    if "qdisc" in run:
        said.append(f"tbf dropped {run['qdisc']['drops']:,} of {run['qdisc']['packets']:,} "
                    "packets")
    if "injector" in run:
        said.append("the injector dropped " + ", ".join(f"{v['dropped']:,}" for v in
                                                        run["injector"].values()) + " packets")
    if "incast" in run.get("clients", {}):
        r = run["clients"]["incast"]["rounds"]
        said.append(f"{r['n']} incast rounds, {r['slow']} slower than {SLOW_S} s (median "
                    f"{r['median_ms']:.0f} ms, max {r['max_ms']:.0f} ms)")
    t, p = a["traffic"], a["problem_host"]
    for key, what in (("into", f"the sockets sending into {p}"),
                      ("other", "the other sockets" if p else "all sockets")):
        if key == "into" and not p:
            continue
        said.append(f"{what}: {t[key]['retrans']:,.0f} retransmissions, {t[key]['rto']:,.0f} "
                    f"RTOs in {t[key]['data_segs_out']:,.0f} segments")
    if p and not t["into"]["retrans"] + t["into"]["rto"]:
        said.append("**no retransmission into the problem host: no problem was made**")
    if split := a["into_by_process"]:
        said.append(f"to:{p} split by the sending process, ACC (sockets): " + ", ".join(
            f"{name} {_acc(acc, True)} ({n})" for name, (acc, n) in split.items()))
    said.append(f"{t['without_process']} of {t['sockets']} sockets without a process name")
    return "; ".join(said) + "."


def markdown(meta: Mapping[str, Any], s: Mapping[str, Any],
             runs: Mapping[str, Mapping[str, Any]], analyses: Mapping[str, Mapping[str, Any]]
             ) -> str:
    """The RESULTS.md section: the setup (`s`: the runner's Settings as a dict), the roles, the
    summary against the paper, and per run what it did and its top groups."""
    lines = [
        "## SNAP correlation across connections (`benchmarks/snap_correlation.py`)",
        "",
        f"{meta['when']}, kernel {meta['kernel']}, {meta['cpus']} cores (shared, `nice -n 5`). "
        "Six hosts on a bridge; background in every run: each host keeps one connection to "
        "every other host's server (30 connections, 60 sockets) asking for "
        f"{s['reply_bytes']:,} B at exponential gaps of mean {s['gap_s']} s. Each run "
        f"{s['duration_s']:.0f} s, every host profiled (table {s['table_interval_s']} s, report "
        f"{s['report_interval_s']:.0f} s, no socket-call tracing). *incast*: {s['aggregator']} "
        f"asks {s['workers'] * s.get('connections_per_worker', 1)} workers "
        f"({s.get('connections_per_worker', 1)} connections to each of {s['workers']} hosts) "
        f"for {s['response_bytes']:,} B at once, again "
        f"{s['incast_gap_s']} s after the last answer, through tbf {s['rate_mbit']:g} Mbit/s, "
        f"limit {s['limit_bytes']:,} B on the bridge port into {s['aggregator']}. *loss*: the "
        f"injector drops {s['loss_fraction']:.0%} of the TCP packets into {s['lossy']}"
        + (f" in episodes ({2 * s['loss_fraction']:.0%} for {s['loss_period_s'] / 2:g} s of "
           f"every {s['loss_period_s']:g} s, as a congested link drops)"
           if s.get("loss_period_s") else "") + ". ACC "
        f"over the whole window of every socket each host reported, t = {AGGREGATION_S:g} s, "
        f"α = {ALPHA}, under two groupings of the same vectors. *now*: `correlated_resources` "
        "(from:H = the sockets H sends on, to:H = those sending into H, path:A->B, process:P). "
        "*before*: the grouping it had (host:H = every socket on H or with peer H, link:A-B "
        "either way, process:P), SNAP's hosts and links literally applied to sockets: both "
        "ends of each connection in one group.",
        "",
        ROLES,
        "",
        *summary(analyses),
        "",
    ]
    for scenario, a in analyses.items():
        lines += [f"### {scenario}", "", evidence(runs[scenario], a), "",
                  f"Top {TOP} groups as `correlated_resources` ranks them now (and any above α), "
                  "beside the before-group that holds all their sockets:", "", *top_table(a), ""]
    return "\n".join(lines)

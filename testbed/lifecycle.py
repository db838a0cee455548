"""`linkgrad testbed up|down|status`: bring a topology to life, describe it, remove it.

`up` removes what a crashed earlier run of the same tag left, makes the testbed's directory
afresh (root's, exclusively: `testbed.private_dir`), builds the network, starts sshd
everywhere, then the application, waiting for each server to answer: for `app: rubis`
PostgreSQL (seeded), memcached, the app servers and nginx; for `app: mediawiki` MariaDB,
MediaWiki installed and seeded, and Apache with mod_php (`testbed.mediawiki`); for
`app: redmine` PostgreSQL, Redmine's schema and seed, and Apache with Passenger
(`testbed.redmine`). Any failure tears down everything made so far and re-raises the original
error.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import sys
from pathlib import Path

from linkgrad.errors import RuntimeFailure
from testbed import apache, cgroups, mediawiki, nginx, postgres, redmine, sshd
from testbed.addressing import free_subnet, networks_in_use
from testbed.build import Builder, listening, namespace_pids, port_open, teardown, wait_until
from testbed.cgroup_mounts import mounted_disks
from testbed.description import (
    DescribedHost,
    DescribedTestbed,
    DescribedTransaction,
    DescribedWebLog,
    RemovalReport,
    StatusReport,
)
from testbed.extra import require_testbed_extra
from testbed.netns import TestbedPlan, network_steps, only_from, plan_testbed
from testbed.private_dir import ensure_dir, make_testbed_dir, remove_testbed_dir, write_file
from testbed.service_graph import graph_to_json
from testbed.service_server import PORT as SERVICE_PORT
from testbed.state import DEFAULT_ROOT, State, directory_for
from testbed.topology import Topology
from testbed.transactions import graph_of, transactions_of

MEMCACHED_PORT = 11211
MININET_PYTHON = "/usr/bin/python3"  # Debian's python3-mininet lives there, not in the venv


def _check_root_and_tools(app: str = "rubis") -> None:
    if os.geteuid() != 0:
        raise RuntimeFailure("the testbed needs root: it makes network namespaces")
    require_testbed_extra()
    servers = {"rubis": ("nginx", "memcached", "psql"), "services": ("nginx",)}.get(app, ())
    missing = [tool for tool in ("ip", "iptables", *servers, "ssh-keygen", "/usr/sbin/sshd",
                                 "runuser") if not _which(tool)]
    if missing:
        raise RuntimeFailure(f"missing {', '.join(missing)}: run scripts/setup")
    if app == "mediawiki":
        mediawiki.check_installed()
    if app == "redmine":
        redmine.check_installed()


def _which(tool: str) -> bool:
    import shutil

    return shutil.which(tool) is not None or Path(tool).exists()


def _subnet(topology: Topology) -> ipaddress.IPv4Network:
    if topology.subnet:
        return ipaddress.IPv4Network(topology.subnet)
    return free_subnet(networks_in_use())


def recover(tag: str, topology: Topology, root: Path, cgroup_root: Path = cgroups.CGROUP_ROOT
            ) -> tuple[bool, list[str]]:
    """Remove what an earlier run of this tag left (state file, else generated names).
    Returns whether there was anything, and what could not be removed (`teardown`'s)."""
    directory = directory_for(tag, root)
    state = State.load(directory)
    if state is not None and state.plan is not None:
        return True, teardown(state.plan, state, cgroup_root)
    stale = plan_testbed(topology, tag, ipaddress.IPv4Network("10.201.0.0/24"))
    if any(Path(f"/run/netns/{h.namespace}").exists() for h in stale.hosts) \
            or cgroups.leftover_cgroups(tag, cgroup_root):
        return True, teardown(stale, None, cgroup_root)
    return False, []


def up(topology: Topology, tag: str = "tb", root: Path = DEFAULT_ROOT,
       mininet: bool = False) -> DescribedTestbed:
    _check_root_and_tools(topology.app)
    recovered, failures = recover(tag, topology, root)
    if failures:  # a cgroup or a namespace of the earlier run stays: nothing is made beside it
        raise RuntimeFailure(f"could not remove what an earlier testbed {tag!r} left: "
                             + "; ".join(failures))
    plan = plan_testbed(topology, tag, _subnet(topology))
    directory = directory_for(tag, root)
    remove_testbed_dir(directory)  # root's own leftovers without a state (a planted one: refused)
    make_testbed_dir(directory)
    state = State(directory, plan)
    state.save()
    builder = Builder(state)
    try:
        _network(builder, plan, directory, mininet)
        note = _cgroups(state, plan)
        _build(builder, plan, topology, directory)
        info = describe(plan, topology, directory, recovered, mininet, state.cgroups, note)
        pages = [t.url for t in info.transactions]
        if topology.app == "mediawiki":
            mediawiki.warm_up(pages)
        if topology.app == "redmine":
            redmine.warm_up(pages)
        state.info = info
        state.save()
    except BaseException:
        teardown(plan, state)
        raise
    return info


def _network(builder: Builder, plan: TestbedPlan, directory: Path, mininet: bool) -> None:
    if not mininet:
        for step in network_steps(plan):
            builder.apply(step)
        return
    if not Path(MININET_PYTHON).exists() or _fails([MININET_PYTHON, "-c", "import mininet"]):
        raise RuntimeFailure(f"Mininet is not installed for {MININET_PYTHON}: "
                             "apt-get install mininet")
    prefix = ipaddress.IPv4Network(plan.subnet).prefixlen
    spec = {"bridge": plan.bridge, "gateway": plan.gateway, "prefix": prefix,
            "hosts": [{"name": h.name, "address": h.address, "namespace": h.namespace}
                      for h in plan.hosts]}
    write_file(directory / "mininet.json", json.dumps(spec))
    # undo by ownership if the keeper dies without cleaning: its names, its bridge
    builder.state.undo.append(["ip", "link", "del", plan.bridge])
    builder.state.undo += [["ip", "netns", "del", h.namespace] for h in plan.hosts]
    ready = directory / "mininet.ready"
    builder.start(None, "mininet", [MININET_PYTHON, str(Path(__file__).with_name(
        "mininet_keeper.py")), str(directory / "mininet.json"), str(ready)])
    wait_until(ready.exists, "Mininet to build the network", timeout_s=60)
    shells: dict[str, int] = json.loads(ready.read_text())["shells"]  # host -> its shell's pid
    services = builder.state.services
    services["root/mininet"] = services["root/mininet"].model_copy(
        update={"shells": tuple(sorted(shells.values()))})
    builder.state.save()


def _cgroups(state: State, plan: TestbedPlan) -> str | None:
    """A cgroup of its own for each host, before its first process (`testbed.cgroups`);
    recorded first, so a failure half-way is removed with the rest. Returns why the hosts
    have none (None: they have)."""
    hierarchy = cgroups.detect()
    why = cgroups.unavailable(hierarchy)
    if why is not None or hierarchy is None:
        return why
    hosts = [h.name for h in plan.hosts]
    state.cgroups = {h: cgroups.cgroup_dirs(hierarchy, plan.tag, h) for h in hosts}
    state.save()
    disks = mounted_disks(Path("/proc/self/mountinfo").read_text())
    cgroups.make_testbed_cgroups(hierarchy, plan.tag, hosts, disks)
    return None


def _fails(argv: list[str]) -> bool:
    import subprocess

    return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode != 0


def _build(builder: Builder, plan: TestbedPlan, topology: Topology, directory: Path) -> None:
    sshd.prepare(plan, directory)
    for h in plan.hosts:
        builder.start(h, "sshd", sshd.sshd_argv(h, directory))
    if topology.app == "mediawiki":
        mediawiki.build(builder, plan, directory)
    elif topology.app == "services":
        _build_services(builder, plan, topology, directory)
    elif topology.app == "redmine":
        redmine.build(builder, plan, directory)
    else:
        _build_rubis(builder, plan, topology, directory)
    for h in plan.hosts:
        wait_until(lambda h=h: port_open(h.address, 22), f"sshd on {h.name}")


def _build_rubis(builder: Builder, plan: TestbedPlan, topology: Topology, directory: Path
                 ) -> None:
    db, cache, web = (plan.with_role(r)[0] for r in ("db", "cache", "web"))
    apps = plan.with_role("app")
    app_addresses = tuple(a.address for a in apps)
    postgres.init_cluster(directory / "pg", app_addresses)
    builder.start(db, "postgres", postgres.postgres_argv(db, directory / "pg"))
    for step in only_from(cache, MEMCACHED_PORT, app_addresses):  # memcached has no login
        builder.apply(step)
    builder.start(cache, "memcached", ["memcached", "-u", "memcache", "-l", cache.address,
                                       "-p", str(MEMCACHED_PORT), "-U", "0", "-m", "64",
                                       "-c", "4096"])
    wait_until(lambda: port_open(db.address, 5432), "PostgreSQL on the db host")
    password = secrets.token_hex(24)  # this testbed's: in no file but the app's DSN file
    postgres.seed(directory / "pg", password)
    dsn_file = ensure_dir(directory / "secrets", 0o700) / "app.dsn"
    write_file(dsn_file, postgres.dsn(db, password) + "\n")
    for app in apps:
        builder.start(app, "app", _app_argv(app.name, app.address, plan, topology, dsn_file))
    nginx.write_conf(plan, directory)
    builder.start(web, "nginx", nginx.nginx_argv(directory))
    for app in apps:
        wait_until(lambda a=app: port_open(a.address, nginx.APP_PORT), f"the app on {app.name}")
    wait_until(lambda: listening(cache.namespace, MEMCACHED_PORT), "memcached")
    wait_until(lambda: port_open(web.address, 80), "nginx")


def _build_services(builder: Builder, plan: TestbedPlan, topology: Topology, directory: Path
                    ) -> None:
    """The generated application: a `testbed.service_server` per service host, the front (s0)
    on its host's loopback behind nginx, which writes the web log."""
    graph = graph_of(topology)
    graph_file, peers_file = directory / "graph.json", directory / "peers.json"
    write_file(graph_file, graph_to_json(graph))
    services = [h for h in plan.hosts if h.name == graph.front or h.name in graph.services]
    write_file(peers_file, json.dumps({h.name: h.address for h in services}))
    for h in services:
        listen = "127.0.0.1" if h.name == graph.front else h.address
        builder.start(h, "service", [sys.executable, "-m", "testbed.service_server",
                                     "--graph", str(graph_file), "--name", h.name,
                                     "--listen", listen, "--port", str(SERVICE_PORT),
                                     "--peers", str(peers_file)])
    web = plan.with_role("web")[0]
    nginx.write_front_conf(web.address, f"127.0.0.1:{SERVICE_PORT}", directory)
    builder.start(web, "nginx", nginx.nginx_argv(directory))
    for h in services:
        if h.name == graph.front:
            wait_until(lambda h=h: listening(h.namespace, SERVICE_PORT), f"the service on {h.name}")
        else:
            wait_until(lambda h=h: port_open(h.address, SERVICE_PORT), f"the service on {h.name}")
    wait_until(lambda: port_open(web.address, 80), "nginx")


def _app_argv(name: str, address: str, plan: TestbedPlan, topology: Topology, dsn_file: Path
              ) -> list[str]:
    s = topology.service
    cache = plan.with_role("cache")[0]
    peer = plan.with_role("app")[-1]
    return [sys.executable, "-m", "testbed.app", "--name", name, "--listen", address,
            "--port", str(nginx.APP_PORT), "--dsn-file", str(dsn_file),
            "--cache", cache.address,
            "--peer", f"http://{peer.address}:{nginx.APP_PORT}",
            "--s2-mean-ms", str(s.s2_mean_ms), "--s2-sd-ms", str(s.s2_sd_ms),
            "--s3-mean-ms", str(s.s3_mean_ms), "--s3-sd-ms", str(s.s3_sd_ms),
            "--cache-miss-p", str(s.cache_miss_p), "--sequential-m", str(s.sequential_m),
            "--truth-log", str(dsn_file.parents[1] / f"truth-{name}.log"),
            *(f"--extra-query={t}" for t in s.extra_query)]


def describe(plan: TestbedPlan, topology: Topology, directory: Path,
             recovered: bool = False, mininet: bool = False,
             host_cgroups: dict[str, dict[str, Path]] | None = None,
             cgroups_note: str | None = None) -> DescribedTestbed:
    web = plan.with_role("web")[0]
    url = f"http://{web.address}"
    log = directory / "access.log"
    if topology.app in ("mediawiki", "redmine"):
        web_log = DescribedWebLog(host=web.name, path=log, format="apache",
                                  log_format=apache.LOG_FORMAT)
    else:
        web_log = DescribedWebLog(host=web.name, path=log, format="nginx",
                                  log_format=nginx.LOG_FORMAT)
    return DescribedTestbed(
        tag=plan.tag, app=topology.app, directory=directory, subnet=plan.subnet,
        recovered_stale=recovered,
        hosts=tuple(DescribedHost.of(h, (host_cgroups or {}).get(h.name)) for h in plan.hosts),
        frontend_url=url, web_log=web_log, ssh_config=directory / "ssh" / "ssh_config",
        known_hosts=directory / "ssh" / "known_hosts",
        transactions=tuple(DescribedTransaction.of(t, url) for t in transactions_of(topology)),
        network="mininet (LinuxBridge, no controller)" if mininet else "netns",
        cgroups_note=cgroups_note)


def down(tag: str = "tb", topology: Topology | None = None, root: Path = DEFAULT_ROOT,
         cgroup_root: Path = cgroups.CGROUP_ROOT) -> RemovalReport:
    """Remove everything of the testbed `tag`; safe to run twice. With no state (never made,
    or removed by an earlier `down`) by the names generated for `topology` (default: the
    default one's) and the tag's cgroups. Raises if anything stays."""
    from testbed.topology import DEFAULT

    removed, failures = recover(tag, topology or DEFAULT, root, cgroup_root)
    if failures:
        raise RuntimeFailure("could not remove: " + "; ".join(failures))
    return RemovalReport(tag=tag, removed=removed)


def status(tag: str = "tb", root: Path = DEFAULT_ROOT) -> StatusReport:
    state = State.load(directory_for(tag, root))
    if state is None or state.plan is None:
        return StatusReport(tag=tag, up=False)
    plan = state.plan
    services = {}
    for key, service in state.services.items():
        where = key.split("/")[0]
        if where == "root":  # the Mininet keeper runs in the root namespace
            services[key] = Path(f"/proc/{service.pid}").exists()
        else:
            services[key] = service.pid in namespace_pids(plan.host(where).namespace)
    return StatusReport(tag=tag, up=all(services.values()) and bool(services),
                         services=services, info=state.info)

"""`linkgrad run` against the real testbed (root): a short experiment, then an interrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from coordinator.config.pcap_trace import read_pcap
from coordinator.config.trace_compare import as_captured, tree_agreement, within
from coordinator.config.trace_file import read_trace
from linkgrad.paths.from_hosts import paths_from_hosts
from linkgrad.paths.reconcile import HostTrace
from testbed.pairs.hosts import sh
from testbed.topology import HostSpec, Topology
from tests.fakes.otlp_receiver import ReceivedSpan, check_trace_shape, otlp_receiver
from tests.marks import TESTBED
from tests.netns_tools.testbeds import (
    LINKGRAD,
    assert_no_rules,
    private_testbed,
    running_testbed,
    unique_tag,
    wait_until_gone,
)

pytestmark = TESTBED
EXPERIMENT = """
name: {name}
testbed: {tag}
workload: {{host: client, rate_per_s: 60}}
transactions:
  ViewItem: ^/rubis/ViewItem
  PutBidAuth: ^/rubis/PutBidAuth
  PutBid: ^/rubis/PutBid$
  async: ^/pattern/async
parameters:
  training_s: 20
  cycles: 4
  period_s: 6
  magnitude_ms: 12
  adaptive: {adaptive}
  concurrent: {concurrent}
  include: ['app1->db', 'db->app1']
output: {output}
"""
EXPECTED = {"ViewItem": 2.0, "PutBidAuth": 1.0, "PutBid": 3.0, "async": 0.0}


@pytest.fixture(scope="module")
def tag():
    return unique_tag("r")


@pytest.fixture(scope="module")
def testbed(tag):
    yield from running_testbed(tag)


def _experiment(root: Path, tag: str, name: str, adaptive: bool = False,
                concurrent: int = 1) -> Path:
    path = root / f"{name}.yaml"
    path.write_text(EXPERIMENT.format(name=name, tag=tag, adaptive=str(adaptive).lower(),
                                      concurrent=concurrent, output=root / "runs"))
    return path


@pytest.mark.parametrize("concurrent", [1, 2], ids=["one-at-a-time", "concurrent"])
def test_run_measures_known_gradients_in_both_directions(testbed, tag, concurrent):
    """Both directions of app1<->db, one after the other or at once (periods T and 2T)."""
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(testbed)}
    experiment = _experiment(testbed, tag, f"short{concurrent}", concurrent=concurrent)
    done = subprocess.run([LINKGRAD, "run", str(experiment), "--json"],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["status"] == "completed"
    assert "cleanup_problems" not in status  # every daemon confirmed it stopped
    wait_until_gone(tag)  # the workload and the log follower ended with their channels
    run_dir = Path(status["run_dir"])
    graph = {g["label"] for g in json.loads((run_dir / "graph.json").read_text())}
    assert {"tcp app1:0 -> db:5432", "tcp db:5432 -> app1:0", "tcp client:0 -> web:80",
            "tcp web:0 -> app1:8000"} <= graph
    if concurrent == 1:  # the run's capture, linked again, as OpenTelemetry traces
        with otlp_receiver() as receiver:
            sent = subprocess.run([LINKGRAD, "export", str(run_dir), "--otlp", receiver.url],
                                  capture_output=True, text=True, timeout=180, check=False)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.startswith(f"Sent {len(receiver.traces())} traces"), sent.stdout
        _check_traces(receiver.traces())
    links = json.loads((run_dir / "gradients.json").read_text())["links"]
    # in order of messages, which are nearly equal both ways: compare as a set
    assert {lk["link"]["label"] for lk in links} == {"tcp app1:0 -> db:5432",
                                                     "tcp db:5432 -> app1:0"}
    assert {lk["concurrent_with"] for lk in links} == {concurrent - 1}
    for link in links:
        # the actual delay, measured: at least the 12 ms asked, plus a busy machine's
        # wake-ups (12.57 with two injectors in one CI run), and not a unit off
        assert 11.5 <= link["record"]["magnitude_ms"] < 15, link["record"]
        for name, truth in EXPECTED.items():
            t = link["transactions"][name]
            lo, hi = t["ci95"]
            # the ideal crossing count ignores second-order effects of the delay itself (more
            # concurrent requests, connections held longer): allow 5% of it, and 0.03 (0.36 ms
            # at 12 ms), beyond the interval. Seen: async -0.03 [-0.052, -0.007] measured
            # concurrently on db->app1; the thesis reports 0.07-0.16 at gradient 0.
            slack = 0.05 * truth + 0.03
            assert lo - slack <= truth <= hi + slack, (link["link"]["label"], name, t)
    assert (run_dir / "weblog.log").stat().st_size > 0  # raw samples for offline recomputing
    # ... and `linkgrad gradient` recomputes every link from them and the injection records,
    # a concurrent partner's wave fitted jointly, exactly as the run did
    for link in links:
        assert len(link["concurrent_injections"]) == concurrent - 1
        argv = [LINKGRAD, *link["recompute_argv"][1:]]
        offline = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True,
                                 cwd=run_dir)
        again = json.loads(offline.stdout)["transactions"]
        for name in EXPECTED:
            assert again[name]["gradient"] == pytest.approx(
                link["transactions"][name]["gradient"], abs=0.01), (link["link"]["label"], name)
    # SNAP profiled every host all along; each measured link has its classes by phase, and
    # the app<->db connections moved data in both phases
    snap = json.loads((run_dir / "snap.json").read_text())
    assert set(snap["hosts"]) >= {"app1", "db", "web"}
    assert {r["host"] for r in snap["reports"]} >= {"app1", "db"}
    for link in links:
        assert set(link["snap"]) == {"passive", "measurement"}, link["snap"]
        assert sum(link["snap"]["measurement"].values()) > 0, link["snap"]
    # every host probed all along, fast on app1 and db while their links were injected; each
    # link carries every host's load meanwhile, and the hosts of the link moved bytes
    hosts = json.loads((run_dir / "hosts.json").read_text())
    assert set(hosts["hosts"]) >= {"app1", "db", "web", "client"}
    assert hosts["phases"][0]["context"] == "passive"
    assert all(p["fast"] == ["app1", "db"] for p in hosts["phases"][1:]), hosts["phases"]
    for name, series in hosts["hosts"].items():
        assert {r["context"] for r in series["reports"]} == {
            p["context"] for p in hosts["phases"]}, name
    for link in links:
        loads = link["hosts"]
        assert set(loads) >= {"app1", "db", "web"}, loads
        assert all(loads[h]["rx_bytes_per_s"] > 0 for h in ("app1", "db")), loads
    if concurrent > 1:
        return
    # WAP5's paths from the passive phase: each transaction's dominant pattern crosses
    # app1->db as often as its gradient says (the fire-and-forget call is off the critical
    # path), every request found in the web log; a connection opened while tracing adds its
    # SYN to its first request's path (nginx opens one to app1 now and then: +1/268 seen)
    paths = json.loads((run_dir / "paths.json").read_text())
    assert paths["matched_requests"] >= 0.9 * paths["client_requests"] > 0, paths["problems"]
    for name, truth in EXPECTED.items():
        top = paths["transactions"][name][0]
        assert top["crossings"].get("app1->db", 0) == pytest.approx(truth, abs=0.05), (
            name, top)
        assert top["crossings"].get("web->app1") == pytest.approx(1, abs=0.05), (name, top)
    assert (run_dir / "paths-trace.jsonl").stat().st_size > 0  # for `linkgrad paths --trace`
    # the run ends with the answer: each transaction's gradient on app1<->db beside what its
    # paths count there and a verdict, on the terminal with a next step, and in explain.json.
    # The paths' count is the mean over all patterns: a busy CI machine mislinks some
    # requests (ViewItem 1.69 of 2 seen), which benchmarks/paths_accuracy.py measures; here
    # each count is near the design and every verdict that is not agree names a cause
    explained = json.loads((run_dir / "explain.json").read_text())
    rows = {(r["transaction"], r["pair"]): r for r in explained["rows"]}
    pairs = ("app1->db", "db->app1")
    for name, truth in EXPECTED.items():
        for pair in pairs:
            r = rows[(name, pair)]
            assert r["crossings"] == pytest.approx(truth, abs=0.25 * truth + 0.1), r
            assert r["verdict"] in ("agree", "above", "below"), r
            assert (r["verdict"] == "agree") == (r["cause"] is None), r
    verdicts = [rows[(name, pair)]["verdict"] for name in EXPECTED for pair in pairs]
    assert verdicts.count("agree") >= len(verdicts) // 2, verdicts
    assert rows[("ViewItem", "app1->web")]["verdict"] == "passive-only"  # not injected
    assert "  link " in done.stderr
    assert "\nnext: " in done.stderr
    page = (run_dir / "report.html").read_text()
    assert "SNAP: TCP classes per link" in page
    # series, the hosts' figure (the graph is one SVG, with every link of graph.json)
    assert page.count("data:image/png;base64,") == len(links) + 1
    assert page.count("class='checked app-graph'") == 1
    assert "tcp app1:0 -&gt; db:5432" in page
    assert_no_rules(tag)


def test_profile_classifies_the_testbeds_links_without_injecting(testbed, tag):
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(testbed)}
    experiment = _experiment(testbed, tag, "profiled")
    saved = testbed / "profiled-snap.json"
    done = subprocess.run([LINKGRAD, "profile", str(experiment), "--duration", "6",
                           "--report-interval", "2", "--output", str(saved), "--json"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    # the testbed's hosts share this machine's kernel, and SNAP's budget with it
    assert "hosts share one kernel, so each polls within" in " ".join(done.stderr.split())
    summary = json.loads(done.stdout)
    links = {lk["link"]: lk for lk in summary["links"]}
    for label in ("app1:0 -> db:5432", "db:5432 -> app1:0", "client:0 -> web:80"):
        assert label in links, sorted(links)
        assert links[label]["connections"] >= 1
        assert sum(links[label]["seconds"].values()) > 0
    assert summary["reports"] >= len(summary["hosts"])  # a last report from each host at least
    assert json.loads(saved.read_text())["reports"]
    said = subprocess.run([LINKGRAD, "profile", str(experiment), "--duration", "2"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert said.returncode == 0, said.stderr
    lines = said.stdout.splitlines()  # the answer for a person: a summary first, a next step
    assert lines[0].startswith(f"SNAP over {len(summary['hosts'])} host(s) for 2 s: ")
    assert lines[-1].startswith(f"next: linkgrad run {experiment}")
    wait_until_gone(tag)  # the sniffers ended with their channels
    assert_no_rules(tag)


def test_paths_captures_and_names_each_transaction_s_path(testbed, tag):
    """`linkgrad paths` alone: every host's messages while the workload runs, the requests
    the web log saw grouped by transaction, each one's likeliest path crossing app1->db
    as often as its gradient says."""
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(testbed)}
    experiment = _experiment(testbed, tag, "paths-only")
    done = subprocess.run([LINKGRAD, "paths", str(experiment), "--duration", "8", "--json"],
                          capture_output=True, text=True, timeout=180, env=env, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["transactions"]) == set(EXPECTED), sorted(result["transactions"])
    for name, crossings in EXPECTED.items():
        top = result["transactions"][name][0]
        assert top["crossings"].get("app1->db", 0.0) == pytest.approx(crossings), (name, top)
        assert top["count"] >= 10, (name, top)
        assert result["transaction_requests"][name] >= top["count"]
    with otlp_receiver() as receiver:  # and every request as an OpenTelemetry trace
        plain = subprocess.run([LINKGRAD, "paths", str(experiment), "--duration", "8",
                                "--otlp", receiver.url],
                               capture_output=True, text=True, timeout=180, env=env,
                               check=False)
    assert plain.returncode == 0, plain.stderr
    assert "ViewItem:" in plain.stdout
    assert "its likeliest path" in plain.stdout
    assert "\nSent " in plain.stdout
    _check_traces(receiver.traces())
    wait_until_gone(tag)
    assert_no_rules(tag)


def _tcpdump_while_tracing(root: Path, tag: str, hosts: tuple[str, ...], experiment: Path
                           ) -> tuple[list[HostTrace], list[HostTrace], dict[str, Path]]:
    """tcpdump -i any in each host's namespace while `linkgrad paths` traces the same traffic
    for 8 s: the sniffers' trace, the captures' (within the sniffers' window), the files."""
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    pcaps = {h: root / f"{h}.pcap" for h in hosts}
    dumps = [subprocess.Popen(["ip", "netns", "exec", f"lgtb-{tag}-{h}", "tcpdump", "-i", "any",
                               "-U", "-Z", "root", "-w", str(p), "not", "port", "22"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for h, p in pcaps.items()]
    time.sleep(1.0)
    trace = root / f"{experiment.stem}.jsonl"
    done = subprocess.run([LINKGRAD, "paths", str(experiment), "--duration", "8",
                           "--output-trace", str(trace), "--json"],
                          capture_output=True, text=True, timeout=180, env=env, check=False)
    time.sleep(0.5)
    for d in dumps:
        d.send_signal(signal.SIGINT)
        d.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    sniffed = [h for h in read_trace(trace) if h.name in hosts]
    start = min(r.first_s for h in sniffed for r in h.records)
    end = max(r.last_s for h in sniffed for r in h.records)
    return sniffed, within([read_pcap(h, p).trace for h, p in pcaps.items()], start, end), pcaps


def test_tcpdump_captures_give_the_trees_the_sniffer_gives(testbed, tag):
    """`paths --pcap`: tcpdump -i any in every host's namespace while the sniffers trace the
    same traffic; the captures' requests fall in the sniffer's patterns."""
    sniffed, captured, pcaps = _tcpdump_while_tracing(
        testbed, tag, ("client", "web", "app1", "db"), _experiment(testbed, tag, "pcapped"))
    agree = tree_agreement(as_captured(sniffed), captured)
    assert abs(agree.messages[0] - agree.messages[1]) <= 0.02 * agree.messages[0], agree
    assert agree.fraction >= 0.95, agree
    read = subprocess.run([LINKGRAD, "paths", *(f"--pcap={h}={p}" for h, p in pcaps.items())],
                          capture_output=True, text=True, timeout=180, check=False)
    assert read.returncode == 0, read.stderr
    assert "web: " in read.stderr
    assert "CLIENT->web:80" in read.stdout


# nginx and the app server on one host: nginx asks the app over loopback
COLOCATED = Topology(name="colo", hosts=(HostSpec(name="client", roles=("client",)),
                                         HostSpec(name="web", roles=("web", "app")),
                                         HostSpec(name="db", roles=("db", "cache"))))


def test_a_capture_of_a_host_serving_two_tiers_gives_the_sniffer_s_trees():
    """With nginx and the app on one host a capture sees that host at both ends of their
    connection; the app's calls nest in nginx's call to it, as the testbed makes them (the
    sniffer's trace stripped of its processes had the same fault before: agreeing with it
    alone would not show it)."""
    tag = unique_tag("c")
    with private_testbed(tag, COLOCATED) as (_, root):
        experiment = _experiment(root, tag, "colocated")
        experiment.write_text(experiment.read_text().replace("app1->db", "web->db")
                              .replace("db->app1", "db->web"))
        sniffed, captured, _ = _tcpdump_while_tracing(root, tag, ("client", "web", "db"),
                                                      experiment)
    agree = tree_agreement(as_captured(sniffed), captured)
    assert agree.fraction >= 0.95, agree
    patterns = paths_from_hosts(captured, "context", 2.0, None).patterns
    nested = 0
    for p in patterns:
        labels = [h.label for h in p.hops]
        if labels[:2] != ["CLIENT->web:80", "web->web:8000"]:
            continue
        for i, h in enumerate(p.hops):  # every database or cache call is under the app's
            if h.label.startswith("web->db:"):
                while i > 1:
                    i = p.hops[i].parent
                assert i == 1, labels
        assert "web->web" not in p.crossings
        nested += p.count
    assert nested >= 0.9 * sum(p.count for p in patterns)


def _check_traces(traces: dict[str, list[ReceivedSpan]]) -> None:
    """The testbed's requests as traces: each transaction's usual one calls the database as
    often as its truth says (the async page's call is fire-and-forget, off its path)."""
    calls: dict[str, Counter[int]] = {}
    for spans in traces.values():
        check_trace_shape(spans, next(s.service for s in spans if s.parent_id is None))
        root = next(s for s in spans if s.parent_id is None)
        assert root.service.startswith("web/"), root
        queries = sum(s.kind == "client" and s.service.startswith("app1/")
                      and s.attributes["peer.service"].startswith("db/") for s in spans)
        calls.setdefault(root.name, Counter())[queries] += 1
    assert set(EXPECTED) <= set(calls), sorted(calls)
    named = sum(sum(c.values()) for name, c in calls.items() if name in EXPECTED)
    assert named >= 0.9 * len(traces), calls
    for name, crossings in EXPECTED.items():
        if name != "async":
            assert calls[name].most_common(1)[0][0] == crossings, (name, calls[name])


def test_sigterm_stops_every_injection_and_keeps_the_run(testbed, tag):
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(testbed)}
    proc = subprocess.Popen([LINKGRAD, "run", str(_experiment(testbed, tag, "stopped")), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    delaying = False
    while not delaying and time.monotonic() < deadline:
        out = "".join(sh("ip", "netns", "exec", ns, "iptables", "-S").stdout
                      for ns in (f"lgtb-{tag}-app1", f"lgtb-{tag}-db"))
        delaying = "NFQUEUE" in out
        time.sleep(0.2)
    assert delaying, "the run never started injecting"
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 10
    status = json.loads(out)
    assert status["status"] == "interrupted"
    assert (Path(status["run_dir"]) / "graph.json").exists()
    assert_no_rules(tag)


def test_an_interrupted_run_resumes_without_redoing_finished_links(testbed, tag):
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(testbed)}
    experiment = _experiment(testbed, tag, "resumed")
    proc = subprocess.Popen([LINKGRAD, "run", str(experiment), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    runs = testbed / "runs"
    deadline = time.monotonic() + 300
    first = None
    while first is None and time.monotonic() < deadline:  # the first link is finished
        found = list(runs.glob("resumed-*/gradients.json"))
        first = json.loads(found[0].read_text())["links"] if found else None
        time.sleep(0.5)
    assert first is not None, "no link finished"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    run_dir = Path(json.loads(out)["run_dir"])
    assert json.loads(out)["status"] == "interrupted"
    done = subprocess.run([LINKGRAD, "run", str(experiment), "--resume", str(run_dir), "--json"],
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, done.stderr
    links = json.loads((run_dir / "gradients.json").read_text())["links"]
    assert len(links) == 2
    # kept as it was, not measured again; SNAP's classes and the hosts' load added when its
    # session ended, and kept through the resumed one (snap.json and hosts.json hold both
    # sessions' reports)
    assert {k: v for k, v in links[0].items() if k not in ("snap", "hosts")} == first[0]
    assert links[0]["hosts"]["db"]["seconds"] > 0, links[0]["hosts"]
    assert sum(links[0]["snap"]["measurement"].values()) > 0, links[0]["snap"]
    assert {lk["link"]["label"] for lk in links} == {"tcp app1:0 -> db:5432",
                                                     "tcp db:5432 -> app1:0"}
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    assert_no_rules(tag)


def test_a_delay_that_makes_clients_give_up_aborts_the_run(testbed, tag):
    """Clients give up after 150 ms; 100 ms on app1->db adds 200 ms to ViewItem, so nginx logs
    499s while the wave is on: the error limit aborts the run and no rule is left."""
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(testbed)}
    path = testbed / "errors.yaml"
    path.write_text(f"""
name: errors
testbed: {tag}
workload: {{host: client, rate_per_s: 60, timeout_s: 0.15}}
transactions: {{ViewItem: ^/rubis/ViewItem, PutBidAuth: ^/rubis/PutBidAuth}}
parameters: {{training_s: 20, cycles: 6, period_s: 6, magnitude_ms: 100, adaptive: false,
              error_rate_limit: 0.05, include: ['app1->db']}}
output: {testbed / "runs"}
""")
    done = subprocess.run([LINKGRAD, "run", str(path), "--json"], capture_output=True, text=True,
                          timeout=300, env=env, check=False)
    assert done.returncode == 1, done.stderr
    status = json.loads(done.stdout)
    assert status["status"] == "aborted"
    assert "of requests failed (5xx, 499, 408)" in status["reason"]
    assert "app1:0 -> db:5432" in status["reason"]
    plan = json.loads((Path(status["run_dir"]) / "plan.json").read_text())
    assert plan["training_failed_fraction"] < 0.01
    assert_no_rules(tag)


def _explicit(root: Path, tag: str, name: str, extra_host: dict) -> Path:
    """The testbed's hosts spelled out (its ssh_config and known_hosts), plus `extra_host`."""
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(root)}
    info = json.loads(subprocess.run([LINKGRAD, "testbed", "status", "--tag", tag, "--json"],
                                     capture_output=True, text=True, env=env, check=True,
                                     timeout=60).stdout)
    hosts = [{"name": h["name"]} for h in info["hosts"]] + [extra_host]
    path = root / f"{name}.yaml"
    path.write_text(json.dumps({
        "name": name, "hosts": hosts,
        "ssh": {"config": info["ssh_config"], "known_hosts": info["known_hosts"],
                "python": str(Path(LINKGRAD).parent / "python"), "connect_timeout_s": 2},
        "web_log": {"host": info["web_log"]["host"], "path": info["web_log"]["path"]},
        "transactions": {"all": "^/"}}))
    return path


@pytest.mark.parametrize("optional", [False, True], ids=["required", "optional"])
def test_a_host_that_cannot_be_reached_is_named_and_left_out_only_if_optional(
        testbed, tag, optional):
    """A host of the experiment that nothing answers at (an address of the testbed's subnet no
    host has): required, `profile` stops before any sniffer starts, naming it; optional, the
    other hosts are profiled and it is said to be left out."""
    env = {**os.environ, "LINKGRAD_TESTBED_ROOT": str(testbed)}
    ghost = {"name": "ghost", "address": "192.0.2.1", "optional": optional}  # TEST-NET-1
    experiment = _explicit(testbed, tag, f"ghost-{optional}", ghost)
    done = subprocess.run([LINKGRAD, "profile", str(experiment), "--duration", "2", "--json"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    if optional:
        assert done.returncode == 0, done.stderr
        assert "ghost left out (optional): could not connect: " in done.stderr
        assert "ghost" not in json.loads(done.stdout)["hosts"]
    else:
        assert done.returncode == 1, done.stderr
        assert "connect: 1 of 7 host(s) failed: ghost: " in done.stderr, done.stderr
        assert "sniffer" not in done.stderr
    wait_until_gone(tag)  # no sniffer left on any host
    assert_no_rules(tag)

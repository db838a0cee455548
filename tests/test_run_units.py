"""Pure parts of the run: concurrent waves, the graph, limits, jobs."""

import re

import numpy as np
import pytest

from coordinator.live.measure import group_waves
from linkgrad.graph import build_graph, select
from linkgrad.protocol.injector import LinkSpec
from linkgrad.protocol.sniffer import Report
from linkgrad.spectral.wave_plan import WavePlan


@pytest.mark.parametrize("cycles", [4, 6, 20])
@pytest.mark.parametrize("count", range(1, 9))
def test_concurrent_waves_share_one_window_and_no_fundamental_is_anothers_harmonic(count,
                                                                                 cycles):
    plan = WavePlan(period_s=4.0, cycles=cycles, magnitude_s=0.01, n_bins=32)
    waves = group_waves(plan, count, start_s=100.0, magnitudes=[0.01] * count)
    assert waves[0].period_s == 4.0  # the first link at the plan's period
    ends = {round(w.end_s, 9) for w in waves}
    assert len(ends) == 1  # one window
    window = waves[0].duration_s
    assert window >= cycles * 4.0  # each link gets at least what it would alone
    counts = [w.cycles for w in waves]
    assert len(set(counts)) == count
    if count > 1:
        assert min(counts) >= 2
    # each wave's fundamental, on the window's own frequency grid, carries none of the other
    # waves' lines (a square wave has lines at odd multiples of its fundamental only)
    t = np.arange(100.0, 100.0 + window, 0.004)
    for i, wi in enumerate(waves):
        spectrum = np.abs(np.fft.rfft(wi.is_on(t).astype(float) - 0.5)) / len(t)
        for j, wj in enumerate(waves):
            if i != j:
                assert spectrum[wj.cycles] < 1e-3 * spectrum[wi.cycles], (wi, wj)


def test_eight_links_fit_in_eleven_periods_where_octaves_would_need_256():
    plan = WavePlan(period_s=8.0, cycles=4, magnitude_s=0.01, n_bins=32)
    assert [w.cycles for w in group_waves(plan, 8, 0.0, [0.01] * 8)] == list(range(11, 3, -1))
    assert group_waves(plan, 8, 0.0, [0.01] * 8)[0].duration_s == 88.0
    assert [w.cycles for w in group_waves(plan, 4, 0.0, [0.01] * 4)] == [5, 4, 3, 2]
    assert [w.cycles for w in group_waves(plan, 2, 0.0, [0.01] * 2)] == [4, 3]


def test_graph_counts_each_link_once_from_its_sender():
    hosts = {"10.0.0.3": "app1", "10.0.0.5": "db", "10.0.0.254": "coordinator"}
    app1 = {"links": [
        {"proto": "tcp", "messages": 40,
         "src": {"addr": "10.0.0.3", "port": 0, "pid": 7, "process": "python"},
         "dst": {"addr": "10.0.0.5", "port": 5432, "pid": None, "process": None}},
        {"proto": "tcp", "messages": 39,
         "src": {"addr": "10.0.0.5", "port": 5432, "pid": None, "process": None},
         "dst": {"addr": "10.0.0.3", "port": 0, "pid": 7, "process": "python"}},
        {"proto": "tcp", "messages": 500,  # our own SSH: never a link
         "src": {"addr": "10.0.0.3", "port": 22, "pid": 9, "process": "sshd"},
         "dst": {"addr": "10.0.0.254", "port": 0, "pid": None, "process": None}}]}
    db = {"links": [
        {"proto": "tcp", "messages": 39,
         "src": {"addr": "10.0.0.5", "port": 5432, "pid": 3, "process": "postgres"},
         "dst": {"addr": "10.0.0.3", "port": 0, "pid": None, "process": None}}]}
    graph = build_graph([("app1", Report(from_s=0, to_s=1, **app1)),
                         ("db", Report(from_s=0, to_s=1, **db))], hosts, threshold=10)
    assert [(g.label, g.messages, g.src_process, g.dst_process) for g in graph] == [
        ("tcp app1:0 -> db:5432", 40, "python", "postgres"),
        ("tcp db:5432 -> app1:0", 39, "postgres", "python")]
    assert graph[1].injector_link() == LinkSpec(proto="tcp", src="10.0.0.5:5432",
                                                dst="10.0.0.3")
    assert [g.label for g in select(graph, ["app1->"], [])] == ["tcp app1:0 -> db:5432"]
    assert select(graph, [], [r"db:5432 ->"]) == graph[:1]


def _links(*pairs: str) -> list:
    from linkgrad.graph import GraphLink

    out = []
    for pair in pairs:
        (src, sp), (dst, dp) = (side.split(":") for side in pair.split("->"))
        out.append(GraphLink("tcp", src, "10.0.0.1", int(sp), dst, "10.0.0.2", int(dp), 100))
    return out


def test_host_selectors_match_exact_host_names_and_regexes_only_when_asked():
    from linkgrad.graph import parse_selector

    graph = _links("app1:0->db:5432", "app1:0->db2:5432", "db:5432->app1:0",
                   "app1:0->webcache:11211", "db:0->web:80", "app1:0->web:80")
    labels = [g.hosts for g in graph]

    def chosen(include: list[str], exclude: tuple[str, ...] = ()) -> list[str]:
        return [g.hosts for g in select(graph, include, exclude)]

    assert chosen(["app1->db"]) == ["app1->db"]  # not app1->db2
    assert chosen(["^app1->db$", "db->app1"]) == ["app1->db", "db->app1"]  # the old anchors
    assert chosen(["->web"]) == chosen(["*->web"]) == ["db->web", "app1->web"]  # not webcache
    assert chosen([], ["->web"]) == [h for h in labels if not h.endswith("->web")]
    assert chosen(["app1->"]) == chosen(["app1->*"]) == [h for h in labels if h[:4] == "app1"]
    assert chosen(["db:5432 ->"]) == chosen(["db:5432->*"]) == ["db->app1"]  # the old label form
    assert chosen(["*->*:80"]) == ["db->web", "app1->web"]
    assert chosen(["re:->web"]) == ["app1->webcache", "db->web", "app1->web"]  # as asked
    assert chosen(["re:^app1->db"]) == ["app1->db", "app1->db2"]
    assert parse_selector("->web").host_names == ("web",)
    assert parse_selector("re:db").host_names == ()  # a regex names no host
    for bad, why in (("app[12]->db", "not a link selector"), ("app1", "not a link selector"),
                     ("a->b->c", "not a link selector"), ("re:(", "bad regex after 're:'"),
                     ("a:70000->b", "above 65535")):
        with pytest.raises(ValueError, match=re.escape(why)):
            parse_selector(bad)


def test_explain_selection_says_what_each_selector_matched():
    from linkgrad.graph import explain_selection

    graph = _links("app1:0->db:5432", "db:5432->app1:0", "db:0->web:80", "app1:0->web:80")
    assert explain_selection(graph, ["app1->db", "app2->db"], ["->web"]) == [
        "include 'app1->db': 1 link: tcp app1:0 -> db:5432",
        "include 'app2->db': matches no link of the graph",
        "exclude '->web' (*->web): 2 links: tcp db:0 -> web:80, tcp app1:0 -> web:80",
        "measuring 1 of 4 links"]
    assert explain_selection(graph, [], ["re:db:5432 ->"]) == [
        "include: none given, so every link",
        "exclude 're:db:5432 ->': 1 link: tcp db:5432 -> app1:0",
        "measuring 3 of 4 links"]


def test_the_limits_judge_requests_by_start_once_all_of_them_can_have_been_logged():
    """Servers log a request when it ends: while responses slow down, fewer lines arrive
    although requests keep starting. The judged window ends a lag ago (the slowest response
    lately, at least 10 s), so a slowdown is no throughput drop; requests that never end are."""
    from linkgrad.watch import judged_window

    now, rate = 1000.0, 12.0
    starts = np.arange(900.0, now, 1 / rate)
    slow = np.where(starts > 995.0, 4.0, 0.09)  # a 4 s slowdown began 5 s ago
    ended = starts + slow <= now  # what the log holds now
    log = _log(starts[ended], slow[ended])
    lines_lately = np.sum(starts[ended] + slow[ended] > now - 10.0) / 10.0
    started_lately = np.sum(starts[ended] > now - 10.0) / 10.0
    assert lines_lately < 0.65 * rate  # either naive count: a false drop beyond 30%
    assert started_lately < 0.65 * rate
    judged, lag = judged_window(log, now)
    assert lag == pytest.approx(10.0)  # the slowest logged (4 s) + flush is under 10 s
    assert len(judged) / 10.0 == pytest.approx(rate, rel=0.02)  # [980, 990): all logged
    slower = _log(starts[ended], np.where(slow[ended] > 1, 12.0, 0.09))
    assert judged_window(slower, now)[1] == pytest.approx(13.0)  # 12 s + 1 s flush
    hung = _log(starts[starts < 960.0], np.full(int(np.sum(starts < 960.0)), 0.09))
    judged, _ = judged_window(hung, now)  # nothing started after 960 has ended
    assert len(judged) / 10.0 < 0.5 * rate


def test_log_follower_judges_the_requests_it_was_sent():
    from coordinator.live.logfollow import LogFollower
    from tests.fakes.remote import FakeClock, QueueChannel

    clock, channel = FakeClock(start_s=1000.0), QueueChannel()
    follower = LogFollower(channel, "web:/var/log/access.log", "csv", None, clock)
    for i in range(300):  # one request a second, each logged as it ends 0.1 s later
        clock.now = 700.0 + i + 0.1
        channel.push(f"{700.0 + i},100,/x")
        channel.drained()
    clock.now = 1000.0
    judged = follower.judged()  # started in [980, 990)
    assert list(judged.start_s) == [float(t) for t in range(980, 990)]
    follower.close()


def _log(starts, responses):
    from linkgrad.weblog.model import RequestLog

    url = np.empty(len(starts), dtype=object)
    url[:] = "/x"
    return RequestLog(np.asarray(starts, float), np.asarray(responses, float), url)


def test_session_close_tries_every_host_and_reports_each_failure():
    from coordinator.live.session import Session

    closed = []

    class Daemon:
        def __init__(self, name, fails):
            self.what, self.fails = name, fails

        def close(self):
            closed.append(self.what)
            if self.fails:
                raise RuntimeError("channel lost")

    session = Session(experiment=None)  # type: ignore[arg-type]  # close() never reads it
    session.injectors = {"app1": Daemon("injector on app1", True),
                         "db": Daemon("injector on db", False)}
    session.sniffers = {"db": Daemon("sniffer on db", True)}
    problems = session.close()
    assert closed == ["injector on app1", "injector on db", "sniffer on db"]  # injectors first
    assert problems == ["injector on app1: channel lost", "sniffer on db: channel lost"]


def _requests(status: list[int]):
    from linkgrad.weblog.model import RequestLog

    n = len(status)
    url = np.empty(n, dtype=object)
    url[:] = ["/x"] * n
    return RequestLog(np.arange(n, dtype=float), np.full(n, 0.01), url,
                      status=np.array(status, dtype=np.int16))


def test_limits_abort_on_a_throughput_drop_or_an_error_rise_against_training():
    from coordinator.config.experiment import Parameters
    from linkgrad.watch import Aborted, Baseline, check_limits, failed_fraction

    p = Parameters(throughput_drop_limit=0.3, error_rate_limit=0.05)
    base = Baseline(end_s=0.0, rate_per_s=10.0, mean_response_ms=10.0, failed_fraction=0.02)
    fine = _requests([200] * 94 + [500] * 6)  # 100 in the 10 s judged: 6%, within 2% + 5%
    check_limits(fine, base, p, "a->b")
    with pytest.raises(Aborted, match="throughput fell below 70%"):
        check_limits(_requests([200] * 69), base, p, "a->b")
    with pytest.raises(Aborted, match=r"8.0% of requests failed .*\+5%\) while delaying a->b"):
        check_limits(_requests([200] * 92 + [499] * 8), base, p, "a->b")
    slow = Baseline(0.0, 1.9, 10.0, 0.02)
    check_limits(_requests([200] * 10 + [502] * 9), slow, p, "a->b")  # too few to judge
    check_limits(_requests([404] * 100), base, p, "a->b")  # the clients' own errors
    no_status = Baseline(0.0, 10.0, 10.0, None)
    check_limits(_requests([500] * 100), no_status, p, "a->b")  # nothing to compare to
    log = _requests([200, 500, 200, 200])  # starts 0, 1, 2, 3
    assert failed_fraction(log, 1.0, 3.0) == pytest.approx(0.5)


def test_a_training_that_already_fails_is_said_before_any_delay():
    """A 50-service testbed on two cores failed 58% of its requests in training, unsaid."""
    from coordinator.config.experiment import Parameters
    from linkgrad.watch import Baseline, failing_before_delay

    p = Parameters(error_rate_limit=0.05)
    assert failing_before_delay(Baseline(0.0, 10.0, 10.0, 0.02), p) is None
    assert failing_before_delay(Baseline(0.0, 10.0, 10.0, None), p) is None
    said = failing_before_delay(Baseline(0.0, 2.8, 12_000.0, 0.58), p)
    assert said is not None
    assert said.startswith("58% of training's requests failed")


def test_an_error_limit_without_a_status_in_the_log_format_is_bad_input(tmp_path):
    from coordinator.config.experiment_file import load_experiment
    from linkgrad.errors import InputError

    (tmp_path / "ssh_config").write_text("Host a\n  HostName 192.0.2.1\n")
    path = tmp_path / "x.yaml"
    path.write_text("name: x\nhosts: [{name: a}]\nssh: {config: ssh_config}\n"
                    "web_log: {host: a, path: /l,"
                    " log_format: '$msec $request_time \"$request\"'}\n"
                    "transactions: {t: ^/}\nparameters:\n  error_rate_limit: 0.1\n")
    with pytest.raises(InputError,
                       match=r"x.yaml:7: field 'parameters.error_rate_limit' .*\$status"):
        load_experiment(path)
    path.write_text(path.read_text().replace("  error_rate_limit: 0.1\n", "  k: 8\n"))
    assert load_experiment(path).parameters.error_rate_limit == 0.05  # default: watched if it can


def test_jobs_measure_every_link_at_every_fixed_delay_and_skip_what_is_done():
    from coordinator.config.experiment import Parameters
    from coordinator.config.run_records import MeasurementKey
    from coordinator.live.measure import jobs
    from linkgrad.graph import GraphLink

    links = [GraphLink("tcp", a, "10.0.0.1", 0, b, "10.0.0.2", 80, 100)
             for a, b in (("x", "y"), ("y", "x"), ("x", "z"))]
    p = Parameters(concurrent=2, magnitudes_ms=(20.0, 5.0))
    done = {MeasurementKey(links[0].label, 5.0): {}}
    planned = [([link.label for link in group], fixed) for group, fixed in jobs(links, done, p)]
    assert planned == [([links[1].label, links[2].label], 5.0),
                       ([links[0].label, links[1].label], 20.0), ([links[2].label], 20.0)]
    assert [f for _, f in jobs(links, {}, Parameters())] == [None, None, None]  # planned delay
    with pytest.raises(ValueError, match=r"two or more different delays of at least 0\.001 ms"):
        Parameters(magnitudes_ms=(5.0, 5.0))
    with pytest.raises(ValueError, match="above max_delay_ms"):
        Parameters(magnitudes_ms=(5.0, 150.0))


def test_hosts_by_address_port_user_and_key_without_an_ssh_config(tmp_path):
    from coordinator.config.experiment_file import load_experiment
    from coordinator.live.ssh import endpoint_for
    from linkgrad.errors import InputError

    path = tmp_path / "x.yaml"
    body = ("name: x\nhosts:\n  - {name: web, address: 192.0.2.10, port: 2222, user: ops,"
            " key: keys/id}\n  - {name: db, address: 192.0.2.11}\nssh: {known_hosts: kh}\n"
            "web_log: {host: web, path: /l}\ntransactions: {t: ^/}\n")
    path.write_text(body)
    e = load_experiment(path)
    web = endpoint_for(e.hosts[0], e.ssh)
    assert (web.hostname, web.port, web.user, web.identity_files) == (
        "192.0.2.10", 2222, "ops", (str(tmp_path / "keys/id"),))
    db = endpoint_for(e.hosts[1], e.ssh)
    assert (db.port, db.user, db.known_hosts) == (22, "root", tmp_path / "kh")
    path.write_text(body.replace("ssh: {known_hosts: kh}", "ssh: {python: python3}"))
    with pytest.raises(InputError, match=r"give ssh\.known_hosts"):
        load_experiment(path)
    path.write_text(body.replace(", address: 192.0.2.11", ""))
    with pytest.raises(InputError, match="every host needs an address: db"):
        load_experiment(path)
    # with an ssh_config, a host's own fields override its entry
    (tmp_path / "ssh_config").write_text("Host web\n  HostName 198.51.100.1\n  Port 2200\n"
                                         "  User admin\n")
    path.write_text("name: x\nhosts: [{name: web, user: ops}]\nssh: {config: ssh_config,"
                    " known_hosts: kh}\nweb_log: {host: web, path: /l}\ntransactions: {t: ^/}\n")
    e = load_experiment(path)
    web = endpoint_for(e.hosts[0], e.ssh)
    assert (web.hostname, web.port, web.user) == ("198.51.100.1", 2200, "ops")


def test_the_application_is_the_links_between_its_processes_or_ports():
    from linkgrad.graph import GraphLink, application

    def link(src, sp, sproc, dst, dp, dproc):
        return GraphLink("tcp", src, "10.0.0.1", sp, dst, "10.0.0.2", dp, 50, sproc, dproc)

    web_app = link("web", 0, "nginx", "app1", 8000, "python")
    app_db = link("app1", 0, "python", "db", 5432, "postgres")
    agent_db = link("db", 0, "collectd", "db", 5432, "postgres")  # a monitoring agent
    graph = [web_app, app_db, agent_db]
    assert application(graph, [], []) == graph  # nothing listed: everything
    assert application(graph, ["nginx", "python", "postgres"], []) == [web_app, app_db]
    assert application(graph, ["nginx", "python"], [5432]) == [web_app, app_db]
    assert application(graph, [], [8000, 5432]) == []  # an ephemeral end needs its process


def test_gradients_at_two_delays_that_disagree_beyond_their_intervals_are_noted():
    from linkgrad.spectral.result import GradientResult, delay_disagreement

    small = GradientResult(gradient=36.0, ci95=(34.0, 38.0))
    large = GradientResult(gradient=30.0, ci95=(29.0, 31.0))
    note = delay_disagreement(small, 1.0, large, 10.0)
    assert note == "not linear: 36 ± 2 at 1.00 ms against 30 ± 1 at 10.00 ms"
    near = GradientResult(gradient=35.0, ci95=(33.0, 37.0))
    assert delay_disagreement(small, 1.0, near, 10.0) is None
    assert delay_disagreement(small, 1.0, large, 1.2) is None  # about the same delay
    assert delay_disagreement(GradientResult(), 1.0, large, 10.0) is None


def test_a_closed_loop_workload_runs_the_load_generator_with_clients():
    from coordinator.config.experiment import Experiment, Workload
    from coordinator.live.session import Session

    base = {"name": "x", "hosts": [{"name": "c", "address": "192.0.2.1"}],
            "ssh": {"known_hosts": "kh"}, "web_log": {"host": "c", "path": "/l"},
            "transactions": {"t": "^/t"}, "frontend_url": "http://192.0.2.1"}
    closed = Experiment.model_validate({**base, "workload": {"host": "c", "clients": 20,
                                                             "think_s": 0.2}})
    argv = Session(closed)._workload_argv()
    assert argv[argv.index("--clients") + 1] == "20"
    assert argv[argv.index("--think-s") + 1] == "0.2"
    assert "--rate" not in argv
    for bad in ({"host": "c"}, {"host": "c", "clients": 5, "rate_per_s": 3},
                {"host": "c", "rate_per_s": 3, "think_s": 1}):
        with pytest.raises(ValueError, match=r"give one of|closed loop"):
            Workload.model_validate(bad)


def test_ssh_files_that_are_wrong_are_exit_2_naming_file_and_line(tmp_path):
    """Found after validation, still a sentence (issue 13): a missing ssh_config, a Port that
    is no port, a known_hosts line that is no entry (paramiko would skip it silently)."""
    from pathlib import Path

    from coordinator.config.experiment import Host, Ssh
    from coordinator.live.ssh import check_endpoints, check_known_hosts, resolve
    from linkgrad.errors import InputError

    with pytest.raises(InputError, match=r"nope: cannot read \(the ssh_config\)"):
        resolve("db", tmp_path / "nope")
    config = tmp_path / "ssh_config"
    config.write_text("Host web\n  HostName 192.0.2.1\nHost db\n  HostName 192.0.2.2\n"
                      "  Port twenty-two\n")
    assert resolve("web", config).port == 22
    with pytest.raises(InputError, match=r"ssh_config:5: field 'Port' Port 'twenty-two'"):
        resolve("db", config)
    config.write_text("Host db\n  Port = 99999\n")
    with pytest.raises(InputError, match=r"ssh_config:2: .*'99999' \(for Host db\)"):
        resolve("db", config)
    known = tmp_path / "known_hosts"
    good = ("192.0.2.1 ssh-ed25519 "
            "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    known.write_text("# comment\n\n" + good)
    check_known_hosts(known)
    known.write_text(good + "192.0.2.2 ssh-ed25519 AAAA!!!\n")
    with pytest.raises(InputError, match=r"known_hosts:2: not a known_hosts line"):
        check_known_hosts(known)
    known.write_text(good + "garbage\n")
    with pytest.raises(InputError, match=r"known_hosts:2: not a known_hosts line"):
        check_known_hosts(known)
    known.write_bytes(b"\xff" + good.encode())
    with pytest.raises(InputError, match=r"known_hosts:1: not UTF-8"):
        check_known_hosts(known)
    with pytest.raises(InputError, match=r"missing: cannot read \(known_hosts\)"):
        check_endpoints([Host(name="web", address="192.0.2.1")],
                        Ssh(known_hosts=tmp_path / "missing"))
    assert Path(known).exists()


def test_a_sniffer_that_lost_closing_notices_is_said_once_with_its_count() -> None:
    from coordinator.live.session import Session  # paramiko: slow to load, for this test only

    session = Session(experiment=None)  # type: ignore[arg-type]  # _report never reads it
    for lost in (2, None, 3):
        session._report("db", {"event": "report", "from": 1.0, "to": 2.0, "links": [],
                               **({"notice_losses": lost} if lost else {})})
    session._report("web", {"event": "report", "from": 1.0, "to": 2.0, "links": []})
    (warning,) = session.loss_warnings()
    assert warning.startswith("sniffer on db: the kernel's notices of closed sockets were lost "
                              "5 time(s)")
    assert len(session.reports) == 4


def test_snap_lines_add_their_lost_notices_and_calls_to_the_warnings() -> None:
    from coordinator.live.session import Session  # paramiko: slow to load, for this test only

    session = Session(experiment=None)  # type: ignore[arg-type]  # _report never reads it
    snap = {"event": "snap", "from": 1.0, "to": 2.0, "cpu_pct": 0.1, "table_interval_s": 1.0,
            "fast_connections": 0, "sockets": 0}
    session._report("db", {**snap, "notice_losses": 2})
    session._report("db", {**snap, "notice_losses": 1, "socket_calls_lost": "12 calls"})
    session._report("db", {"event": "report", "from": 1.0, "to": 2.0, "links": [],
                           "notice_losses": 1})
    notices, calls = session.loss_warnings()
    assert "were lost 4 time(s)" in notices
    assert calls.startswith("sniffer on db: SNAP's socket-call tracer: 12 calls;")


@pytest.mark.parametrize("cycles", [4, 11, 30, 109])
@pytest.mark.parametrize("count", [2, 4, 8])
def test_an_adaptive_round_is_a_band_of_its_own_every_wave_fittable(count, cycles):
    """Shortening each measurement wave alone left the slower ones one cycle or less at a
    large plan, ending apart: too few to fit. The round is one window, as the measurement."""
    from coordinator.live.measure import adaptive_cycles, adaptive_waves, band_cycles

    plan = WavePlan(period_s=8.0, cycles=cycles, magnitude_s=0.01, n_bins=32)
    waves = adaptive_waves(plan, count, 0.0, [0.01] * count)
    assert [w.cycles for w in waves] == band_cycles(count, adaptive_cycles(plan))
    assert len({round(w.end_s, 9) for w in waves}) == 1
    assert min(w.cycles for w in waves) >= 2


@pytest.mark.parametrize("count", range(1, 9))
def test_a_group_never_asks_the_injector_for_more_than_max_duration(count):
    from coordinator.config.experiment import Parameters
    from coordinator.live.measure import group_size

    for period, cap, cycles in ((82.0, 900.0, 7), (8.0, 60.0, 4), (8.0, 900.0, 4),
                                (11.3, 900.0, 76)):
        plan = WavePlan(period_s=period, cycles=cycles, magnitude_s=0.01, n_bins=32)
        p = Parameters(concurrent=count, max_duration_s=cap)
        size = group_size(plan, p)
        assert 1 <= size <= count
        waves = group_waves(plan, size, 0.0, [0.01] * size)
        assert size == 1 or max(w.duration_s for w in waves) <= cap - period
    plan = WavePlan(period_s=8.0, cycles=4, magnitude_s=0.01, n_bins=32)
    assert group_size(plan, Parameters(concurrent=8)) == 8  # 88 s: room to spare
    # five need 7 x 8 = 56 s, past 60 s less a period to spare: four, in 40 s
    assert group_size(plan, Parameters(concurrent=8, max_duration_s=60.0)) == 4

"""SNAP's evidence beside the gradients (linkgrad.snap.evidence): which connections are a
link's, the classes in a window, the resources ranked by ACC, the links a profile saw."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from coordinator.config.snap_file import HostSnapReport
from linkgrad.protocol.snap import SnapConnection, SnapEnd, SnapRecord
from linkgrad.snap.evidence import (
    LinkKey,
    correlated_resources,
    link_classes,
    links_seen,
)

HOSTS = {"10.0.0.1": "app", "10.0.0.2": "db", "10.0.0.3": "web"}


def _end(addr: str, port: int) -> SnapEnd:
    return SnapEnd(addr=addr, port=port)


def _connection(local, remote, first, last, app_limited=0.0, process="php", **seconds):
    return SnapConnection(local=_end(*local), remote=_end(*remote), pid=7, process=process,
                          first_s=first, last_s=last, polls=3,
                          seconds={"app_limited": app_limited, **seconds},
                          sums={"bytes_acked": 1000.0}, delayed_acks=0.0, problem_intervals=0)


def _record(local, remote, start, end, *classes, tcp=None):
    return SnapRecord(local=_end(*local), remote=_end(*remote), from_s=start, to_s=end,
                      classes=classes, delayed_acks=0.0, tcp=tcp or {}, calls=None)


def _report(host: str, records: Sequence[SnapRecord] = (),
            connections: Sequence[SnapConnection] = (), start: float = 0.0,
            end: float = 10.0) -> HostSnapReport:
    """A host's report as snap.json holds it."""
    return HostSnapReport(host=host, from_s=start, to_s=end, cpu_pct=0.0,
                          table_interval_s=0.5, fast_connections=0, sockets=0,
                          connections=tuple(connections), records=tuple(records))


APP, DB = ("10.0.0.1", 40001), ("10.0.0.2", 5432)


def test_a_sender_s_classes_are_its_link_s_and_windows_cut_them():
    report = _report("app", [_record(APP, DB, 1.0, 3.0, "receiver_window", "fast_retransmit"),
                             _record(APP, DB, 8.0, 9.0, "timeout")],
                     [_connection(APP, DB, 0.0, 10.0, app_limited=6.0)])
    app_to_db = LinkKey("app", 0, "db", 5432)
    got = link_classes([report], HOSTS, app_to_db, (2.0, 8.5))
    assert got["receiver_window"] == pytest.approx(1.0)  # 2..3 of 1..3
    assert got["fast_retransmit"] == pytest.approx(1.0)
    assert got["timeout"] == pytest.approx(0.5)
    assert got["app_limited"] == pytest.approx(6.0 * 6.5 / 10.0)  # spread over its span
    # the other direction, and a link on another port, have none of it
    assert sum(link_classes([report], HOSTS, LinkKey("db", 5432, "app", 0), (0, 10)).values()) == 0
    assert sum(link_classes([report], HOSTS, LinkKey("app", 0, "db", 3306), (0, 10)).values()) == 0


def test_shared_problems_into_one_host_rank_it_above_alpha_and_healthy_ones_below():
    reports = []
    for i in range(4):  # four connections from web to app, losing packets at the same times
        local, remote = ("10.0.0.3", 41000 + i), ("10.0.0.1", 80)
        records = [_record(local, remote, t, t + 1.0, "fast_retransmit") for t in (4, 12, 20)]
        reports.append(_report("web", records,
                               [_connection(local, remote, 0.0, 30.0, process="nginx")],
                               end=30.0))
    for i in range(3):  # healthy app -> db connections
        local = ("10.0.0.1", 42000 + i)
        reports.append(_report("app", [], [_connection(local, DB, 0.0, 30.0, app_limited=30.0)],
                               end=30.0))
    scores = {s.resource: s for s in correlated_resources(reports, HOSTS, (0.0, 30.0))}
    assert scores["to:app"].acc == pytest.approx(1.0)  # what goes into app loses, together
    assert scores["to:app"].above_alpha
    assert scores["path:web->app"].above_alpha
    assert scores["process:nginx"].above_alpha
    assert scores["path:app->db"].acc == 0.0  # healthy: no common problem
    assert not scores["path:app->db"].above_alpha
    assert scores["from:app"].acc == 0.0
    assert len(scores["path:web->app"].connections) == 4


def test_no_reports_rank_nothing():
    assert correlated_resources([], HOSTS, (0.0, 1.0)) == []


def test_links_seen_write_ephemeral_ports_0_and_sum_their_connections():
    reports = [_report("app", connections=[
        _connection(APP, DB, 0, 5, app_limited=5.0),
        _connection(("10.0.0.1", 40002), DB, 0, 5, app_limited=4.0, receiver_window=1.0),
        _connection(("10.0.0.1", 22), ("192.0.2.9", 50000), 0, 5, app_limited=1.0)])]
    got = links_seen(reports, HOSTS, {"app": (32768, 60999), "db": (32768, 60999)})
    assert got["app:0 -> db:5432"].connections == 2
    assert got["app:0 -> db:5432"].seconds["app_limited"] == 9.0
    assert got["app:0 -> db:5432"].seconds["receiver_window"] == 1.0
    assert got["app:0 -> db:5432"].bytes_acked == 2000.0
    assert "app:22 -> 192.0.2.9:50000" in got  # no host of ours: kept as it is


def test_an_rtt_the_injected_delay_explains_is_no_delayed_ack():
    """15 ms injected on the pair: an RTT of 16 ms over a 0.5 ms minimum is the injection;
    one of 60 ms is a delayed ACK still."""
    def record(rtt_us: float) -> SnapRecord:
        return _record(APP, DB, 1.0, 2.0, "delayed_ack",
                       tcp={"rtt_us": rtt_us, "min_rtt_us": 500.0})

    report = _report("app", [record(16_000.0)])
    key, window = LinkKey("app", 0, "db", 5432), (0.0, 10.0)
    assert link_classes([report], HOSTS, key, window)["delayed_ack"] == 1.0  # passive: stands
    assert link_classes([report], HOSTS, key, window, injected_us=15_000.0)["delayed_ack"] == 0
    report = _report("app", [record(60_000.0)])
    assert link_classes([report], HOSTS, key, window, injected_us=15_000.0)["delayed_ack"] == 1


def test_the_delay_on_a_pair_sums_the_links_measured_at_once_either_way():
    from coordinator.config.run_records import LinkMeasurement
    from coordinator.live.passive import injected_us
    from tests.test_prediction import measurement

    def at(src: str, dst: str, start: float, ms: float) -> LinkMeasurement:
        m = LinkMeasurement.model_validate(measurement(src, dst, f"tcp {src}:0 -> {dst}:0", ms,
                                                       {}))
        return m.model_copy(update={"record": m.record.model_copy(update={"start": start})})

    both = [at("app1", "db", 1e9, 10.0), at("db", "app1", 1e9 + 5, 4.0),  # overlapping
            at("app1", "db", 1e9 + 100, 7.0), at("web", "app1", 1e9, 3.0)]  # later; another pair
    assert injected_us(both[0], both) == 14_000.0
    assert injected_us(both[2], both) == 7_000.0
    assert injected_us(both[3], both) == 3_000.0


def test_a_resumed_run_s_unreadable_snap_json_is_kept_aside_and_said(tmp_path):
    from coordinator.config.run_dir import RunDir
    from coordinator.live.passive import save
    from linkgrad.protocol.snap import Profiling

    (tmp_path / "snap.json").write_text('{"reports": "cut short')
    warnings = save(RunDir(tmp_path), "exp", {"web": Profiling(table_interval_s=0.5,
                                                               socket_calls=False)},
                    [_report("web")], HOSTS)
    assert len(warnings) == 1
    assert "kept as snap-unreadable.json" in warnings[0]
    assert (tmp_path / "snap-unreadable.json").read_text() == '{"reports": "cut short'
    assert (tmp_path / "snap.json").exists()

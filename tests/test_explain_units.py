"""The explanation's pure parts: the passive gradient over all of a transaction's patterns,
the verdict, the causes each kind of evidence names, SNAP's traffic in a window, the paths'
branches, and the 80-column table."""

from __future__ import annotations

import pytest

from coordinator.cli.explain_text import explanation_lines, link_names
from coordinator.explain.answer import ExplainRow, Explanation, RunSummary
from linkgrad.explain.evidence import Branches, DirectionTraffic, HostBusy, LinkEvidence, Trend
from linkgrad.explain.explained import explain
from linkgrad.explain.passive import PatternCrossings, passive_gradient
from linkgrad.explain.paths_view import branches
from linkgrad.explain.verdict import AGREE_WITHIN, causes_above, causes_below, judge
from linkgrad.paths.result import HopResult, PatternResult
from linkgrad.snap.evidence import LinkKey
from linkgrad.snap.traffic import link_traffic


def _p(count: int, **crossings: float) -> PatternCrossings:
    return PatternCrossings(count, {k.replace("_", "->"): v for k, v in crossings.items()})


# -- the passive gradient ---------------------------------------------------------------------

def test_a_cache_missed_on_30_percent_of_requests_gives_0_3_not_the_dominant_paths_0():
    hit, miss = _p(700, app_cache=0.0), _p(300, app_cache=1.0)
    g = passive_gradient([hit, miss], "app->cache")
    assert g is not None
    assert g.estimate == pytest.approx(0.3)
    lo, hi = g.ci95
    assert lo < 0.3 < hi
    assert hi - lo < 0.1  # a binomial's ±1.96·sqrt(0.21/1000) ≈ ±0.03, and 3/1000 unseen


def test_a_transaction_always_crossing_twice_has_a_narrow_interval_around_2():
    g = passive_gradient([_p(500, app_db=2.0)], "app->db")
    assert g is not None
    assert g.estimate == 2.0
    assert g.ci95[0] == pytest.approx(2.0 * (1 - 3 / 500))  # the rule of three's unseen share
    assert g.ci95[1] == pytest.approx(2.0)


def test_requests_whose_pattern_was_not_kept_widen_the_interval_not_the_mean():
    kept = [_p(90, app_db=2.0)]
    alone = passive_gradient(kept, "app->db")
    widened = passive_gradient(kept, "app->db", requests=100)
    assert alone is not None
    assert widened is not None
    assert widened.estimate == alone.estimate == 2.0
    assert widened.unmatched == 10
    assert widened.ci95[0] < alone.ci95[0] - 0.15  # 10% could cross it not at all


def test_one_request_says_anything_from_no_crossing_to_its_own():
    g = passive_gradient([_p(1, app_db=3.0)], "app->db")
    assert g is not None
    assert g.ci95 == (0.0, 3.0)


def test_no_request_is_no_passive_gradient_and_a_pair_never_crossed_is_zero():
    assert passive_gradient([], "a->b") is None
    assert passive_gradient([_p(0, a_b=1.0)], "a->b") is None
    g = passive_gradient([_p(50, a_b=1.0)], "x->y")
    assert g is not None
    assert g.estimate == 0.0
    assert g.ci95 == (0.0, 0.0)


# -- the verdict ------------------------------------------------------------------------------

@pytest.mark.parametrize(("gradient", "ci", "verdict"), [
    (2.0, (1.8, 2.2), "agree"),
    (2.5, (2.0 + AGREE_WITHIN + 0.01, 2.9), "above"),
    (2.1, (2.0 + AGREE_WITHIN - 0.01, 2.3), "agree"),  # within the tolerance
    (1.0, (0.5, 1.5), "below"),
    (None, None, "passive-only"),
])
def test_the_verdict_compares_the_two_intervals(gradient, ci, verdict):
    passive = passive_gradient([_p(1000, a_b=2.0)], "a->b")  # [1.994, 2.0]
    assert passive is not None
    assert judge(gradient, ci, passive) == verdict


def test_without_paths_the_gradient_is_active_only():
    assert judge(1.0, (0.9, 1.1), None) == "active-only"


# -- the causes -------------------------------------------------------------------------------

def _evidence(**kw: object) -> LinkEvidence:
    return LinkEvidence(window_requests=kw.pop("window_requests", 1000), **kw)  # type: ignore[arg-type]


def _direction(opened: int = 2, writes: float = 100, segments: float = 100,
               write_bytes: float = 20_000, opened_passive: int | None = None
               ) -> DirectionTraffic:
    return DirectionTraffic("db", "app", opened, opened_passive, writes, write_bytes, segments)


def test_replies_of_many_segments_are_named_as_several_round_trips():
    causes = causes_above(_evidence(traffic=(_direction(segments=3000, write_bytes=4e6),)))
    assert [c.kind for c in causes] == ["window"]
    assert "40 kB (30 segments)" in causes[0].text


def test_snap_window_limits_are_named_with_their_share_whether_or_not_the_delay_brought_them():
    causes = causes_above(_evidence(snap={"receiver_window": 3.2, "app_limited": 96.8},
                                    snap_passive={"app_limited": 100.0}))
    assert [c.kind for c in causes] == ["window"]
    assert "receiver window or send buffer 3.2% of the link's connection-seconds while " \
        "measured, 0.0% in the passive phase" in causes[0].text
    assert causes_above(_evidence(snap={"receiver_window": 0.3, "app_limited": 99.7})) == []
    # a limit there all along still makes each message several round trips over the link
    there = causes_above(_evidence(snap={"send_buffer": 3.0, "app_limited": 97.0},
                                   snap_passive={"send_buffer": 2.9, "app_limited": 97.0}))
    assert [c.kind for c in there] == ["window"]
    assert "3.0% of the link's connection-seconds while measured, 2.9% in the passive" \
        in there[0].text


def test_connections_the_delay_brought_are_named_and_a_habit_or_a_pool_is_not():
    grown = causes_above(_evidence(traffic=(_direction(opened=900, opened_passive=20),
                                            _direction(opened=900, opened_passive=20)),
                                   passive_requests=1000))
    assert [c.kind for c in grown] == ["handshake"]
    assert "(0.90 while measured, 0.02 in the passive phase)" in grown[0].text
    # a connection per request all along (PHP's MySQL): the paths counted those handshakes
    habit = _evidence(traffic=(_direction(opened=900, opened_passive=880),),
                      passive_requests=1000)
    assert causes_above(habit) == []
    assert causes_above(_evidence(traffic=(_direction(opened=8),))) == []  # a pool


def test_losses_queues_and_busy_hosts_are_each_named():
    causes = causes_above(_evidence(
        snap={"fast_retransmit": 1.5, "app_limited": 50.0},
        snap_passive={"fast_retransmit": 0.1, "app_limited": 50.0},
        trends=(Trend("delay", 1.0, 1.4, differ=True), Trend("load", 1.0, 0.9, differ=True),
                Trend("load", 1.0, 1.6, differ=False)),
        hosts=(HostBusy("db", 0.95, None, None, None), HostBusy("app", 0.3, 0.9, 0.2, 0.1),
               HostBusy("web", 0.3, 0.3, 0.2, 0.1),
               HostBusy("cache", 0.7, None, None, None, passive_cpu_busy=0.3))))
    assert [c.kind for c in causes] == ["loss", "queue", "host", "host", "host"]
    assert "machine CPU 70% against 30% passive" in causes[4].text
    assert "2.9% of the link's connection-seconds while measured, 0.2%" in causes[0].text
    assert "grows with the delay (1.00 to 1.40)" in causes[1].text
    assert "db busy" in causes[2].text
    assert "machine CPU 95%" in causes[2].text
    assert "own CPU 0.90 cores against 0.20 passive" in causes[3].text


def test_delayed_acks_are_named_only_when_the_delay_brought_them():
    assert [c.kind for c in causes_above(_evidence(
        snap={"delayed_ack": 20.0, "app_limited": 80.0}))] == ["nagle"]
    assert [c.kind for c in causes_above(_evidence(
        snap={"delayed_ack": 40.0, "app_limited": 60.0},
        snap_passive={"delayed_ack": 10.0, "app_limited": 90.0}))] == ["nagle"]
    assert causes_above(_evidence(snap={"delayed_ack": 5.0, "app_limited": 95.0})) == []
    # as common without the delay: the application's habit, not the excess
    assert causes_above(_evidence(snap={"delayed_ack": 50.0, "app_limited": 50.0},
                                  snap_passive={"delayed_ack": 45.0, "app_limited": 55.0})) == []


def test_a_wide_measurement_adds_chance_to_its_causes():
    passive = passive_gradient([_p(1000, a_b=1.0)], "a->b")
    row = explain("t", "tcp a:0 -> b:80", "a->b", 2.0, (1.8, 2.2), passive, _evidence(),
                  notes=("wider than wanted: ±0.2 against ±0.1",))
    assert [c.kind for c in row.causes] == ["unexplained", "noise"]


def test_below_names_parallel_branches_asynchronous_calls_and_a_silent_injector():
    par = causes_below(_evidence(branches=Branches(100, 0.6, ("app->cache",))))
    assert [c.kind for c in par] == ["parallel"]
    assert "app->cache" in par[0].text
    asy = causes_below(_evidence(branches=Branches(100, 0.3, ())))
    assert [c.kind for c in asy] == ["async"]
    assert "30%" in asy[0].text
    assert [c.kind for c in causes_below(_evidence(packets_delayed=0))] == ["injection"]
    assert causes_below(_evidence(branches=Branches(100, 1.0, ()))) == []
    # nearly always critical: a sibling hides none of its delay
    assert causes_below(_evidence(branches=Branches(100, 0.95, ("web->client",)))) == []


def test_a_difference_no_evidence_accounts_for_is_unexplained():
    passive = passive_gradient([_p(1000, a_b=1.0)], "a->b")
    row = explain("t", "tcp a:0 -> b:80", "a->b", 2.0, (1.8, 2.2), passive, _evidence())
    assert row.verdict == "above"
    assert [c.kind for c in row.causes] == ["unexplained"]
    agree = explain("t", "tcp a:0 -> b:80", "a->b", 1.0, (0.9, 1.1), passive, _evidence())
    assert agree.causes == ()
    assert agree.cause is None


# -- SNAP's traffic in a window ---------------------------------------------------------------

class _End:
    def __init__(self, addr: str, port: int) -> None:
        self.addr, self.port = addr, port


class _Conn:
    def __init__(self, lport: int, first: float, last: float, sockets: int = 1,
                 **sums: float) -> None:
        self.local, self.remote = _End("10.0.0.1", lport), _End("10.0.0.2", 5432)
        self.first_s, self.last_s, self.sockets, self.sums = first, last, sockets, sums


class _Report:
    def __init__(self, *connections: _Conn) -> None:
        self.host, self.connections, self.records = "app", connections, ()


HOSTS = {"10.0.0.1": "app", "10.0.0.2": "db"}
KEY = LinkKey("app", 0, "db", 5432)


def test_traffic_counts_connections_first_seen_in_the_window_and_short_ones_summed():
    reports = [
        _Report(_Conn(40000, 0, 60, writes=60, write_bytes=6000, data_segs_out=60)),
        _Report(_Conn(40000, 60, 120, writes=60, write_bytes=6000, data_segs_out=60),
                _Conn(40001, 70, 120, writes=10, write_bytes=1000, data_segs_out=10),
                _Conn(0, 60, 120, sockets=30, data_segs_out=300)),  # short: no writes traced
    ]
    seen = link_traffic(reports, HOSTS, KEY, (60.0, 120.0))
    assert seen.opened == 31  # 40001 and the 30 short ones; 40000 was open before
    assert seen.writes == pytest.approx(70)
    assert seen.segments == pytest.approx(70)  # the short ones' segments have no writes
    half = link_traffic(reports, HOSTS, KEY, (90.0, 120.0))
    assert half.writes == pytest.approx(30 + 6)  # each sum spread over its span
    assert half.opened == 15


# -- the paths' branches ----------------------------------------------------------------------

def _hop(label: str, parent: int, link: str, critical: float = 1.0) -> HopResult:
    return HopResult(label=label, parent=parent, link=link, node_delay_s=None,
                     network_delay_s=None, critical=critical)


def _pattern(count: int, *hops: HopResult) -> PatternResult:
    return PatternResult(key="k", count=count, score=float(count), max_probability=1.0,
                         response_s=None, crossings={}, hops=hops)


def test_branches_find_the_messages_a_parent_sends_beside_the_links():
    parallel = _pattern(80, _hop("req", -1, "web->app"), _hop("q", 0, "app->db", 0.5),
                        _hop("c", 0, "app->cache", 0.5), _hop("r", 1, "db->app", 0.5))
    chain = _pattern(20, _hop("req", -1, "web->app"), _hop("q", 0, "app->db"),
                     _hop("r", 1, "db->app"), _hop("q2", 2, "app->db"))
    b = branches([parallel, chain], "app->db")
    assert b is not None
    assert b.crossing_requests == 100
    assert b.parallel == ("app->cache",)
    assert b.critical_share == pytest.approx((80 * 0.5 + 20 * 2) / (80 + 40))
    assert branches([chain], "app->db").parallel == ()  # sequential calls chain, no siblings
    assert branches([chain], "x->y") is None


# -- the table --------------------------------------------------------------------------------

def test_link_names_are_pairs_where_unique_else_labels_cut_in_the_middle_never_alike():
    labels = ["tcp app:0 -> db:5432", "tcp db:5432 -> app:0", "tcp app:0 -> db:6379",
              "tcp6 averyveryverylonghostname-a:0 -> averyveryverylonghostname-b:11211",
              "tcp6 averyveryverylonghostname-a:0 -> averyveryverylonghostname-b:11212"]
    pairs = ["app->db", "db->app", "app->db", "averyveryverylonghostname-a->averyveryvery"
             "longhostname-b"] * 1 + ["averyveryverylonghostname-a->averyveryverylong"
                                      "hostname-b"]
    names = link_names(labels, pairs, 20)
    assert names["tcp db:5432 -> app:0"] == "db->app"
    assert names["tcp app:0 -> db:5432"] == "app:0 -> db:5432"
    assert len(set(names.values())) == len(labels)
    assert all(len(n) <= 20 for n in names.values())
    tight = link_names(labels[3:], pairs[3:], 12)  # the cut keeps the ports apart
    assert len(set(tight.values())) == 2
    assert all(len(n) <= 12 for n in tight.values())


def _row(transaction: str, link: str, pair: str, gradient: float | None,
         **kw: object) -> ExplainRow:
    return ExplainRow(transaction=transaction, link=link, pair=pair, gradient=gradient,
                      ci95=None if gradient is None else (gradient - 10.5, gradient + 10.5),
                      gradient_se=None if gradient is None else 5.36,
                      passive_gradient=kw.get("passive", 41.8), passive_ci95=(40.1, 43.9),
                      crossings=41.8, crossings_ci95=(40.1, 43.9), combined=None,
                      combined_ci95=None, passive_requests=500, snap=None, hosts=None,
                      verdict=str(kw.get("verdict", "agree")), cause=None, causes=[],
                      notes=list(kw.get("notes", [])))  # type: ignore[arg-type]


def test_the_table_fits_80_columns_with_long_links_large_numbers_and_notes():
    rows = [_row("a-transaction-with-a-long-name", f"tcp6 host-{i}-with-a-long-name:0 -> "
                 f"database-server-{i}:3306", f"host-{i}-with-a-long-name->database-server-{i}",
                 -123.45 if i % 2 else None, verdict="passive-only" if i % 2 == 0 else "below",
                 notes=["wider than wanted: " + "x " * 60]) for i in range(6)]
    summary = RunSummary(experiment="e" * 90, application="e", run_dir="/r",
                         status="completed", reason=None,
                         started=0.0, ended=10.0, duration_s=10.0, hosts=["a"], graph_links=6,
                         injected_links=3, traced_requests={}, verdicts={"below": 3},
                         calibration="c " * 60, strategy="s " * 60,
                         findings=["f " * 70], next_step="n " * 70)
    lines = explanation_lines(Explanation(summary=summary, rows=rows))
    assert max(map(len, lines)) <= 80, max(lines, key=len)
    values = [i for i, line in enumerate(lines) if "41.80" in line and line.rstrip().endswith(
        (" below", " passive-only"))]
    assert len(values) == 6
    # too little room beside the values: each link's name on the line above them, unique
    names = [lines[i - 1].strip() for i in values]
    assert len(set(names)) == 6
    assert all(n.startswith("host-") for n in names)


def test_the_clients_link_lies_outside_the_response_time_the_web_log_measures():
    from linkgrad.explain.paths_view import logged_crossings

    p = PatternResult(key="k", count=10, score=10.0, max_probability=1.0, response_s=None,
                      crossings={"client->web": 1.0, "web->client": 1.0, "web->app": 1.0,
                                 "app->web": 1.0},
                      hops=(_hop("req", -1, "client->web"), _hop("call", 0, "web->app"),
                            _hop("ret", 1, "app->web"), _hop("reply", 2, "web->client")))
    assert logged_crossings(p) == {"web->app": 1.0, "app->web": 1.0}


def test_rare_retransmissions_are_no_cause_and_habitual_ones_are():
    """A recovery waits round trips over the link, so losses there all along add to the
    gradient as much as losses the delay brought."""
    rare = _evidence(snap={"fast_retransmit": 0.3, "app_limited": 100.0})
    habitual = _evidence(snap={"fast_retransmit": 3.0, "app_limited": 100.0},
                         snap_passive={"fast_retransmit": 2.8, "app_limited": 100.0})
    assert causes_above(rare) == []
    assert [c.kind for c in causes_above(habitual)] == ["loss"]
    # a timeout waits RTO (200 ms at least), not a round trip: there all along, no cause
    timeouts = _evidence(snap={"timeout": 3.0, "app_limited": 100.0},
                         snap_passive={"timeout": 2.8, "app_limited": 100.0})
    assert causes_above(timeouts) == []
    brought = _evidence(snap={"timeout": 3.0, "app_limited": 100.0},
                        snap_passive={"timeout": 0.1, "app_limited": 100.0})
    assert "fast retransmit or timeout 2.9%" in causes_above(brought)[0].text

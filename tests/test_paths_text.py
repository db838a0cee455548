"""`linkgrad paths`'s text for a person: hops indented by the call they are made in, a run of
one call said once, lines within 80 columns."""

from __future__ import annotations

from coordinator.cli.paths_text import display_depths, pattern_lines
from linkgrad.paths.result import HopResult, PatternResult


def _hop(label: str, parent: int, node: float | None = 1e-4) -> HopResult:
    return HopResult(label=label, parent=parent, link="a->b", node_delay_s=node,
                     network_delay_s=5e-6, critical=1.0)


def _chain(queries: int, greeting: bool = False) -> list[HopResult]:
    """A front end asking a database `queries` times in sequence (each query caused by the
    last one's reply), then answering: its causal depth grows with every query."""
    hops = [_hop("CLIENT->web/php:80", -1, None)]
    if greeting:  # MySQL speaks first on a new connection: a reply with no request
        hops.append(_hop("db/mysqld:3306->web/php", 0))
    for _ in range(queries):
        hops.append(_hop("web/php->db/mysqld:3306", len(hops) - 1))
        hops.append(_hop("db/mysqld:3306->web/php", len(hops) - 1))
    hops.append(_hop("web/php:80->CLIENT", len(hops) - 1))
    return hops


def test_sequential_calls_stay_at_one_level():
    assert display_depths(_chain(3)) == [0, 1, 2, 1, 2, 1, 2, 1]
    assert display_depths(_chain(2, greeting=True)) == [0, 1, 1, 2, 1, 2, 1]


def test_a_call_within_a_call_goes_one_deeper():
    hops = [_hop("CLIENT->web:80", -1), _hop("web->app:8000", 0), _hop("app->db:5432", 1),
            _hop("db:5432->app", 2), _hop("app:8000->web", 3), _hop("web->cache:11211", 4),
            _hop("cache:11211->web", 5), _hop("web:80->CLIENT", 6)]
    assert display_depths(hops) == [0, 1, 2, 3, 2, 1, 2, 1]


def test_untraced_ipv6_ends_are_read_by_the_hop_s_direction():
    """An untraced client or server is its address: "fd00::1->web:80" ends in ":1->", as
    a reply's label does: the hop says which way it went (an older paths.json's hops do
    not: their labels are read alone, as in the tests above)."""
    def hop(label: str, parent: int, reply: bool | None) -> HopResult:
        return HopResult(label=label, parent=parent, link="a->b", node_delay_s=1e-4,
                         network_delay_s=None, critical=1.0, reply=reply)
    labels = [("fd00::1->web:80", -1, False), ("web->fd00::3:5432", 0, False),
              ("fd00::3:5432->web", 1, True), ("web->fd00::3:5432", 2, False),
              ("fd00::3:5432->web", 3, True), ("web:80->fd00::1", 4, True)]
    assert display_depths([hop(*x) for x in labels]) == [0, 1, 2, 1, 2, 1]


def test_a_run_of_one_call_is_said_once_and_lines_fit_80_columns():
    hops = _chain(42, greeting=True)
    p = PatternResult(key="k", count=477, score=477.0, max_probability=1.0, response_s=0.04377,
                      crossings={f"host-{i}->host-{i + 1}": 42.0 for i in range(12)},
                      hops=tuple(hops))
    lines = pattern_lines(p)
    assert lines[0] == "477 × (score 477.0, 43.77 ms)"
    assert all(len(line) <= 80 for line in lines), lines
    assert sum(line.strip().startswith("web/php->db") for line in lines) == 1
    assert "    ... the same 41 more times, node 0.100-0.100 ms" in lines
    assert lines[-1].strip().startswith("web/php:80->CLIENT")
    assert len(lines) < 12

"""paths_from_hosts: the hosts' traces and a web log into paths.json's analysis, as a run,
`linkgrad paths` and a relinking benchmark make it."""

from __future__ import annotations

import numpy as np

from linkgrad.paths.from_hosts import paths_from_hosts
from linkgrad.paths.reconcile import HostRecord, HostTrace
from linkgrad.weblog.model import RequestLog

T0 = 1_700_000_000.0
CLIENT, WEB, DB = ("10.0.0.1", 40000), ("10.0.0.2", 80), ("10.0.0.3", 5432)
WEB_OUT = ("10.0.0.2", 50000)


def _traces(starts: list[float]) -> list[HostTrace]:
    """Each request: client -> web, web -> db, db -> web, web -> client, 1 ms apart."""
    client, web, db = [], [], []
    for i, t in enumerate(starts):
        s = T0 + t
        seq = 100 * i
        client += [HostRecord(CLIENT, WEB, True, seq, seq + 10, s, s, False, "curl"),
                   HostRecord(CLIENT, WEB, False, seq, seq + 10, s + 0.0035, s + 0.0035,
                              False, "curl")]
        web += [HostRecord(WEB, CLIENT, False, seq, seq + 10, s + 0.0005, s + 0.0005, False,
                           "nginx"),
                HostRecord(WEB_OUT, DB, True, seq, seq + 10, s + 0.001, s + 0.001, False,
                           "nginx"),
                HostRecord(WEB_OUT, DB, False, seq, seq + 10, s + 0.0025, s + 0.0025, False,
                           "nginx"),
                HostRecord(WEB, CLIENT, True, seq, seq + 10, s + 0.003, s + 0.003, False,
                           "nginx")]
        db += [HostRecord(DB, WEB_OUT, False, seq, seq + 10, s + 0.0015, s + 0.0015, False,
                          "postgres"),
               HostRecord(DB, WEB_OUT, True, seq, seq + 10, s + 0.002, s + 0.002, False,
                          "postgres")]
    return [HostTrace("client", frozenset({"10.0.0.1"}), frozenset(), client),
            HostTrace("web", frozenset({"10.0.0.2"}), frozenset({("0.0.0.0", 80)}), web),
            HostTrace("db", frozenset({"10.0.0.3"}), frozenset({("0.0.0.0", 5432)}), db)]


def test_each_request_the_log_saw_is_counted_under_its_transaction() -> None:
    starts = [0.0, 0.5, 1.0, 1.5]
    # the log saw three of the four; one of them of no transaction asked for
    log = RequestLog(start_s=T0 + np.array([0.0005, 0.5005, 1.0005]),
                     response_s=np.full(3, 0.0025),
                     url=np.array(["/item?id=1", "/item?id=2", "/static/a.css"], dtype=object))
    result = paths_from_hosts(_traces(starts), "context", 2.0, None, log, {"item": "^/item"})
    assert result.traced_hosts == ("client", "db", "web")
    assert (result.client_requests, result.matched_requests) == (4, 2)
    assert result.transaction_requests == {"item": 2}
    (pattern,) = result.transactions["item"]
    assert pattern.crossings["web->db"] == 1.0
    assert pattern.crossings["db->web"] == 1.0


def test_without_a_log_there_are_no_transactions_and_no_counts() -> None:
    result = paths_from_hosts(_traces([0.0, 0.5]), "context", 2.0, None)
    assert result.roots == 2
    assert result.transactions == {}
    assert result.client_requests is None
    assert result.matched_requests is None

"""benchmarks/explain_causes.py's pure parts: the experiment it runs, the rows it keeps and
judges, its table."""

from benchmarks.explain_causes import (
    Settings,
    cases,
    cells,
    experiment_yaml,
    markdown,
    ss_summary,
)
from coordinator.config.experiment import Experiment
from coordinator.config.yamlconf import load_yaml

LABEL = "tcp db:5432 -> app1:0"


def _row(transaction, pair, verdict, kinds, gradient=2.6):
    return {"transaction": transaction, "link": LABEL if pair == "db->app1" else "x",
            "pair": pair, "gradient": gradient, "ci95": [gradient - 0.3, gradient + 0.3],
            "passive_gradient": 2.0, "passive_ci95": [1.9, 2.05], "verdict": verdict,
            "causes": [{"kind": k, "text": f"{k} because"} for k in kinds]}


def test_the_experiment_is_valid_and_measures_app1_db_both_ways(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(experiment_yaml(tmp_path, Settings(cycles=3)))
    e = load_yaml(path, Experiment)
    assert e.testbed == "ec"
    assert sorted(e.transactions) == ["ViewItem", "single"]
    assert list(e.parameters.include) == ["app1->db", "db->app1"]
    assert e.parameters.cycles == 3
    assert e.workload.mix == "/rubis/ViewItem?id=42=1,/pattern/single=1"


def test_cells_keep_app1_db_and_ask_for_the_cause_only_above():
    rows = [_row("ViewItem", "db->app1", "above", ["window", "host"]),
            _row("ViewItem", "app1->db", "above", ["host"]),
            _row("single", "db->app1", "agree", [], gradient=1.0),
            _row("ViewItem", "web->app1", "above", ["window"]),  # not the impaired link
            {**_row("async", "db->app1", "agree", []), "gradient": None}]
    snap = {LABEL: {"measurement": {"receiver_window": 12.0}, "passive": {}}}
    got = cells(rows, snap, "window")
    assert [(c["transaction"], c["pair"], c["named"]) for c in got] == [
        ("ViewItem", "db->app1", True), ("ViewItem", "app1->db", False),
        ("single", "db->app1", None)]
    assert [c["crossings"] for c in got] == [2.0, 2.0, 1.0]
    assert got[0]["snap"]["measurement"] == {"receiver_window": 12.0}
    # the baseline expects nothing: never asked
    assert all(c["named"] is None for c in cells(rows, snap, None))


def test_the_table_has_a_line_per_cell_and_says_skips_and_the_count():
    s = Settings()
    skip = next(c for c in cases(s) if c.impair is None)
    rows = [_row("ViewItem", "db->app1", "above", ["window"])]
    results = [{"case": "receiver_window", "what": "w", "status": "completed",
                "cells": cells(rows, {}, "window")},
               {"case": "loss", "what": "l", "status": "failed", "cells": []},
               {"case": skip.name, "what": skip.what, "skipped": skip.skipped}]
    text = markdown(results, s)
    assert "| receiver_window | w | ViewItem | db->app1 | 2.60 [2.30, 2.90] | 2.00 [1.90, " \
           "2.05] | above | window | yes | - | - |" in text
    assert "| loss | l | | | | | run failed |" in text
    sized = cells(rows, {LABEL: {"measurement": {"receiver_window": 3.0, "app_limited": 9.5},
                                 "passive": {"receiver_window": 2.6}}}, "window",
                  {LABEL: {"bytes_per_write": 143.0, "segments_per_write": 3.0}})
    # shares of the connection-seconds, app_limited only in the total
    assert "| receiver_window 24% / 100% | 143, 3.0 |" in markdown(
        [{"case": "w", "what": "w", "status": "completed", "cells": sized}], s)
    assert f"| {skip.name} | {skip.what} | | | | | skipped |" in text
    assert "TCP_NODELAY" in text
    assert "Expected cause named in 1 of 1 rows judged above." in text


def test_every_case_but_the_skipped_one_can_be_put_on_the_link():
    names = {c.name: c for c in cases(Settings())}
    assert set(names) == {"baseline", "loss", "receiver_window", "initcwnd", "delayed_ack"}
    assert [n for n, c in names.items() if c.impair is None] == ["delayed_ack"]
    assert names["delayed_ack"].skipped


def test_ss_summary_takes_the_first_connections_fields():
    line = ("ESTAB 0 0 10.201.1.5:5432 10.201.1.3:40000 ts sack cubic wscale:7,7 rto:204 "
            "rtt:0.05/0.02 mss:76 pmtu:1500 rcvmss:536 advmss:1448 cwnd:1 bytes_sent:900 "
            "data_segs_out:12 rwnd_limited:4ms(100.0%) snd_wnd:64 rcv_space:14480 retrans:0/3")
    assert ss_summary([line, "other"]) == ("mss:76 cwnd:1 snd_wnd:64 rwnd_limited:4ms(100.0%) "
                                           "retrans:0/3 data_segs_out:12")
    assert ss_summary([]) == "-"

"""`linkgrad paths --trace FILE --web-log LOG`: a saved trace's requests grouped by
transaction from the front end's log, as a live capture groups them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.cli.main import main
from tests.fakes.front_end_log import write_front_end_log

TRACE = Path(__file__).parent / "data" / "paths" / "trace.jsonl"


def test_a_saved_trace_is_grouped_by_the_log_s_transactions(tmp_path, capsys):
    log = tmp_path / "access.csv"
    rows = write_front_end_log(TRACE, log)
    assert main(["paths", "--trace", str(TRACE), "--web-log", str(log), "--transaction",
                 "A=^/a/", "--transaction", "B=^/b/", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["transactions"]) == {"A", "B"}
    assert result["client_requests"] == rows
    assert sum(result["transaction_requests"].values()) == result["matched_requests"]
    assert result["matched_requests"] >= rows - 2
    # without --transaction, one transaction per path, as `linkgrad gradient` groups them
    assert main(["paths", "--trace", str(TRACE), "--web-log", str(log), "--json"]) == 0
    by_path = json.loads(capsys.readouterr().out)["transaction_requests"]
    assert len(by_path) == result["matched_requests"]  # every URL is its own path here
    assert main(["paths", "--trace", str(TRACE), "--web-log", str(log), "--transaction",
                 "A=^/a/"]) == 0
    assert "\nA: " in capsys.readouterr().out


@pytest.mark.parametrize(("args", "said"), [
    (["experiments/testbed-quick.yaml", "--web-log", "x.log"],
     "field '--web-log': only with --trace"),
    (["--trace", str(TRACE), "--transaction", "A=^/a/"],
     "field '--transaction': only with --web-log LOG"),
    (["--trace", str(TRACE), "--log-format", "$x"], "field '--log-format': only with --web-log"),
    (["--trace", str(TRACE), "--web-log", "no-such.log"], "no-such.log"),
    (["--trace", str(TRACE), "--web-log", str(TRACE), "--transaction", "A"],
     "expected NAME=REGEX"),
])
def test_bad_web_log_arguments_exit_2(args, said, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    assert main(["paths", *args]) == 2
    assert said in capsys.readouterr().err

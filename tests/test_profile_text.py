"""`linkgrad profile`'s answer on the terminal: worst links first, a bounded list, the next
step (pure; the command itself runs in tests/test_run_netns.py)."""

from pathlib import Path

from coordinator.cli.profile import SHOWN, ProfileAnswer, SeenLink, profile_text
from coordinator.cli.snap_report import ResourceRow
from linkgrad.protocol.snap import Profiling


def _link(n: int, delayed_ack: float) -> SeenLink:
    return SeenLink(link=f"s{n}:0 -> s{n + 1}:8080", connections=3, bytes_acked=1e6,
                    seconds={"app_limited": 50.0, "delayed_ack": delayed_ack})


def test_the_worst_links_come_first_and_the_list_stops():
    links = [_link(n, float(n)) for n in range(30)]  # s0 has no problem time
    answer = ProfileAnswer(
        hosts={f"s{n}": Profiling(table_interval_s=0.5, socket_calls=True) for n in range(31)},
        links=links, reports=62, at=0.0, problems=[],
        resources=[ResourceRow(resource="path:s29->s30", acc=0.73, above_alpha=True,
                               connections=3, problems_s={"delayed_ack": 29.0}),
                   ResourceRow(resource="from:s1", acc=0.1, above_alpha=False,
                               connections=3, problems_s={"delayed_ack": 1.0})])
    lines = profile_text(answer, Path("exp.yaml"), 60).splitlines()
    assert lines[0] == "SNAP over 31 host(s) for 60 s: 30 link(s), 90 connection(s)"
    assert lines[2] == "  s29:0 -> s30:8080  (3 conn): delayed_ack 29.0 s, app_limited 50.0 s"
    assert f"  and {29 - SHOWN} more link(s)" in lines
    assert "1 link(s) limited by their application only" in lines
    assert "  path:s29->s30: ACC 0.73  delayed_ack 29.0 s" in lines
    assert not any("from:s1" in line for line in lines)  # below α: in --json only
    assert lines[-1].startswith("next: linkgrad run exp.yaml")
    assert len(lines) < 30


def test_a_quiet_application_says_so():
    answer = ProfileAnswer(hosts={}, links=[_link(0, 0.0)], resources=[], reports=1, at=0.0,
                           problems=[])
    assert "every link was limited by its application only" in profile_text(
        answer, Path("e.yaml"), 5)

"""What a person reads from `testbed down|load` and `inject --backend netem`: sentences and
columns, never a Python dict's repr (pure; the commands themselves run in the netns tests)."""

from rich.console import Console

from coordinator.cli.inject import netem_text
from coordinator.cli.testbed import _print_removal, load_text
from injector.netem import NetemStats
from linkgrad.protocol.injector import Calipers
from testbed.description import RemovalReport
from testbed.loadgen import ClosedLoopSummary, IssueLag, OpenLoopSummary, UrlResponses

LAG = IssueLag(median=0.4, p99=2.0, max=3.0)


def _no_repr(text: str) -> None:
    assert not any(c in text for c in "{}[]"), text
    assert ": '" not in text, text
    assert "': " not in text, text


def test_an_open_loop_says_what_was_sent_and_what_came_back_per_url():
    load = OpenLoopSummary(offered_per_s=20.0, duration_s=30.0, requests=597,
                           achieved_per_s=19.9, errors=2, issue_lag_ms=LAG,
                           response_ms={"/pattern/single": UrlResponses(count=300, mean=12.25,
                                                                        median=10.5),
                                        "/ViewItem": UrlResponses(count=295, mean=8.0,
                                                                  median=7.5)})
    text = load_text(load)
    _no_repr(text)
    lines = text.splitlines()
    assert lines[0] == "open loop at 20 requests/s for 30 s: 597 requests (19.9/s), 2 failed"
    assert lines[2].split() == ["/ViewItem", "295", "8.0", "7.5"]  # sorted by URL
    assert max(map(len, lines)) <= 80


def test_a_closed_loop_says_littles_law_and_a_late_client():
    load = ClosedLoopSummary(clients=4, think_s=0.2, mean_response_ms=10.0,
                             littles_law_per_s=19.0, duration_s=6.0, requests=110,
                             achieved_per_s=18.3, errors=0,
                             issue_lag_ms=IssueLag(median=5.0, p99=40.0, max=90.0),
                             response_ms={})
    text = load_text(load)
    _no_repr(text)
    assert text.startswith("closed loop of 4 client(s), 0.2 s think time for 6 s: 110 requests")
    assert "Little's law expects 19.0/s" in text
    assert "p99 40 ms behind schedule" in text


def test_down_says_what_it_removed_or_what_is_left():
    console = Console(record=True, width=80)
    _print_removal(console, RemovalReport(tag="g50", removed=True))
    _print_removal(console, RemovalReport(tag="g50", removed=False))
    _print_removal(console, RemovalReport(tag="tb", removed=True,
                                          failures=("cgroup /linkgrad-tb/web: busy",)))
    text = console.export_text()
    _no_repr(text)
    assert "testbed g50 removed" in text
    assert "no testbed g50: nothing to remove" in text
    assert "  cgroup /linkgrad-tb/web: busy" in text
    assert "linkgrad testbed down --tag tb again" in text


def test_netem_says_how_late_its_delay_changes_came():
    done = NetemStats(dev="eth0", phase_now="off", edge_lateness=Calipers(
        count=12, min_ms=0.1, max_ms=1.5, mean_ms=0.4, std_ms=0.3))
    text = netem_text(done)
    _no_repr(text)
    assert text == ("netem on eth0: 12 delay change(s), late against the schedule by 0.40 ms "
                    "on average (0.10 to 1.50 ms); the phase at the end: off")
    assert "no delay change" in netem_text(NetemStats(dev="eth0", phase_now="on",
                                                      edge_lateness=Calipers()))

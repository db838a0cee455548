"""`coordinator.live.fanout.each_host`: every host's work at most `limit` at once, each
failure kept with its host, and what succeeded known to the caller even when interrupted."""

from __future__ import annotations

import threading
import time

import pytest

from coordinator.live.fanout import HostsFailed, each_host
from linkgrad.errors import RuntimeFailure


class Gauge:
    """How many calls run at once, at most."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self.lock = threading.Lock()

    def __call__(self, name: str) -> str:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.02)
        with self.lock:
            self.now -= 1
        if name.endswith("!"):
            raise RuntimeFailure(f"{name}: refused")
        return name.upper()


@pytest.mark.parametrize("limit", [1, 3, 10])
def test_no_more_than_limit_hosts_at_once_and_every_host_answered(limit):
    names = [f"h{i}" for i in range(12)]
    gauge = Gauge()
    done = each_host(names, gauge, limit)
    assert gauge.most <= limit
    assert limit == 1 or gauge.most > 1  # at once, not one by one
    assert list(done.succeeded) == names  # in the order given, whatever finished first
    assert done.succeeded["h3"] == "H3"
    assert not done.failed


def test_failures_are_kept_per_host_beside_what_succeeded_and_said_in_one_error():
    done = each_host(["a", "b!", "c", "d!"], Gauge(), limit=2)
    assert list(done.succeeded) == ["a", "c"]
    assert list(done.failed) == ["b!", "d!"]
    with pytest.raises(HostsFailed) as raised:
        done.raise_failed("start the sniffer")
    assert str(raised.value) == ("start the sniffer: 2 of 4 host(s) failed: b!: refused; "
                                 "d!: refused (a, c did not)")
    assert raised.value.exit_code == 1
    assert set(raised.value.failed) == {"b!", "d!"}


def test_an_interrupt_keeps_what_succeeded_so_it_can_be_closed():
    kept: list[str] = []
    started = threading.Event()

    def work(name: str) -> str:
        if name == "slow":
            started.set()
            time.sleep(0.2)
            return name
        if name == "boom":
            started.wait()
            raise KeyboardInterrupt  # as Ctrl-C in a worker would be a BaseException
        return name

    with pytest.raises(KeyboardInterrupt):
        each_host(["slow", "boom", "never"], work, limit=2,
                  keep=lambda name, _: kept.append(name))
    assert "slow" in kept  # under way when it stopped: waited for and handed over
    assert "never" not in kept  # not started once it stopped


def test_no_hosts_is_no_work():
    done = each_host([], Gauge())
    assert done.succeeded == {}
    assert done.failed == {}

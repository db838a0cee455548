"""The injector's pure parts: links, schedules, caps, rules, the holding line, fail-open bytes."""

import json
import struct

import pytest
from pydantic import ValidationError

from injector.holding import HoldingLine
from injector.link import Endpoint, Link, parse_endpoint
from injector.nfq import fail_open_message
from injector.rules import chain_name, queue_rule
from injector.schedule import OFF, ON, Caps, Constant, Schedule, Square, build_schedule
from linkgrad.errors import InputError
from linkgrad.protocol.base import validation_problems
from linkgrad.protocol.injector import SCHEDULE


def test_endpoints_parse_hosts_networks_and_ports():
    assert parse_endpoint("10.0.0.5:5432", "dst") == Endpoint("10.0.0.5", 5432)
    assert parse_endpoint("10.0.0.5", "dst") == Endpoint("10.0.0.5", 0)
    assert parse_endpoint("10.0.0.9/24:80", "dst") == Endpoint("10.0.0.0/24", 80)
    with pytest.raises(InputError, match="field 'dst'"):
        parse_endpoint("10.0.0.5:http", "dst")


def test_link_checks_report_every_problem():
    with pytest.raises(InputError) as err:
        Link("sctp", Endpoint(None, 70000), Endpoint())
    text = str(err.value)
    assert "protocol 'sctp'" in text
    assert "give a source or destination address" in text
    assert "outside 0-65535" in text
    with pytest.raises(InputError, match="icmp has no ports"):
        Link("icmp", Endpoint(), Endpoint("10.0.0.1", 5))


def test_queue_rule_matches_only_what_was_given():
    link = Link("tcp", Endpoint("10.0.0.4", 0), Endpoint("10.0.0.5", 5432))
    assert queue_rule(chain_name(4200), link, 4201) == [
        "-p", "tcp", "-s", "10.0.0.4", "-d", "10.0.0.5", "--dport", "5432",
        "-j", "NFQUEUE", "--queue-num", "4201", "--queue-bypass"]
    assert chain_name(4200) == "LINKGRAD-Q4200"


def test_square_wave_phases_and_edges():
    sq = Square(0.02, start_s=100.0, period_s=10.0, cycles=2)
    assert [sq.phase(t) for t in (99.9, 100.0, 104.99, 105.0, 110.0, 119.99, 120.0)] == [
        OFF, ON, ON, OFF, ON, OFF, OFF]
    assert sq.delay_s(101) == 0.02
    assert [sq.next_change_s(t) for t in (50.0, 100.0, 103.0, 117.0, 120.0)] == [
        100.0, 105.0, 105.0, 120.0, None]
    c = Constant(0.01, 5.0, 2.0)
    assert (c.next_change_s(0.0), c.next_change_s(5.0), c.next_change_s(7.0)) == (5.0, 7.0, None)


def schedule_from_json(data: object, now_s: float, caps: Caps) -> Schedule:
    """As the daemon takes a schedule: through the protocol's union, then the caps."""
    try:
        spec = SCHEDULE.validate_python(data)
    except ValidationError as e:
        raise InputError(validation_problems(e, "schedule")) from e
    return build_schedule(spec, now_s, caps)


def test_schedule_json_is_validated_and_capped():
    caps = Caps(max_magnitude_ms=100, max_duration_s=60)
    sq = schedule_from_json({"kind": "square", "magnitude_ms": 20, "period_s": 10, "cycles": 3,
                             "start": 50.0}, 0.0, caps)
    assert sq == Square(0.02, 50.0, 10.0, 3)
    const = schedule_from_json({"kind": "constant", "magnitude_ms": 5}, 7.0, caps)
    assert const == Constant(0.005, 7.0, 60.0)  # default: now, for the capped duration
    with pytest.raises(InputError) as err:
        schedule_from_json({"kind": "square", "magnitude_ms": 200, "period_s": 30, "cycles": 3},
                           0.0, caps)
    assert "above the cap of 100" in str(err.value)
    assert "90 s is above the duration cap of 60 s" in str(err.value)
    with pytest.raises(InputError, match=r"schedule\.magnitud_ms': unknown field"):
        schedule_from_json({"kind": "constant", "magnitud_ms": 5}, 0.0, caps)
    with pytest.raises(InputError, match="schedule"):
        schedule_from_json({"kind": "sine", "magnitude_ms": 5}, 0.0, caps)


class FakePacket:
    def __init__(self, log: list, name: str) -> None:
        self.log, self.name = log, name

    def accept(self) -> None:
        self.log.append(("accept", self.name))

    def drop(self) -> None:
        self.log.append(("drop", self.name))


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def line_with(schedule):
    clock = Clock()
    return HoldingLine(Link("udp", Endpoint(), Endpoint("10.0.0.2")), schedule, clock, clock), clock


def test_a_packet_never_leaves_before_its_time():
    line, clock = line_with(Square(0.010, start_s=1000.0, period_s=1.0, cycles=1))
    log: list = []
    assert line.arrive(FakePacket(log, "p1")) == pytest.approx(1000.010)  # on: held 10 ms
    clock.t = 1000.009
    assert line.release(clock.t) == pytest.approx(1000.010)
    assert log == []
    clock.t = 1000.0101
    assert line.release(clock.t) is None
    assert log == [("accept", "p1")]
    on = line.link_stats().schedules["0"]["on"]
    assert on.actual.mean_ms == pytest.approx(10.1)
    assert on.error.mean_ms == pytest.approx(0.1)


def test_off_phase_packet_waits_behind_held_ones():
    # 30 ms delay, 10 ms on-phase: a packet sent just after the falling edge finds one held
    line, clock = line_with(Square(0.030, start_s=1000.0, period_s=0.02, cycles=1))
    log: list = []
    line.arrive(FakePacket(log, "on"))
    clock.t = 1000.015  # off
    assert line.arrive(FakePacket(log, "off")) == pytest.approx(1000.030)  # not before "on"
    assert log == []
    clock.t = 1000.031
    line.release(clock.t)
    assert [name for _, name in log] == ["on", "off"]
    assert line.link_stats().applied(0, "off").mean_ms == pytest.approx(16.0)


def test_loss_mode_drops_the_given_fraction_while_on():
    line, _ = line_with(Constant(0.0, 0.0, 1e9, loss_fraction=0.25))
    log: list = []
    for i in range(4000):
        line.arrive(FakePacket(log, str(i)))
    dropped = sum(1 for verdict, _ in log if verdict == "drop")
    assert dropped == line.dropped
    assert 0.22 < dropped / 4000 < 0.28
    stats = line.link_stats(drop_times=True)
    assert stats.drop_times_s is not None
    assert len(stats.drop_times_s) == dropped  # each drop's unix time, for labelling
    assert line.link_stats().drop_times_s is None  # only when asked for


def test_release_all_strands_nothing():
    line, _ = line_with(Constant(0.5, 0.0, 1e9))
    log: list = []
    for i in range(5):
        line.arrive(FakePacket(log, str(i)))
    assert line.release_all() == 5
    assert [name for _, name in log] == ["0", "1", "2", "3", "4"]


def test_fail_open_config_message_layout():
    msg = fail_open_message(4201)
    length, kind, flags, _, _ = struct.unpack("=IHHII", msg[:16])
    assert length == len(msg) == 36
    assert kind == (3 << 8) | 2  # NFNL_SUBSYS_QUEUE, NFQNL_MSG_CONFIG
    assert flags == 1
    assert struct.unpack("!H", msg[18:20]) == (4201,)
    assert msg[20:] == (struct.pack("=HH", 8, 4) + struct.pack("!I", 1)
                        + struct.pack("=HH", 8, 5) + struct.pack("!I", 1))


def test_engine_refuses_to_start_without_root(monkeypatch):
    from injector import engine
    from linkgrad.errors import RuntimeFailure

    monkeypatch.setattr(engine.os, "geteuid", lambda: 1000)
    eng = engine.Engine.__new__(engine.Engine)  # start() checks root before touching anything
    with pytest.raises(RuntimeFailure, match="needs root"):
        engine.Engine.start(eng)


def test_missing_iptables_is_a_clear_error():
    from injector.rules import Firewall
    from linkgrad.errors import RuntimeFailure

    with pytest.raises(RuntimeFailure, match="iptables-nonexistent not found"):
        Firewall("LINKGRAD-Q1", iptables="iptables-nonexistent")


@pytest.mark.parametrize(("argv", "field"), [
    (["--max-magnitude-ms", "inf"], "--max-magnitude-ms"),
    (["--max-magnitude-ms", "nan"], "--max-magnitude-ms"),
    (["--max-magnitude-ms", "0"], "--max-magnitude-ms"),
    (["--max-magnitude-ms", "1e6"], "--max-magnitude-ms"),
    (["--max-duration-s=-inf"], "--max-duration-s"),
    (["--max-duration-s", "1e9"], "--max-duration-s"),
    (["--queue", "70000"], "--queue"),
    (["--max-queue-len", "0"], "--max-queue-len"),
])
def test_caps_that_would_switch_themselves_off_are_refused_at_start(capsys, argv, field):
    """Exit 2 with the option named, before any rule or queue is touched (no root needed)."""
    from injector.daemon import main

    assert main(argv) == 2
    out, err = capsys.readouterr()
    said = json.loads(out)
    assert said["event"] == "error"
    assert said["message"].startswith(f"field '{field}': ")
    assert field in err


def test_caps_keep_their_limits_in_every_use():
    with pytest.raises(InputError, match="at most 10000"):
        Caps(max_magnitude_ms=float("inf"))
    with pytest.raises(InputError, match="--max-duration-s"):
        Caps(max_duration_s=float("nan"))
    assert Caps(10_000, 86_400).max_magnitude_ms == 10_000


def test_the_kernels_queue_table_is_read_as_it_is_written():
    from injector.stall import QueueState, parse_queue_table

    table = (" 4201  81234    17 2  4016     0     0      955  1\n"
             " 4202 -4000      0 2  4016     0     0        0  1\n"  # not the layout: passed
             "garbage\n")
    assert parse_queue_table(table) == {4201: QueueState(4201, 81234, 17, 955)}


def test_a_stall_is_a_quiet_heartbeat_while_packets_wait():
    from injector.stall import QueueState, StallDetector, stalled

    detector = StallDetector()
    assert detector.quiet_s((5, 9), 10.0) == 0.0  # the first look
    assert detector.quiet_s((6, 9), 10.3) == pytest.approx(0.3)  # the releaser is quiet
    assert detector.quiet_s((7, 9), 10.6) == pytest.approx(0.6)
    assert detector.quiet_s((7, 10), 10.7) == pytest.approx(0.1)  # both moved since
    states = {4201: QueueState(4201, 1, 12, 99), 4299: QueueState(4299, 2, 50, 7)}
    assert stalled(0.6, states, [4201]) == 12  # another daemon's queue is not ours
    assert stalled(0.4, states, [4201]) == 0  # not quiet long enough
    assert stalled(0.6, {4201: QueueState(4201, 1, 0, 99)}, [4201]) == 0  # nothing waits


def test_accept_batch_verdict_layout():
    from injector.nfq import accept_batch_message

    msg = accept_batch_message(4201, 2**32 + 5)  # ids are u32: the kernel's id wraps
    length, kind, flags, _, _ = struct.unpack("=IHHII", msg[:16])
    assert length == len(msg) == 32
    assert kind == (3 << 8) | 3  # NFNL_SUBSYS_QUEUE, NFQNL_MSG_VERDICT_BATCH
    assert flags == 1
    assert struct.unpack("!H", msg[18:20]) == (4201,)
    assert msg[20:] == struct.pack("=HH", 12, 2) + struct.pack("!II", 1, 5)  # ACCEPT up to 5


def test_the_heartbeat_is_shared_memory():
    import os

    from injector.watchdog import RELEASER, Heartbeat

    mine = Heartbeat()
    theirs = Heartbeat(os.dup(mine.fd))  # as the watchdog maps it from the passed fd
    mine.beat(RELEASER)
    mine.beat(RELEASER)
    assert theirs.read() == (0, 2)

"""`linkgrad bottleneck`: saved transfers tested (`--summaries`, lines recorded on the testbed by
benchmarks/bottleneck_table.py --record), the live path between two "hosts" that are this
machine (the real transfer and lease, no SSH), and bad input said in one sentence with exit 2
(or 1 for a host's failure), nothing left behind."""

from __future__ import annotations

import errno
import io
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator.cli import bottleneck as bottleneck_cli
from coordinator.cli.main import main
from coordinator.live.ssh import Endpoint
from coordinator.live.transfer_run import (
    HostPath,
    TransferPlan,
    parse_host_path,
    receiver_argv,
    sender_argv,
)
from linkgrad.calipers import Calipers
from linkgrad.errors import InputError
from linkgrad.protocol.transfer import TransferInterval, read_lines, tput_i
from sniffer.transfer_meter import MIN_SPAN_S, Meter, ThreadClock
from testbed.process_channel import ProcessChannel

DATA = Path(__file__).parent / "data" / "bottleneck"
RESOURCES = {"disk.read", "network.send", "cpu.sender", "network.receive", "disk.write",
             "cpu.receiver"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["bottleneck", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------------ saved lines


@pytest.mark.parametrize(("name", "planted"), [("network", "network.receive"),
                                               ("disk-write", "disk.write"),
                                               ("cpu", "cpu.receiver")])
def test_saved_lines_name_the_planted_bottleneck(capsys, name, planted):
    code, out, err = run(capsys, "--summaries", str(DATA / f"{name}.jsonl"), "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["bottleneck"] == answer["candidate"] == planted
    assert answer["similar"] == []
    assert {t["other"] for t in answer["tests"]} == RESOURCES - {planted, "network.send"}
    assert all(t["lower"] and t["p"] < answer["alpha"] / 2 for t in answer["tests"])
    rows = {r["resource"]: r for r in answer["resources"]}
    assert set(rows) == RESOURCES
    assert not rows["network.send"]["tested"]
    assert "window" in rows["network.send"]["why_not"]
    assert min(rows[r]["tput_i_bytes_per_s"] for r in RESOURCES - {"network.send"}) == \
        rows[planted]["tput_i_bytes_per_s"]
    assert answer["bytes"] > 0
    assert answer["seconds"] > 0


def test_two_at_one_rate_are_statistically_similar(capsys):
    code, out, _ = run(capsys, "--summaries", str(DATA / "similar.jsonl"), "--json")
    answer = json.loads(out)
    assert code == 0
    assert answer["bottleneck"] is None
    assert {answer["candidate"], *answer["similar"]} == {"disk.read", "network.receive"}
    assert answer["verdict"].startswith("statistically similar: ")
    assert [t["other"] for t in answer["tests"] if not t["lower"]] == answer["similar"]


def test_the_text_answer_fits_80_columns(capsys):
    code, out, _ = run(capsys, "--summaries", str(DATA / "network.jsonl"))
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "verdict: network.receive is the bottleneck" in out
    assert "network.receive" in out.split("resource")[1].splitlines()[1]  # lowest first
    assert "\nnext: the network from the sender to the receiver" in out


def _lines() -> list[str]:
    return (DATA / "network.jsonl").read_text().splitlines()


@pytest.mark.parametrize(("lines", "said"), [
    (lambda ls: [*ls[:2], "not json", *ls[2:]], ":3: not valid JSON"),
    (lambda ls: [ls[0].replace('"resources"', '"resourcez"'), *ls[1:]],
     ":1: field 'resources' Field required"),
    (lambda ls: [*ls, '{"event": "error", "kind": "runtime", "message": "disk full"}'],
     "the transfer failed here (disk full)"),
    (lambda ls: [x for x in ls if '"side":"receive"' not in x],
     "no receive side's `done` line"),
    (lambda ls: [x for x in ls if '"done"' in x], "fewer than two intervals"),
])
def test_saved_lines_that_are_no_whole_transfer_are_said_at_their_line(capsys, tmp_path,
                                                                       lines, said):
    saved = tmp_path / "t.jsonl"
    saved.write_text("\n".join(lines(_lines())) + "\n")
    code, out, err = run(capsys, "--summaries", str(saved))
    assert code == 2
    assert err.startswith(f"linkgrad: error: {saved}"), err
    assert said in err, err
    assert out == ""


def test_a_missing_summaries_file_is_named(capsys, tmp_path):
    code, _, err = run(capsys, "--summaries", str(tmp_path / "none.jsonl"), "--json")
    assert code == 2
    assert f"{tmp_path / 'none.jsonl'}: cannot read" in err, err


# ------------------------------------------------------------------------ live, no SSH


class LocalHost:
    """A host that is this machine: a command runs through a shell, as sshd runs it."""

    def __init__(self, endpoint: Endpoint, timeout_s: float) -> None:
        self.name, self.address = endpoint.name, endpoint.hostname

    def run(self, argv: list[str], timeout_s: float = 30.0) -> str:
        raise AssertionError("bottleneck runs nothing to completion")

    def open_lines(self, argv: list[str]) -> ProcessChannel:
        return ProcessChannel(subprocess.Popen(["sh", "-c", shlex.join(argv)],
                                               stdin=subprocess.PIPE, stdout=subprocess.PIPE))

    def close(self) -> None:
        pass


@pytest.fixture
def experiment(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(bottleneck_cli, "Connection", LocalHost)
    (tmp_path / "known_hosts").write_text("")
    path = tmp_path / "local.yaml"
    path.write_text(f"""
name: local
hosts: [{{name: a, address: 127.0.0.1}}, {{name: b, address: 127.0.0.1}}]
ssh: {{known_hosts: known_hosts, python: {sys.executable}}}
web_log: {{host: a, path: /dev/null}}
transactions: {{all: ^/}}
""")
    return path


def live(capsys, experiment: Path, *argv: str, source: str = "sent.bin",
         destination: str = "got.bin") -> tuple[int, str, str]:
    d = experiment.parent
    return run(capsys, str(experiment), "--from", f"a:{d / source}", "--to",
               f"b:{d / destination}", *argv)


def test_a_live_transfer_is_tested_saved_and_leaves_no_file(capsys, experiment):
    d = experiment.parent
    code, out, err = live(capsys, experiment, "--size", "64M", "--interval", "0.01",
                          "--output", str(d / "saved.jsonl"), "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["bytes"] == 64 << 20
    assert answer["source"] == f"a:{d}/sent.bin"
    assert answer["destination"] == f"b:{d}/got.bin"
    assert {r["resource"] for r in answer["resources"]} == RESOURCES
    assert f"receiving into b:{d}/got.bin on port " in err
    assert f"sending a:{d}/sent.bin to 127.0.0.1:" in err
    assert not (d / "sent.bin").exists()
    assert not (d / "got.bin").exists()
    code, out, _ = run(capsys, "--summaries", str(d / "saved.jsonl"), "--json")
    again = json.loads(out)
    assert code == 0
    assert (again["verdict"], again["tests"]) == (answer["verdict"], answer["tests"])


def test_a_save_that_fails_comes_after_the_answer_and_leaves_nothing(capsys, experiment):
    d = experiment.parent
    (d / "taken").mkdir()
    code, out, err = live(capsys, experiment, "--size", "64M", "--interval", "0.01",
                          "--output", str(d / "taken"), "--json")
    assert code == 2, err
    answer, end = json.JSONDecoder().raw_decode(out)
    assert answer["bytes"] == 64 << 20  # the answer, printed before the failure (then it)
    assert "cannot write: Is a directory" in out[end:] + err, (out, err)
    assert sorted(p.name for p in d.iterdir()) == ["known_hosts", "local.yaml", "taken"]


def test_a_save_the_machine_fails_is_exit_1(capsys, monkeypatch, tmp_path):
    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(bottleneck_cli, "write_whole", full)
    monkeypatch.setattr(bottleneck_cli, "_live", lambda args: (bottleneck_cli.answer_of(
        read_lines((DATA / "network.jsonl").read_text(), "n"), "a:/s", "b:/d", 0.05),
        ["{}"]))
    code, out, err = run(capsys, "x.yaml", "--output", str(tmp_path / "t.jsonl"))
    assert code == 1
    assert "verdict: network.receive is the bottleneck" in out
    assert "No space left on device" in err


def test_keep_leaves_the_files_and_an_existing_source_is_sent_as_it_is(capsys, experiment):
    d = experiment.parent
    (d / "mine.bin").write_bytes(b"x" * (4 << 20))
    code, _, err = live(capsys, experiment, "--interval", "0.01", "--keep", "--json",
                          source="mine.bin")
    assert code in (0, 1), err  # 4 blocks may be too few intervals to test: said, exit 1
    assert (d / "got.bin").read_bytes() == (d / "mine.bin").read_bytes()


def test_a_destination_that_exists_is_refused_and_left_as_it_was(capsys, experiment):
    d = experiment.parent
    (d / "got.bin").write_text("precious")
    code, _, err = live(capsys, experiment, "--size", "8M")
    assert code == 2
    assert f"field '--to': the receiver on b: {d}/got.bin exists" in err, err
    assert (d / "got.bin").read_text() == "precious"
    assert not (d / "sent.bin").exists()


def test_a_source_that_exists_with_size_is_refused_and_the_receiver_cleans_up(capsys,
                                                                             experiment):
    d = experiment.parent
    (d / "sent.bin").write_text("mine")
    code, _, err = live(capsys, experiment, "--size", "8M")
    assert code == 2
    assert f"field '--from': the sender on a: {d}/sent.bin exists" in err, err
    assert (d / "sent.bin").read_text() == "mine"
    assert not (d / "got.bin").exists()  # the receiver's file went with its lease


def test_a_host_without_linkgrad_s_python_is_a_runtime_failure(capsys, experiment):
    experiment.write_text(experiment.read_text().replace(sys.executable, "/no/such/python"))
    code, _, err = live(capsys, experiment, "--size", "8M")
    assert code == 1
    assert "the receiver on b ended without a word (exit status 127)" in err, err
    assert "ssh.python (/no/such/python)" in err


@pytest.mark.parametrize(("argv", "said"), [
    (["--from", "a:/tmp/x"], "give --to (or --summaries FILE)"),
    (["--from", "a", "--to", "b:/tmp/y"], "field '--from': 'a': expected HOST:PATH"),
    (["--from", "a:tmp/x", "--to", "b:/tmp/y"], "field '--from': 'a:tmp/x': expected HOST:PATH"),
    (["--from", "nope:/tmp/x", "--to", "gone:/tmp/y"],
     "field '--from': no host 'nope' in {experiment} (its hosts: a, b)\n"
     "field '--to': no host 'gone'"),
    (["--from", "a:/tmp/x", "--to", "b:/tmp/x"], "--from and --to name the same path /tmp/x"),
    (["--from", "a:/tmp/x", "--to", "b:/tmp/y", "--size", "lots"],
     "argument --size: 'lots': expected a number of bytes"),
    (["--from", "a:/tmp/x", "--to", "b:/tmp/y", "--output", "/no/dir/t.jsonl"],
     "no directory /no/dir to write into"),
    (["--from", "a:/tmp/x", "--to", "b:/tmp/y", "--interval", "0"],
     "field '--interval': 0 s: expected 0.01 to 3600"),
])
def test_bad_input_is_one_sentence_and_exit_2(capsys, experiment, argv, said):
    code, out, err = run(capsys, str(experiment), *argv)
    assert code == 2
    assert said.format(experiment=experiment) in err, err
    assert out == ""
    assert "Traceback" not in err


def test_summaries_take_no_hosts(capsys, experiment):
    code, _, err = run(capsys, str(experiment), "--summaries", str(DATA / "cpu.jsonl"),
                       "--from", "a:/tmp/x")
    assert code == 2
    assert "--summaries tests saved lines: give no EXPERIMENT, --from" in err


# ------------------------------------------------------------------------ builders


def test_sizes_and_places_are_read_strictly():
    assert bottleneck_cli.parse_size("268435456") == 256 << 20
    assert bottleneck_cli.parse_size("256M") == bottleneck_cli.parse_size("256MiB") == 256 << 20
    assert bottleneck_cli.parse_size("2g") == 2 << 30
    assert parse_host_path("web:/var/tmp/x", "--to") == HostPath("web", "/var/tmp/x")
    assert parse_host_path("web:/a:b", "--to") == HostPath("web", "/a:b")  # the first colon
    with pytest.raises(InputError, match="--to"):
        parse_host_path(":/var/tmp/x", "--to")


def test_each_side_is_leased_and_removes_what_it_made_unless_kept():
    plan = TransferPlan(HostPath("a", "/s"), HostPath("b", "/d"), 1 << 20, True, 0.5, False,
                        "py")
    assert receiver_argv(plan, "fd00::2", "t0k") == [
        "py", "-m", "injector.leased", "--", "py", "-m", "sniffer.transfer", "receive",
        "--listen", "fd00::2", "--port", "0", "--token", "t0k", "--accept-timeout-s",
        "60.1049", "--max-bytes", "1048576", "--path", "/d", "--interval-s", "0.5", "--remove"]
    assert sender_argv(plan, "fd00::2", 4000, "t0k")[7:] == [
        "send", "--to", "[fd00::2]:4000", "--token", "t0k", "--path", "/s", "--size",
        "1048576", "--new", "--interval-s", "0.5", "--remove"]
    kept = TransferPlan(HostPath("a", "/s"), HostPath("b", "/d"), 1 << 20, False, 0.5, True,
                        "py")
    assert "--remove" not in receiver_argv(kept, "h", "t")
    assert "--max-bytes" not in receiver_argv(kept, "h", "t")  # the file there is sent whole
    assert "--new" not in sender_argv(kept, "h", 1, "t")


# ------------------------------------------------------------------------ what is measured


def test_tput_i_is_bytes_over_busy_time_not_the_mean_of_rates():
    """Nineteen 1 MiB calls of 1 ms and one of 480 ms (a blkio throttle's pattern): 20 MiB in
    0.499 s is ~42 MB/s; the mean of the calls' rates would read ~1 GB/s."""
    calipers = Calipers()
    t = 0.0
    for duration in [0.001] * 19 + [0.48]:
        calipers.time(float(1 << 20), t, t + duration)
        t += duration
    interval = TransferInterval(event="calipers", side="receive", from_s=0.0, to_s=t,
                                resources={"disk.write": calipers.summary()})
    [got] = tput_i([interval, interval])["disk.write"][:1]
    assert got == pytest.approx(20 * (1 << 20) / 0.499)
    assert calipers.summary().rate.mean > 20 * got  # what the paper's mean would say


class ScriptedCpu:
    def __init__(self, *readings: tuple[float, float]) -> None:
        self.readings = list(readings)

    def read(self) -> tuple[float, float]:
        return self.readings.pop(0)


def test_a_disk_is_not_charged_its_thread_s_waits_for_a_cpu_and_the_network_is():
    now = iter([0.0, 10.0, 10.030, 10.060])
    clock = ThreadClock(clock=lambda: next(now))  # its own first mark: 0.0
    clock.cpu = ScriptedCpu((0.001, 0.0), (0.002, 0.020),  # type: ignore[assignment]
                            (0.003, 0.045))
    clock.mark()  # 10.000, 0 s waited so far
    assert clock.lap() == pytest.approx((10.0, 10.010))  # 30 ms, 20 of them waiting: 10 ms
    assert clock.lap(less_cpu_waits=False) == pytest.approx((10.030, 10.060))


def test_a_call_that_was_all_cpu_wait_is_charged_a_floor_so_its_bytes_have_time():
    """A 1 MiB write of 10 ms, then one whose 5 ms were all a wait for the CPU: both blocks'
    bytes over both calls' time, never 2 MiB over the first call's 10 ms."""
    now = iter([0.0, 1.0, 1.010, 1.015])
    clock = ThreadClock(clock=lambda: next(now))
    clock.cpu = ScriptedCpu((0.0, 0.0), (0.0, 0.0), (0.0, 0.005))  # type: ignore[assignment]
    clock.mark()
    meter = Meter("receive", ("disk.write",), "cpu.receiver", io.StringIO(), 60.0)
    meter.time("disk.write", 1 << 20, clock.lap())
    second = clock.lap()  # 5 ms, all of them waiting for the CPU
    assert second == pytest.approx((1.010, 1.010 + MIN_SPAN_S))
    meter.time("disk.write", 1 << 20, second)
    meter.emit()
    [line] = [TransferInterval.model_validate_json(x)
              for x in meter.out.getvalue().splitlines()]  # type: ignore[attr-defined]
    [rate] = tput_i([line])["disk.write"]
    assert rate == pytest.approx(2 * (1 << 20) / (0.010 + MIN_SPAN_S))


def test_spans_are_timed_by_the_monotonic_clock():
    assert ThreadClock().clock is time.perf_counter
    meter = Meter("send", ("disk.read",), "cpu.sender", io.StringIO(), 1.0)
    assert meter.clock is time.perf_counter

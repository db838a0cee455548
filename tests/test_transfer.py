"""linkgrad's own disk-to-disk transfer, over loopback: the bytes arrive whole, and each resource
is summarised per interval for the bottleneck test."""

from __future__ import annotations

import hashlib
import io
import json
import os
import queue
import socket
import threading
from pathlib import Path

import pytest

from sniffer import transfer_files
from sniffer.transfer import Listen, main, receive, send

TOKEN = "0123456789abcdef0123456789abcdef"


def _lines(out: io.StringIO) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_transfer_arrives_whole_with_each_resource_s_calipers(tmp_path: Path):
    size = 24 * (1 << 20) + 123  # not a whole block: the receiver cuts its last one to size
    got_out, sent_out, ports = io.StringIO(), io.StringIO(), queue.Queue()
    receiver = threading.Thread(target=receive, args=(Listen(TOKEN, "127.0.0.1"),
                                                      tmp_path / "got.bin", got_out, 0.02),
                                kwargs={"ready": ports.put})
    receiver.start()
    port = ports.get(timeout=10)
    for stray in (b"f" * len(TOKEN) + (1 << 40).to_bytes(8, "big"), b""):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(stray)  # a wrong token, or none (it closes): refused
    sent = send(("127.0.0.1", port), tmp_path / "source.bin", size, sent_out, 0.02,
                token=TOKEN)
    receiver.join(timeout=60)
    assert sent == size
    source, got = (tmp_path / "source.bin").read_bytes(), (tmp_path / "got.bin").read_bytes()
    assert hashlib.sha256(got).digest() == hashlib.sha256(source).digest()
    sends, receives = _lines(sent_out), _lines(got_out)
    assert sends[-1]["event"] == receives[-1]["event"] == "done"
    assert sends[-1]["bytes"] == receives[-1]["bytes"] == size
    total = {r: sum(line["resources"][r]["value"]["sum"] for line in lines
                    if line["resources"][r]["value"])
             for lines, rs in ((sends, ("disk.read", "network.send")),
                               (receives, ("network.receive", "disk.write"))) for r in rs}
    assert total == dict.fromkeys(total, float(size))  # every byte through every resource once
    assert not any("notes" in line for line in sends + receives)  # ext4 takes O_DIRECT


def test_a_receiver_refuses_a_size_over_its_maximum_and_times_out_alone(tmp_path: Path):
    out, ports = io.StringIO(), queue.Queue()
    errors: queue.Queue[BaseException] = queue.Queue()

    def run() -> None:
        try:
            receive(Listen(TOKEN, "127.0.0.1", max_bytes=1 << 20), tmp_path / "got.bin", out,
                    ready=ports.put)
        except BaseException as e:
            errors.put(e)

    thread = threading.Thread(target=run)
    thread.start()
    with pytest.raises(ConnectionError):  # the receiver closes on it
        send(("127.0.0.1", ports.get(timeout=10)), tmp_path / "big.bin", 2 << 20,
             io.StringIO(), token=TOKEN)
    thread.join(timeout=30)
    assert "more than the 1048576 this receiver takes" in str(errors.get(timeout=1))
    assert not (tmp_path / "got.bin").exists()
    with pytest.raises(TimeoutError, match="no sender with this transfer's token"):
        receive(Listen(TOKEN, "127.0.0.1", timeout_s=0.2), tmp_path / "got.bin", out)


@pytest.mark.parametrize("side", ["send", "receive"])
def test_a_symbolic_link_at_a_path_is_refused_in_a_sentence(tmp_path: Path, capsys, side):
    target = tmp_path / "target"
    target.write_text("precious")
    link = tmp_path / "link"
    os.symlink(target, link)
    argv = (["send", "--to", "127.0.0.1:9", "--path", str(link)] if side == "send" else
            ["receive", "--listen", "127.0.0.1", "--port", "0", "--path", str(link)])
    assert main([*argv, "--token", TOKEN]) == 2
    [line] = _lines_of(capsys.readouterr().out)
    assert line["event"] == "error"
    assert line["kind"] == "input"
    assert f"{link} is a symbolic link" in line["message"]
    assert target.read_text() == "precious"
    assert link.is_symlink()


def _lines_of(text: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in text.splitlines()]


def test_the_source_is_synced_every_64_mib_not_at_once_at_the_end(tmp_path: Path, monkeypatch):
    """A stop (SIGTERM) is handled between syncs: never after one sync of gigabytes."""
    synced: list[int] = []
    monkeypatch.setattr(transfer_files, "SYNC_EVERY", 3 << 20)
    monkeypatch.setattr(os, "fdatasync", lambda fd: synced.append(os.lseek(fd, 0, os.SEEK_CUR)))
    fd = transfer_files.create(tmp_path / "source.bin", os.O_RDWR)
    try:
        transfer_files.write_source(fd, (10 << 20) + 5)
        assert synced == [3 << 20, 6 << 20, 9 << 20]
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # rewound, to be read back
    finally:
        os.close(fd)
    assert (tmp_path / "source.bin").stat().st_size == (10 << 20) + 5

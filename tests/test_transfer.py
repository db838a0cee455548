"""linkgrad's own disk-to-disk transfer, over loopback: the bytes arrive whole, and each resource
is summarised per interval for the bottleneck test."""

from __future__ import annotations

import hashlib
import io
import json
import queue
import threading
from pathlib import Path

from sniffer.transfer import receive, send


def _lines(out: io.StringIO) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_transfer_arrives_whole_with_each_resource_s_calipers(tmp_path: Path):
    size = 24 * (1 << 20) + 123  # not a whole block: the receiver cuts its last one to size
    got_out, sent_out, ports = io.StringIO(), io.StringIO(), queue.Queue()
    receiver = threading.Thread(target=receive, args=(0, tmp_path / "got.bin", got_out, 0.02),
                                kwargs={"ready": ports.put})
    receiver.start()
    sent = send(("127.0.0.1", ports.get(timeout=10)), tmp_path / "source.bin", size, sent_out,
                0.02)
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

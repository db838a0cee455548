"""Malformed request lines to the real injector and sniffer, in a namespace of their own.

Part of benchmarks/fuzz_cli.py. Both daemons run as `ip netns exec lgfuzz-PID python -m ...`
(the injector makes iptables chains: the namespace keeps them off the host); the namespace is
removed afterwards, and only the processes started here are ended. Each line is sent raw and
classed: reply_error or reply_ok (one reply, the daemon serves on), internal_error (an error
reply saying "internal error": a bug caught, a failure all the same), no_reply (nothing within
the timeout; a blank line, which the protocol skips, is blank_ignored), invalid_reply (not
strict JSON), daemon_died, traceback (on its stderr). Bad
start options of the injector are cases too: each must end with exit 2, no traceback.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import selectors
import subprocess
import time
from pathlib import Path
from typing import Any

INJECTOR_BASE: list[dict[str, Any]] = [
    {"id": 1, "cmd": "health"},
    {"id": 2, "cmd": "add", "link": {"proto": "udp", "dst": "10.77.0.2:7000"},
     "schedule": {"kind": "constant", "magnitude_ms": 1.0, "duration_s": 5.0}},
    {"id": 3, "cmd": "add", "link": {"proto": "tcp", "src": "10.77.0.1", "dst": "10.77.0.2:5432"},
     "schedule": {"kind": "square", "start": 1.8e9, "period_s": 8.0, "magnitude_ms": 5.0,
                  "cycles": 4}},
    {"id": 4, "cmd": "schedule", "link": {"proto": "udp", "dst": "10.77.0.2:7000"},
     "schedule": {"kind": "off"}},
    {"id": 5, "cmd": "remove", "link": {"proto": "udp", "dst": "10.77.0.2:7000"}},
    {"id": 6, "cmd": "stats"},
]
SNIFFER_BASE: list[dict[str, Any]] = [
    {"id": 1, "cmd": "health"},
    {"id": 2, "cmd": "poll", "threshold": 1},
    {"id": 3, "cmd": "watch", "interval_s": 5.0, "threshold": 2},
    {"id": 4, "cmd": "unwatch"},
]
VALUES: list[Any] = [float("nan"), float("inf"), -1e308, 1e308, 10**400, -1, 0, True, None,
                     "", "x" * 70_000, "٣", "0.0.0.0/0", "::/0", "10.0.0.1/0", "10.77.0.2:٧",
                     "1.2.3.4:99999", "256.1.1.1", [], {}, [1], {"a": 1}, "health", 2**63,
                     "10.77.0.2:-1", " 10.77.0.2", "10.77.0.2\n", "\udcff"]
START_ARGS = [["--max-magnitude-ms", v] for v in ("inf", "nan", "-1", "1e308", "x")] + \
             [["--max-duration-s", v] for v in ("inf", "nan", "0", "1e308")] + \
             [["--queue", v] for v in ("-1", "70000", "x", "1e3")] + \
             [["--max-queue-len", v] for v in ("0", "-5", "10000000000")]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    return out


def mutate(rng: random.Random, base: dict[str, Any]) -> tuple[str, bytes]:
    """One bad line made from a good request."""
    data = json.loads(json.dumps(base))
    roll = rng.random()
    if roll < 0.55:
        path = rng.choice(_paths(data))
        value = rng.choice(VALUES)
        node = data
        for key in path[:-1]:
            node = node[key]
        if rng.random() < 0.15:
            del node[path[-1]]
            return f"delete:{'.'.join(path)}", json.dumps(data).encode()
        node[path[-1]] = value
        name = f"value:{'.'.join(path)}={str(value)[:16]}"
        try:
            return name, json.dumps(data).encode()
        except ValueError:
            node[path[-1]] = "@@"
            return name, json.dumps(data).replace('"@@"', "9" * 5000).encode()
    raw = json.dumps(data).encode()
    kind = rng.choice(["deep", "non_utf8", "truncate", "long", "not_object", "dup_key",
                       "nul", "bom", "garbage", "blank_pad"])
    at = rng.randrange(len(raw))
    if kind == "deep":
        depth = rng.choice([100, 10_000, 200_000])
        return f"deep{depth}", b'{"id": 9, "cmd": ' + b"[" * depth + b"]" * depth + b"}"
    if kind == "non_utf8":
        return "non_utf8", raw[:at] + b"\xff\xc0" + raw[at:]
    if kind == "truncate":
        return f"truncate@{at}", raw[:at]
    if kind == "long":
        return "long_line", raw[:-1] + b', "pad": "' + b"x" * (2 << 20) + b'"}'
    if kind == "not_object":
        return "not_object", rng.choice([b"[]", b"1", b"null", b'"health"', b"NaN", b"true"])
    if kind == "dup_key":
        return "dup_key", raw[:-1] + b', "cmd": "stats"}'
    if kind == "nul":
        return "nul", raw[:at] + b"\x00" + raw[at:]
    if kind == "bom":
        return "bom", b"\xef\xbb\xbf" + raw
    if kind == "garbage":
        return "garbage", rng.randbytes(200).replace(b"\n", b" ")
    return "padded", b"   " + raw + b"\t  "


class Daemon:
    """One daemon in the namespace, its stdout read line by line with a timeout."""

    def __init__(self, netns: str, python: Path, module: str, *args: str,
                 stderr: Path) -> None:
        self.stderr_path = stderr
        self.err = stderr.open("ab")
        self.proc = subprocess.Popen(["ip", "netns", "exec", netns, str(python), "-m", module,
                                      *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err)
        assert self.proc.stdout is not None
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.proc.stdout, selectors.EVENT_READ)
        self.buffer = b""
        self.ready = self.line(30.0)

    def line(self, timeout_s: float) -> bytes | None:
        """The next line; b"" at EOF, None on timeout."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sel.select(left):
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)  # type: ignore[union-attr]
            if not chunk:
                return b""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def ask(self, raw: bytes, timeout_s: float) -> tuple[str, str]:
        """(verdict, the reply or what happened instead)."""
        try:
            self.proc.stdin.write(raw + b"\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except BrokenPipeError:
            return "daemon_died", f"stdin closed (exit {self.proc.poll()})"
        while True:
            line = self.line(timeout_s)
            if line is None:
                return "no_reply", f"nothing in {timeout_s} s"
            if line == b"":
                return "daemon_died", f"stdout closed (exit {self.proc.wait(10)})"
            try:
                reply = json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(
                    ValueError(c)))
            except ValueError:
                return "invalid_reply", line[:300].decode("utf-8", "replace")
            if isinstance(reply, dict) and reply.get("event") == "report":
                continue
            if not isinstance(reply, dict) or "ok" not in reply:
                return "invalid_reply", line[:300].decode("utf-8", "replace")
            if not reply["ok"] and "internal error" in json.dumps(reply.get("error")):
                return "internal_error", line[:300].decode()  # a bug said politely: a failure
            return ("reply_ok" if reply["ok"] else "reply_error"), line[:300].decode()

    def stop(self) -> int | None:
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)
        finally:
            self.sel.close()
            self.err.close()


def _tracebacks(path: Path) -> int:
    return path.read_bytes().count(b"Traceback (most recent call last)")


def run_daemon_campaign(n: int, seed: int, venv_bin: Path, log_dir: Path,
                        code: Path | None = None) -> list[dict[str, Any]]:
    """`n` cases over both daemons (a few of them bad injector start options); `code`: run
    that source tree's daemons."""
    if n <= 0:
        return []
    if code is not None:
        os.environ["PYTHONPATH"] = str(code.resolve())  # inherited by ip netns exec
        os.chdir(code)  # python -m looks in the working directory first
    netns = f"lgfuzz-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    results: list[dict[str, Any]] = []
    try:
        subprocess.run(["ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up"],
                       check=True)
        python = venv_bin / "python"
        results += _start_options(netns, python, log_dir, seed)
        per_daemon = (n - len(results)) // 2
        for module, base, args in (("injector", INJECTOR_BASE, ["--queue", "5731"]),
                                   ("sniffer", SNIFFER_BASE, [])):
            results += _lines(netns, python, module, args, base, per_daemon, seed, log_dir)
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
    return results


def _start_options(netns: str, python: Path, log_dir: Path, seed: int) -> list[dict[str, Any]]:
    out = []
    for args in START_ARGS:
        argv = ["ip", "netns", "exec", netns, str(python), "-m", "injector", "--queue", "5732",
                *args]
        try:
            proc = subprocess.run(argv, input=b"", capture_output=True, timeout=30)
            err = proc.stderr.decode("utf-8", "replace")
            verdict = ("traceback" if "Traceback (most recent" in err else
                       "exit2_named" if proc.returncode == 2 and args[0] in err else
                       "started" if proc.returncode == 0 else "exit2_unnamed"
                       if proc.returncode == 2 else "crash")
            detail = err[-300:]
        except subprocess.TimeoutExpired:
            verdict, detail = "hang", "no exit in 30 s"
        out.append({"daemon": "injector-start", "mutation": " ".join(args),
                    "verdict": verdict, "detail": detail})
    return out


def _lines(netns: str, python: Path, module: str, args: list[str], base: list[dict[str, Any]],
           n: int, seed: int, log_dir: Path) -> list[dict[str, Any]]:
    stderr = log_dir / f"lgfuzz-{module}-{os.getpid()}.err"
    daemon = Daemon(netns, python, module, *args, stderr=stderr)
    out = []
    try:
        for i in range(n):
            rng = random.Random(f"{seed}:{module}:{i}")
            name, raw = mutate(rng, rng.choice(base))
            before = _tracebacks(stderr)
            verdict, detail = daemon.ask(raw, timeout_s=10.0)
            if _tracebacks(stderr) > before:
                verdict = "traceback"
            if verdict == "reply_ok" and daemon.proc.poll() is not None:
                verdict = "daemon_died"
            if verdict == "no_reply" and not raw.strip() and daemon.proc.poll() is None:
                verdict = "blank_ignored"  # the protocol skips blank lines: none is right
            out.append({"daemon": module, "index": i, "mutation": name, "verdict": verdict,
                        "detail": detail, "line": base64.b64encode(raw[:4096]).decode()})
            if verdict in ("daemon_died", "no_reply", "traceback") or \
                    daemon.proc.poll() is not None:
                daemon.stop()
                daemon = Daemon(netns, python, module, *args, stderr=stderr)
    finally:
        daemon.stop()
    return out

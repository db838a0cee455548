"""Hostile and careless input through the real `linkgrad` CLI and both real daemons (issue 13).

A seeded campaign, the way issue 13 found its holes: it builds valid inputs (the experiment,
latencies, placement and candidates files of experiments/, a small synthetic web log with its
injection record, and a real run directory made by the run loop against the fake remote),
then generates `--cases` bad versions of them — NaN/inf, 1e308, huge ints, wrong types,
duplicate keys, YAML tags, non-UTF-8, BOMs, truncation, corrupt gzip, deep nesting, long URLs,
empty files, directories, symlinks, unreadable files, nasty option values — and runs each
through `.venv/bin/linkgrad gradient|plan|predict|place|route|latency|report|run [--resume]`
as a subprocess, with and without `--json`. A share of the cases are malformed request lines
to `python -m injector` and `python -m sniffer`, started in a network namespace made for the
campaign (and removed after), plus bad injector start options.

Each case is classed by what happened, never by what was hoped for:
  exit2_named       exit 2, the bad file (or option) named on stderr: the contract
  exit2_unnamed     exit 2 without naming it                         (failure)
  exit0             accepted: the input was valid
  exit0_invalid     accepted an input that is invalid for certain    (failure)
  lines_lost        an accepted log whose requests and malformed lines do not add up to
                    its lines that are not blank (--json tells)     (failure)
  exit1_sentence    exit 1 with a "linkgrad: error:" sentence (e.g. a host not reachable)
  exit1_silent      exit 1 without one                               (failure)
  traceback         stderr holds "Traceback (most recent call last)" (failure)
  internal_error    the last-resort handler's sentence: a bug        (failure)
  invalid_json      --json output that is not one strict JSON value  (failure)
  hang              no exit within --timeout-s                        (failure)
  crash             killed by a signal, or another exit code         (failure)
Daemon lines: reply_error / reply_ok (good), no_reply, invalid_reply, daemon_died,
traceback (failures). Prints counts per command and class, writes benchmarks/out/fuzz_cli.json
with every failing case's argv and its bad file (base64) saved for replay, and its section of
RESULTS.md.

    nice -n 19 .venv/bin/python -m benchmarks.fuzz_cli [--cases 3500] [--seed 13] [--jobs 1]

Case i depends only on (seed, i): a smaller --cases runs a prefix of the same campaign.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks.fuzz_daemons import run_daemon_campaign
from benchmarks.fuzz_world import OPTIONAL, READS, Input, World, build_world, check_world
from benchmarks.results_md import update_section

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).parent / "out" / "fuzz_cli.json"
LINKGRAD = ROOT / ".venv" / "bin" / "linkgrad"
TRACEBACK = "Traceback (most recent call last)"
INTERNAL = "linkgrad: internal error"
FAILURES = {"exit2_unnamed", "lines_lost", "exit0_invalid", "exit1_silent", "traceback",
            "internal_error", "invalid_json", "hang", "crash", "no_reply", "invalid_reply",
            "daemon_died"}


@dataclass
class Case:
    """One command line over one set of files; `named` is what exit 2 must name."""

    index: int
    command: str
    slot: str
    mutation: str
    argv: list[str]
    named: str
    as_json: bool
    must_reject: bool = False
    as_nobody: bool = False
    files: dict[str, str] = field(default_factory=dict)  # saved for replay: name -> base64
    log_lines: int | None = None  # a web log's lines that are not blank: each must be counted


@dataclass
class Outcome:
    index: int
    command: str
    slot: str
    mutation: str
    verdict: str
    exit_code: int | None
    seconds: float
    stderr_tail: str
    stdout_head: str


# --- mutations of one file ---------------------------------------------------------------

NASTY_VALUES: list[Any] = [
    float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324, 0, 0.0, -1, -0.0,
    10**30, -(10**30), 10**4000, 2**63, 2**64, True, False, None, "", " ", "x" * 10_000,
    "../../x", "a/b", "\u202e", "\U0001f600", "٣", "NaN", "1e999", "-", [], {}, [1, 2],
    {"a": 1}, [[[]]], 1e9, 1e-9, 3601, 513, 10_001,
]
YAML_SCALARS = [
    ".nan", ".inf", "-.inf", "1e308", "1e999", "!!binary aGVsbG8=",
    '!!python/object/apply:os.system ["true"]', "!!set {a, b}", "2026-11-23",
    "2026-11-23T10:00:00Z", "!!float 1", "!!int '3'", "!custom x", "0x1F", "0o17", "1_000",
    "~", "yes", "no", "on", "&a [1]", "*nowhere", "[" * 200 + "]" * 200, "{a: 1, a: 2}",
    "'unterminated", '"\\x00"', '"\\ud800"', "@reserved", "`tick", "|\n  block", ">-",
    "- 1", "? complex", "!!str", "!!map {}", "9" * 5000,
]


def _rng_choice(rng: random.Random, seq: list[Any]) -> Any:
    return seq[rng.randrange(len(seq))]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in parsed JSON/YAML data."""
    out: list[tuple[Any, ...]] = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _set(node: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> None:
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value


def _dump(data: Any, as_yaml: bool) -> bytes:
    if as_yaml:
        return yaml.safe_dump(data, allow_unicode=True, width=10**6).encode()
    return json.dumps(data).encode()  # NaN/Infinity written as Python writes them


def structural(rng: random.Random, raw: bytes, as_yaml: bool) -> tuple[str, bytes, bool]:
    """A value somewhere replaced, deleted, retyped or nested deep; (name, bytes, invalid)."""
    data = yaml.safe_load(raw) if as_yaml else json.loads(raw)
    paths = _paths(data)
    if not paths:
        return "structural:empty", raw, False
    path = _rng_choice(rng, paths)
    what = rng.random()
    if what < 0.12:
        _set(data, path, None, delete=True)
        return f"delete:{'.'.join(map(str, path))}", _dump(data, as_yaml), False
    if what < 0.2:
        depth = rng.choice([65, 500, 10_000])
        text = "[" * depth + "]" * depth
        _set(data, path, "@@DEEP@@")
        body = _dump(data, as_yaml).decode().replace(
            "'@@DEEP@@'" if as_yaml else '"@@DEEP@@"', text)
        # past 64 levels YAML is refused; JSON that deep is JSON (an ignored field may hold
        # it) until Python's parser cannot follow
        invalid = as_yaml or depth >= 10_000
        return f"deep{depth}:{'.'.join(map(str, path))}", body.encode(), invalid
    value = _rng_choice(rng, NASTY_VALUES)
    _set(data, path, value)
    invalid = (isinstance(value, float) and value != value) or value in (float("inf"),
                                                                       float("-inf"))
    name = f"value:{'.'.join(map(str, path))}={str(value)[:20]!s}"
    try:
        return name, _dump(data, as_yaml), invalid
    except ValueError:  # an int past Python's str limit: write its digits by hand
        _set(data, path, "@@BIG@@")
        text = _dump(data, as_yaml).decode().replace(
            "'@@BIG@@'" if as_yaml else '"@@BIG@@"', "9" * 5000)
        return name + "(digits)", text.encode(), False


def yaml_text(rng: random.Random, raw: bytes) -> tuple[str, bytes, bool]:
    """A `key: value` line's value replaced by a tag or odd scalar, or the line given twice."""
    lines = raw.decode().splitlines(keepends=True)
    keyed = [i for i, line in enumerate(lines)
             if ":" in line and not line.lstrip().startswith("#")]
    if not keyed:
        return "yaml:none", raw, False
    i = _rng_choice(rng, keyed)
    head = lines[i].split(":", 1)[0]
    if rng.random() < 0.3:
        lines.insert(i + 1, lines[i] if lines[i].endswith("\n") else lines[i] + "\n")
        return f"duplicate_key:{head.strip()}", "".join(lines).encode(), True
    scalar = _rng_choice(rng, YAML_SCALARS)
    lines[i] = f"{head}: {scalar}\n"
    invalid = scalar.startswith(("!!binary", "!!python", "!!set", ".nan", ".inf", "-.inf",
                                 "2026-11-23", "!custom"))
    return f"yaml_scalar:{head.strip()}={scalar[:24]}", "".join(lines).encode(), invalid


def json_text(rng: random.Random, raw: bytes) -> tuple[str, bytes, bool]:
    """A number's text replaced (NaN, Infinity, 1e999, -0, huge), or an object key doubled."""
    text = raw.decode()
    if rng.random() < 0.35 and '{"' in text:
        starts = [i for i in range(len(text) - 1) if text.startswith('{"', i)]
        at = _rng_choice(rng, starts) + 1
        end = text.index(",", at) if "," in text[at:] else -1
        if end > at and ":" in text[at:end]:
            return "duplicate_key", (text[:at] + text[at:end] + ", " + text[at:]).encode(), True
    data = json.loads(text)
    numbers = [path for path in _paths(data) if isinstance(_get(data, path), int | float)
               and not isinstance(_get(data, path), bool)]
    if not numbers:
        return "json:none", raw, False
    path = _rng_choice(rng, numbers)
    new = _rng_choice(rng, ["NaN", "Infinity", "-Infinity", "1e999", "-0", "1e308", "0",
                            "9" * 5000, "1.5", "true", "null", '"1"', "[]", "1e-400"])
    invalid = new in ("NaN", "Infinity", "-Infinity", "1e999")
    _set(data, path, "@@NUMBER@@")
    out = json.dumps(data, indent=2).replace('"@@NUMBER@@"', new)
    return f"json_number:{'.'.join(map(str, path))}={new[:12]}", out.encode(), invalid


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


def bytes_level(rng: random.Random, raw: bytes, text_format: bool) -> tuple[str, bytes, bool]:
    """Damage that does not care what the file says."""
    kinds = ["truncate", "non_utf8", "bom8", "bom16", "nul", "flip", "empty", "random",
             "crlf", "cut_line", "double", "long_line", "latin1"]
    kind = _rng_choice(rng, kinds)
    n = len(raw)
    at = rng.randrange(max(n, 1))
    invalid = text_format and kind in ("non_utf8", "nul", "bom16", "latin1")
    if kind == "truncate":
        return f"truncate@{at}", raw[:at], False
    if kind == "non_utf8":
        return f"non_utf8@{at}", raw[:at] + b"\xff\xfe\x80" + raw[at:], invalid
    if kind == "bom8":
        return "bom_utf8", b"\xef\xbb\xbf" + raw, False
    if kind == "bom16":
        return "utf16", raw.decode("utf-8", "replace").encode("utf-16"), invalid
    if kind == "nul":
        return f"nul@{at}", raw[:at] + b"\x00" + raw[at:], invalid
    if kind == "flip":
        if not raw:
            return "flip:empty", raw, False
        flipped = bytearray(raw)
        flipped[at] ^= 1 << rng.randrange(8)
        return f"flip@{at}", bytes(flipped), False
    if kind == "empty":
        return "empty", b"", False
    if kind == "random":
        return "random_bytes", rng.randbytes(rng.choice([1, 100, 5000])), False
    if kind == "crlf":
        return "crlf", raw.replace(b"\n", b"\r\n"), False
    if kind == "cut_line":
        lines = raw.splitlines(keepends=True)
        if lines:
            del lines[rng.randrange(len(lines))]
        return "delete_line", b"".join(lines), False
    if kind == "double":
        return "doubled", raw + raw, False
    if kind == "latin1":
        return "latin1", raw.decode("utf-8", "replace").replace("a", "\u00e4").encode(
            "latin-1", "replace"), invalid and b"a" in raw
    return "long_line", raw[:at] + b"x" * rng.choice([10_000, 1_000_000]) + raw[at:], False


def log_mutation(rng: random.Random, raw: bytes, world: World, fmt: str
                 ) -> tuple[str, bytes, bool]:
    """Web-log damage: lines whose stamps, times or URLs are absurd, or no usable requests."""
    lines = raw.splitlines(keepends=True)
    kind = _rng_choice(rng, ["long_url", "one_stamp", "ends_early", "odd_field", "odd_field",
                             "many_long_urls", "only_header", "garbage_lines", "reorder",
                             "bytes", "bytes"])
    if kind == "bytes":
        return bytes_level(rng, raw, text_format=False)
    body = lines[1:] if fmt == "csv" else lines
    head = lines[:1] if fmt == "csv" else []
    if kind == "long_url":
        i = rng.randrange(len(body))
        size = rng.choice([8_192, 100_000, 2_000_000])
        body[i] = body[i].replace(b"/", b"/" + b"u" * size, 1)
        return f"long_url:{size}", b"".join(head + body), False
    if kind == "many_long_urls":
        for _ in range(20):
            i = rng.randrange(len(body))
            body[i] = body[i].replace(b"/", b"/" + rng.randbytes(4).hex().encode() * 2000, 1)
        return "many_long_urls", b"".join(head + body), False
    if kind == "one_stamp":
        stamp = world.log_stamp(body[0], fmt)
        return "one_stamp", b"".join(head + [world.with_stamp(b, fmt, stamp) for b in body]),\
            False
    if kind == "ends_early":
        return "ends_before_injection", b"".join(head + body[: len(body) // 3]), False
    if kind == "only_header":
        return "no_requests", b"".join(head), False
    if kind == "reorder":
        rng.shuffle(body)
        return "shuffled", b"".join(head + body), False
    if kind == "garbage_lines":
        for _ in range(rng.choice([1, 10, len(body) // 5])):
            body.insert(rng.randrange(len(body) + 1), rng.randbytes(40) + b"\n")
        return "garbage_lines", b"".join(head + body), False
    i = rng.randrange(len(body))
    value = _rng_choice(rng, [b"NaN", b"inf", b"-1", b"1e308", b"99999999999999999999",
                              b"0", b"-0", b"1e-320", b"\xff", b"", b"9" * 400, b"1e19"])
    body[i] = world.with_field(body[i], fmt, rng, value)
    return f"field={value[:12]!r}", b"".join(head + body), False


def gzip_mutation(rng: random.Random, raw: bytes) -> tuple[str, bytes, bool]:
    packed = gzip.compress(raw, mtime=0)
    kind = _rng_choice(rng, ["truncated", "flipped", "not_gzip", "gzip_of_garbage",
                             "concatenated", "header_only"])
    if kind == "truncated":
        return "gz_truncated", packed[: rng.randrange(10, len(packed))], False
    if kind == "flipped":
        at = rng.randrange(10, len(packed) - 8)
        b = bytearray(packed)
        b[at] ^= 0xFF
        return f"gz_flipped@{at}", bytes(b), False
    if kind == "not_gzip":
        return "gz_not_gzip", raw, False
    if kind == "gzip_of_garbage":
        return "gz_of_random", gzip.compress(rng.randbytes(5000)), False
    if kind == "concatenated":
        return "gz_concatenated", packed + packed, False
    return "gz_header_only", packed[:10], False


def pcap_mutation(rng: random.Random, raw: bytes) -> tuple[str, bytes, bool]:
    """A capture's damage: cut (tcpdump killed), a link type no reader here knows, a record
    length past the file, the magic of another format, or bytes flipped anywhere."""
    kind = _rng_choice(rng, ["truncate", "linktype", "caplen", "magic", "flip", "flip",
                             "header_only", "bytes"])
    b = bytearray(raw)
    if kind == "truncate":
        at = rng.randrange(len(raw))
        return f"pcap_truncate@{at}", raw[:at], False
    if kind == "linktype":
        value = _rng_choice(rng, [0, 105, 127, 147, 65535, 2**31])
        b[20:24] = value.to_bytes(4, "little")
        return f"pcap_linktype={value}", bytes(b), False
    if kind == "caplen":
        b[24 + 8:24 + 12] = (2**31).to_bytes(4, "little")
        return "pcap_caplen_huge", bytes(b), False
    if kind == "magic":
        b[0:4] = _rng_choice(rng, [b"\x0a\x0d\x0d\x0a", b"\x1f\x8b\x08\x00", b"PK\x03\x04"])
        return f"pcap_magic={bytes(b[:4])!r}", bytes(b), False
    if kind == "header_only":
        return "pcap_header_only", raw[:24], False
    if kind == "flip":
        for _ in range(rng.choice([1, 5, 50])):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return "pcap_flips", bytes(b), False
    return bytes_level(rng, raw, text_format=False)


def jsonl_mutation(rng: random.Random, raw: bytes) -> tuple[str, bytes, bool]:
    """One line of a JSON-lines file (a saved trace) spoiled as a JSON file is."""
    lines = raw.splitlines(keepends=True)
    i = rng.randrange(len(lines))
    if not lines[i].strip():
        return "jsonl:blank", raw, False
    name, data, bad = structural(rng, lines[i], False) if rng.random() < 0.6 else \
        json_text(rng, lines[i])
    lines[i] = data.replace(b"\n", b" ") + b"\n"
    return f"line{i + 1}:{name}", b"".join(lines), bad


# --- the cases -----------------------------------------------------------------------------

NASTY_ARGS = ["nan", "inf", "-inf", "1e308", "-1e308", "1e999", "-1", "0", "", "x", "0x10",
              " 1", "٣", "9" * 400, "1e-320", "-0", "3.5", "--json", "1" * 20, "\udcff"]
NASTY_REGEX = ["x=(", "=x", "x=", "noequals", "x=" + "(" * 500 + "a" + ")" * 500,
               "x=a{99999999}", "x=[z-a]", "x=(?P<n>a)(?P<n>b)", "x=\\", "x=" + "a" * 100_000,
               "x=(a*)*b", "x=.*", "\u202e=x"]


def _write_mutant(rng: random.Random, inp: Input, target: Path, world: World
                  ) -> tuple[str, bool, bool]:
    """Write a bad version of `inp.base` at `target`; (mutation, certainly invalid, nobody)."""
    raw = inp.base.read_bytes()
    roll = rng.random()
    if roll < 0.08:  # what stands at the path is not a readable file
        what = _rng_choice(rng, ["directory", "dangling_symlink", "symlink_loop", "dev_null",
                                 "missing", "unreadable", "symlink_to_dir", "dev_zero"])
        if what == "directory":
            target.mkdir()
        elif what == "dangling_symlink":
            target.symlink_to(target.parent / "nowhere")
        elif what == "symlink_loop":
            target.symlink_to(target)
        elif what == "dev_null":
            target.symlink_to("/dev/null")
        elif what == "dev_zero":  # endless bytes: an endless line
            target.symlink_to("/dev/zero")
        elif what == "symlink_to_dir":
            target.symlink_to(target.parent)
        elif what == "unreadable":
            target.write_bytes(raw)
            target.chmod(0)
            return what, True, True
        return what, what != "dev_null" or inp.kind in ("yaml", "json"), False
    if inp.kind.startswith("log"):
        fmt = "csv" if inp.kind == "log-csv" else "nginx"
        if inp.kind == "log-gz":
            if roll < 0.5:
                name, data, bad = gzip_mutation(rng, gzip.decompress(raw))
            else:
                name, data, bad = log_mutation(rng, gzip.decompress(raw), world, "nginx")
                data = gzip.compress(data, mtime=0)
        else:
            name, data, bad = log_mutation(rng, raw, world, fmt)
    elif inp.kind == "pcap":
        name, data, bad = pcap_mutation(rng, raw)
    elif inp.kind == "jsonl":
        name, data, bad = jsonl_mutation(rng, raw) if roll < 0.6 else \
            bytes_level(rng, raw, text_format=True)
    elif roll < 0.45:
        name, data, bad = structural(rng, raw, inp.kind == "yaml")
    elif roll < 0.7:
        name, data, bad = (yaml_text if inp.kind == "yaml" else json_text)(rng, raw)
    else:
        name, data, bad = bytes_level(rng, raw, text_format=True)
    target.write_bytes(data)
    return name, bad, False


def make_case(index: int, seed: int, world: World, root: Path) -> Case:
    rng = random.Random(f"{seed}:{index}")
    case_dir = root / f"{index:05d}"
    case_dir.mkdir(parents=True)
    as_json = rng.random() < 0.5
    if rng.random() < 0.18:  # a nasty option value rather than a nasty file
        command, argv, option = world.nasty_option(rng, case_dir, NASTY_ARGS, NASTY_REGEX)
        return Case(index, command, f"option:{option}", "option", argv + (["--json"] if as_json
                    else []), option, as_json)
    inp = _rng_choice(rng, world.inputs)
    if inp.in_run:
        target = world.copy_run(case_dir) / inp.in_run
        target.unlink()
    else:
        target = case_dir / inp.base.name
        # an experiment names known_hosts beside it: without it every mutant stops there
        (case_dir / "known_hosts").write_text("")
        for name, src in inp.beside.items():  # what the file names beside it (a suite's)
            shutil.copy(src, case_dir / name)
    mutation, invalid, nobody = _write_mutant(rng, inp, target, world)
    invalid = invalid and (inp.in_run is None or inp.in_run in READS[inp.reads or inp.command])
    if mutation == "missing" and inp.in_run in OPTIONAL.get(inp.reads or inp.command, ()):
        invalid = False
    if nobody:  # what it writes (an export's file) goes beside: nobody may write there
        case_dir.chmod(0o777)
    argv = inp.argv(case_dir, target)
    files = {}
    if target.is_file() and not target.is_symlink() and target.stat().st_size < 3_000_000:
        files[inp.base.name] = base64.b64encode(target.read_bytes()).decode()
    lines = _log_lines(target, inp.kind) if inp.kind.startswith("log") and not inp.in_run \
        and inp.counts_lines else None
    return Case(index, inp.command, inp.slot, mutation, argv + (["--json"] if as_json else []),
                target.name, as_json, invalid, nobody, files, lines)


def _log_lines(path: Path, kind: str) -> int | None:
    """Lines of a log that are not blank (a CSV's header left out): the requests plus the
    malformed lines of an accepted log must add up to it (nothing lost)."""
    if path.is_symlink() or not path.is_file():  # /dev/zero has no end to count to
        return None
    try:
        data = path.read_bytes()
        data = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        return None
    lines = [line for line in data.splitlines() if line.strip()]
    if kind == "log-csv" and lines and lines[0].startswith(b"start_unix_s"):
        lines = lines[1:]
    return len(lines)


# --- running and classing ------------------------------------------------------------------


def strict_json(text: str) -> bool:
    def refuse(name: str) -> None:
        raise ValueError(name)
    try:
        json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return False
    return True


def classify(case: Case, code: int | None, out: str, err: str) -> str:
    if code is None:
        return "hang"
    if TRACEBACK in err:
        return "traceback"
    if INTERNAL in err:
        return "internal_error"
    if code == 3 and case.command == "regress" and "night" in (out + err).lower():
        return "exit1_sentence"  # regress's own: the night failed, said (its --help's 3)
    if code < 0 or code not in (0, 1, 2):
        return "crash"
    if case.as_json and not strict_json(out):
        return "invalid_json"
    if code == 2:  # an option's value may be wrong for a file it refers to: its field named
        named = case.named in err or (case.slot.startswith("option:") and (
            "field '" in err or "linkgrad: error: /" in err))  # or the file it names
        return "exit2_named" if named else "exit2_unnamed"
    if code == 0 and case.log_lines is not None and case.as_json:
        log = json.loads(out).get("log", {})
        if log.get("malformed", {}).get("total") != case.log_lines:
            return "lines_lost"
    if code == 0:
        return "exit0_invalid" if case.must_reject else "exit0"
    if case.command == "regress" and out.startswith(("REGRESSION", "{")):
        return "exit1_sentence"  # regress's exit 1 is its verdict: a regression, named
    return "exit1_sentence" if "linkgrad: error:" in err else "exit1_silent"


MEMORY_LIMIT = 4 * 2**30  # address space per case: an endless read fails, not the machine


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_case(case: Case, world: World, timeout_s: float) -> Outcome:
    command = {"resume": "run", "export-otlp": "export"}.get(case.command, case.command)
    argv = [*world.linkgrad, command, *case.argv]
    if case.as_nobody:
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    began = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, env=world.env,
                              cwd=world.root, stdin=subprocess.DEVNULL, preexec_fn=_limit)
        code: int | None = proc.returncode
        out, err = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = None, e.stdout or b"", e.stderr or b""
    seconds = time.monotonic() - began
    out_s, err_s = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    verdict = classify(case, code, out_s, err_s)
    return Outcome(case.index, case.command, case.slot, case.mutation, verdict, code,
                   round(seconds, 2), err_s[-1500:], out_s[:300])


def summarize(outcomes: list[Outcome], daemon: list[dict[str, Any]]) -> dict[str, Any]:
    per_command: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        per_command[o.command][o.verdict] += 1
    for d in daemon:
        per_command[d["daemon"]][d["verdict"]] += 1
    per_class = Counter(o.verdict for o in outcomes) + Counter(d["verdict"] for d in daemon)
    return {"per_command": {k: dict(sorted(v.items())) for k, v in sorted(per_command.items())},
            "per_class": dict(sorted(per_class.items())),
            "failures": sum(n for k, n in per_class.items() if k in FAILURES)}


def _compared(path: Path | None) -> list[str]:
    """A line on an earlier campaign's failures (e.g. before this campaign's fixes)."""
    if path is None:
        return []
    before = json.loads(path.read_text())
    cases = sum(before["per_class"].values())
    classes = Counter(f["verdict"] for f in before["failing"])
    return ["", f"Before the fixes it led to (`--code` {before['code']}, seed {before['seed']},"
            f" {cases} cases): **{before['failures']}** failures ("
            + ", ".join(f"{k} {v}" for k, v in sorted(classes.items())) + ")."]


def _markdown(args: argparse.Namespace, summary: dict[str, Any], total: int,
              wall_s: float) -> str:
    classes = sorted({c for v in summary["per_command"].values() for c in v})
    rows = ["| command | " + " | ".join(classes) + " |", "|---" * (len(classes) + 1) + "|"]
    for command, counts in summary["per_command"].items():
        rows.append(f"| {command} | " + " | ".join(str(counts.get(c, "")) for c in classes)
                    + " |")
    return "\n".join([
        "## Fuzzing the CLI and the daemons (`benchmarks/fuzz_cli.py`, issue 13)",
        "",
        f"{total} generated bad inputs (seed {args.seed}) through the real `linkgrad` "
        "subcommands as subprocesses and as request lines to the real injector and sniffer "
        f"in a namespace; {platform.node()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
        f" {wall_s / 60:.0f} min. Issue 13 found 183 tracebacks and 20 invalid `--json` "
        f"outputs in about 3,500 such cases; this campaign finds **{summary['failures']}** "
        "failures (traceback, internal error, invalid JSON, hang, crash, daemon died, exit 2 "
        "not naming the file, certainly invalid input accepted, log lines unaccounted for).",
        *_compared(args.compare),
        "",
        *rows,
        "",
        "`exit2_named`: exit 2 naming the file or option (the contract); `exit0`: the "
        "mutated input was still valid; `exit1_sentence`: a runtime failure said in one "
        "sentence (no host reachable); daemon `reply_error`: one error reply, daemon serving on.",
    ])


def _save(args: argparse.Namespace, outcomes: list[Outcome], daemon: list[dict[str, Any]],
          by_index: dict[int, Case], wall_s: float, partial: bool) -> dict[str, Any]:
    """Write OUT (also while the campaign runs: a long one interrupted keeps what it saw)."""
    summary = summarize(outcomes, daemon)
    failing = [{**asdict(o), "argv": by_index[o.index].argv,
                "files": by_index[o.index].files} for o in outcomes if o.verdict in FAILURES]
    failing += [d for d in daemon if d["verdict"] in FAILURES]
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"seed": args.seed, "cases": args.cases, "partial": partial,
                               "code": str(args.code or ROOT), "wall_s": wall_s, **summary,
                               "failing": failing}, indent=1))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=3500)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--jobs", type=int, default=1, help="CLI cases run at once")
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--daemon-share", type=float, default=0.15,
                        help="fraction of the cases that are daemon request lines")
    parser.add_argument("--only", help="run only cases of this command")
    parser.add_argument("--code", type=Path, help="run the linkgrad of this source tree "
                        "(e.g. `git archive` of an older commit), with this venv")
    parser.add_argument("--no-results-md", action="store_true")
    parser.add_argument("--compare", type=Path, metavar="FUZZ_CLI.json",
                        help="an earlier campaign's output, quoted in RESULTS.md beside this one")
    args = parser.parse_args()
    # The campaign's own reading of what it made is bounded too: a bug of its own must be a
    # MemoryError here, not the kernel's OOM killer on a shared machine.
    resource.setrlimit(resource.RLIMIT_AS, (2 * MEMORY_LIMIT, 2 * MEMORY_LIMIT))
    began = time.monotonic()
    n_daemon = round(args.cases * args.daemon_share)
    with tempfile.TemporaryDirectory(prefix="lgfuzz-") as tmp:
        os.chmod(tmp, 0o755)  # the unreadable-file cases run as nobody
        world = build_world(Path(tmp), args.code)
        for slot, (code, err) in check_world(world).items():
            print(f"valid {slot}: exit {code} {err.splitlines()[-1:] if code else ''}")
        cases_root = Path(tmp) / "cases"
        cases = [make_case(i, args.seed, world, cases_root) for i in range(args.cases - n_daemon)]
        if args.only:
            cases = [c for c in cases if c.command == args.only]
        by_index = {c.index: c for c in cases}
        outcomes: list[Outcome] = []
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for n, o in enumerate(pool.map(lambda c: run_case(c, world, args.timeout_s), cases)):
                outcomes.append(o)
                if o.verdict in FAILURES:
                    print(f"[{n + 1}/{len(cases)}] {o.command} {o.slot} {o.mutation}: "
                          f"{o.verdict}: {o.stderr_tail.strip().splitlines()[-1:]}", flush=True)
                if (n + 1) % 50 == 0:
                    print(f"[{n + 1}/{len(cases)}] ...", flush=True)
                    _save(args, outcomes, [], by_index, time.monotonic() - began, partial=True)
        daemon = [] if args.only else run_daemon_campaign(n_daemon, args.seed, LINKGRAD.parent,
                                                                  Path(tmp), args.code)
    wall_s = time.monotonic() - began
    summary = _save(args, outcomes, daemon, by_index, wall_s, partial=False)
    for command, counts in summary["per_command"].items():
        print(f"{command:10s} " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print("total:", ", ".join(f"{k} {v}" for k, v in summary["per_class"].items()))
    print(f"failures: {summary['failures']} of {len(outcomes) + len(daemon)}; "
          f"details in {OUT}")
    if not args.no_results_md and not args.only:
        update_section("fuzz_cli", _markdown(args, summary, len(outcomes) + len(daemon), wall_s))


if __name__ == "__main__":
    sys.exit(main())

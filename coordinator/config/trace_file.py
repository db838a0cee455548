"""A saved message trace (`linkgrad paths --output-trace`, a run's paths-trace.jsonl): one JSON
line per traced host, its name, addresses, listening sockets, messages and the connections
it saw opened, after a format line; read back for `linkgrad paths --trace`."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from coordinator.config.bounds import MAX_UNIX_S
from linkgrad.errors import InputError, Problem
from linkgrad.paths.messages import NO_THREAD
from linkgrad.paths.reconcile import HostRecord, HostTrace
from linkgrad.reading import loads_json

TRACE_FORMAT = "linkgrad-trace/1"
TRACE_FILE = "paths-trace.jsonl"  # in a run directory


def write_trace(path: Path, hosts: list[HostTrace]) -> None:
    """One JSON line per host: its name, addresses, listening sockets and messages."""
    lines = [json.dumps({"format": TRACE_FORMAT})]
    for h in hosts:
        lines.append(json.dumps({"host": h.name, "addresses": sorted(h.addresses),
                                 "listening": sorted(h.listening),
                                 "records": [[*r.local, *r.remote, r.sent, r.seq_first,
                                              r.seq_end, r.first_s, r.last_s, r.loopback,
                                              r.process, r.thread] for r in h.records],
                                 "openings": [[*c, *s, None if math.isnan(t) else t]
                                              for c, s, t in h.openings]}))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")  # whole or not at all, as a run's files
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def read_trace(path: Path) -> Iterator[HostTrace]:
    """The hosts of a file `write_trace` wrote; a bad line is an InputError naming it and the
    field, each value checked for its type and range (a trace is a file a user hands in)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(Problem(f"cannot read the trace: {e.strerror or e}", file=str(path))) \
            from e
    except UnicodeDecodeError as e:
        raise InputError(Problem(f"not UTF-8 text (byte {e.start}): not a linkgrad trace",
                                 file=str(path))) from e
    lines = text.splitlines()
    if not lines or _json(path, 1, lines[0]).get("format") != TRACE_FORMAT:
        raise InputError(Problem(f"not a linkgrad trace: the first line must be "
                                 f'{{"format": "{TRACE_FORMAT}"}}', file=str(path), line=1))
    for n, line in enumerate(lines[1:], start=2):
        entry = _json(path, n, line)
        where = "host"
        try:
            name = _text(entry["host"])
            where = "addresses"
            addresses = frozenset(_text(a) for a in _list(entry["addresses"]))
            where = "listening"
            listening = frozenset(_endpoint(e) for e in _list(entry["listening"]))
            records = []
            for i, r in enumerate(_list(entry["records"])):
                where = f"records.{i}"
                records.append(_record(_list(r)))
            openings = []
            for i, o in enumerate(_list(entry.get("openings", []))):
                where = f"openings.{i}"
                openings.append(_opening(_list(o)))
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise InputError(Problem(
                f"expected a host entry (host, addresses, listening, records of 11 or 12 "
                f"fields, openings of 4 or 5): {type(e).__name__}: {str(e)[:200]}",
                file=str(path), line=n, field=where)) from e
        yield HostTrace(name, addresses, listening, records, tuple(openings))


def _record(r: list[Any]) -> HostRecord:
    # the thread (12th field) came later: a trace saved before has none
    if len(r) not in (11, 12):
        raise ValueError(f"{len(r)} fields")
    return HostRecord(_endpoint(r[0:2]), _endpoint(r[2:4]), _flag(r[4]), _seq(r[5]),
                      _seq(r[6]), _time(r[7]), _time(r[8]), _flag(r[9]), _text(r[10]),
                      _thread(r[11]) if len(r) > 11 else NO_THREAD)


def _opening(o: list[Any]) -> tuple[tuple[str, int], tuple[str, int], float]:
    # their times came later than the openings (NaN: not known)
    if len(o) not in (4, 5):
        raise ValueError(f"{len(o)} fields")
    return _endpoint(o[0:2]), _endpoint(o[2:4]), \
        _time(o[4]) if len(o) > 4 and o[4] is not None else math.nan


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise TypeError(f"expected a list, got {type(v).__name__}")
    return v


def _text(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def _int(v: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError(f"{what} {str(v)[:40]}: expected an integer {lo} to {hi}")
    return v


def _endpoint(e: list[Any]) -> tuple[str, int]:
    if len(e) != 2:
        raise ValueError(f"an endpoint is [address, port], got {len(e)} values")
    return _text(e[0]), _int(e[1], 0, 65535, "port")


def _seq(v: Any) -> int:
    return _int(v, 0, (1 << 32) - 1, "sequence number")


def _thread(v: Any) -> int:
    return _int(v, NO_THREAD, (1 << 31) - 1, "thread")


def _flag(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected true or false, got {str(v)[:40]}")
    return v


def _time(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= MAX_UNIX_S:
        raise ValueError(f"time {str(v)[:40]}: expected unix seconds 0 to {MAX_UNIX_S:g}")
    return float(v)


def _json(path: Path, n: int, line: str) -> dict[str, Any]:  # free-form: read field by field
    try:  # strictly, as every JSON file linkgrad reads: no NaN, no key given twice
        value = loads_json(line, str(path))
    except InputError as e:
        raise InputError([replace(p, line=n) for p in e.problems]) from e
    if not isinstance(value, dict):
        raise InputError(Problem("expected a JSON object", file=str(path), line=n))
    return value

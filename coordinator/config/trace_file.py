"""A saved message trace (`linkgrad paths --output-trace`, a run's paths-trace.jsonl): one JSON
line per traced host, its name, addresses, listening sockets, messages and the connections
it saw opened, after a format line; read back for `linkgrad paths --trace`."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from linkgrad.errors import InputError, Problem
from linkgrad.paths.messages import NO_THREAD
from linkgrad.paths.reconcile import HostRecord, HostTrace

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
    """The hosts of a file `write_trace` wrote; a bad line is an InputError naming it."""
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(Problem(f"cannot read the trace: {e.strerror}", file=str(path))) \
            from e
    lines = text.splitlines()
    if not lines or _json(path, 1, lines[0]).get("format") != TRACE_FORMAT:
        raise InputError(Problem(f"not a linkgrad trace: the first line must be "
                                 f'{{"format": "{TRACE_FORMAT}"}}', file=str(path), line=1))
    for n, line in enumerate(lines[1:], start=2):
        entry = _json(path, n, line)
        try:
            # the thread (12th field) came later: a trace saved before has none
            records = [HostRecord((r[0], int(r[1])), (r[2], int(r[3])), bool(r[4]), int(r[5]),
                                  int(r[6]), float(r[7]), float(r[8]), bool(r[9]), str(r[10]),
                                  int(r[11]) if len(r) > 11 else NO_THREAD)
                       for r in entry["records"]]
            # the connections opened (SYNs) came later too: none in a trace saved before,
            # and their times later still (NaN: not known)
            openings = tuple(((str(o[0]), int(o[1])), (str(o[2]), int(o[3])),
                              float(o[4]) if len(o) > 4 and o[4] is not None else math.nan)
                             for o in entry.get("openings", []))
            yield HostTrace(str(entry["host"]), frozenset(entry["addresses"]),
                            frozenset((a, int(p)) for a, p in entry["listening"]), records,
                            openings)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise InputError(Problem(f"a host entry needs host, addresses, listening and "
                                     f"records of 11 or 12 fields (and openings of 4 or 5) "
                                     f"({type(e).__name__}: {e})",
                                     file=str(path), line=n)) from e


def _json(path: Path, n: int, line: str) -> dict[str, Any]:  # free-form: read field by field
    try:
        value = json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(Problem(f"not JSON: {e.msg}", file=str(path), line=n)) from e
    if not isinstance(value, dict):
        raise InputError(Problem("expected a JSON object", file=str(path), line=n))
    return value

"""A front end's access log for a saved trace's client requests, as the server would have
written it (CSV: arrival, time to the answer's last byte, URL): the offline tests' web log.
The URLs alternate /a/N and /b/N, so transactions A=^/a/ and B=^/b/ split the requests."""

from __future__ import annotations

from pathlib import Path

from coordinator.config.trace_file import read_trace
from linkgrad.paths.analysis import client_requests
from linkgrad.paths.from_hosts import link_hosts


def write_front_end_log(trace: Path, out: Path) -> int:
    """Writes the log; the number of requests in it."""
    linked = link_hosts(list(read_trace(trace)), "context", 2.0, None).linked
    m, replies = linked.trace.messages, linked.trace.is_reply()
    rows = []
    for i, r in enumerate(client_requests(linked.trace).tolist()):
        answer = next((x for x in range(r + 1, len(m))
                       if m.conn[x] == m.conn[r] and replies[x]), None)
        ms = 1e3 * (m.send_s[answer] - m.recv_s[r]) if answer is not None else 1.0
        rows.append(f"{m.recv_s[r]:.6f},{ms:.3f},/{'ab'[i % 2]}/{i}")
    out.write_text("start_unix_s,response_ms,url\n" + "\n".join(rows) + "\n")
    return len(rows)

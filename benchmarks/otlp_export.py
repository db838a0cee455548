"""How long `linkgrad export RUN_DIR --otlp URL` takes on a run's capture, step by step:
linking the trace again (within the run's budget), building the spans, and sending them over
OTLP/HTTP to a local receiver that decodes every request as a collector does
(tests/fakes/otlp_receiver.py). One run.

    PYTHONPATH=. .venv/bin/python -m benchmarks.otlp_export RUN_DIR

Writes benchmarks/out/otlp-export.json and its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Any

from benchmarks.results_md import publish
from coordinator.config.run_dir import read_record
from coordinator.config.run_records import ExperimentAsRun
from coordinator.config.run_weblog import read_run_weblog
from coordinator.config.trace_file import TRACE_FILE, read_trace
from coordinator.export.otlp import send_traces, span_count
from linkgrad.paths.from_hosts import link_hosts
from linkgrad.paths.spans import request_traces
from tests.fakes.otlp_receiver import otlp_receiver


def measure(run_dir: Path) -> dict[str, Any]:
    experiment = read_record(run_dir / "experiment.json", ExperimentAsRun, "the experiment")
    started = time.perf_counter()
    hosts = list(read_trace(run_dir / TRACE_FILE))
    read_s = time.perf_counter() - started
    p = experiment.paths
    started = time.perf_counter()
    linked = link_hosts(hosts, p.linker, p.window_s, p.budget,
                        read_run_weblog(run_dir, experiment), experiment.transactions)
    link_s = time.perf_counter() - started
    started = time.perf_counter()
    traces = request_traces(linked.linked, linked.transaction_of)
    spans_s = time.perf_counter() - started
    with otlp_receiver() as receiver:
        started = time.perf_counter()
        sent = send_traces(receiver.url + "/v1/traces", traces.traces)
        send_s = time.perf_counter() - started
        received = len(receiver.spans)
    return {"run": run_dir.name, "application": experiment.app,
            "messages": len(linked.linked.trace.messages), "traces": len(traces.traces),
            "spans": span_count(traces.traces), "received_spans": received,
            "fragments": traces.fragments, "moved": traces.moved,
            "named": sum(t.transaction is not None for t in traces.traces),
            "requests": sent.requests, "read_s": read_s, "link_s": link_s,
            "spans_s": spans_s, "send_s": send_s,
            "machine": f"{platform.node()} {platform.release()}, {os.cpu_count()} cores",
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def markdown(r: dict[str, Any]) -> str:
    return "\n".join([
        f"One run, {r['date']}, {r['machine']}: the capture of run {r['run']} "
        f"({r['application']}), {r['messages']:,} messages (`PYTHONPATH=. .venv/bin/python "
        "-m benchmarks.otlp_export RUN_DIR`).",
        "",
        "| step | seconds |",
        "|---|---|",
        f"| read paths-trace.jsonl | {r['read_s']:.2f} |",
        f"| link again (the run's budget) | {r['link_s']:.2f} |",
        f"| build the spans | {r['spans_s']:.2f} |",
        f"| send over OTLP/HTTP ({r['requests']} requests) | {r['send_s']:.2f} |",
        "",
        f"{r['traces']:,} traces ({r['named']:,} named by their transaction), "
        f"{r['spans']:,} spans, {r['received_spans']:,} decoded by the receiver; "
        f"{r['fragments']} trees not sent (no client's request at their root), "
        f"{r['moved']} server spans moved into their client spans.",
    ])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path)
    result = measure(p.parse_args().run_dir)
    publish("otlp-export", result, markdown(result))


if __name__ == "__main__":
    main()

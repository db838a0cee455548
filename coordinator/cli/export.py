"""`linkgrad export RUN_DIR --prometheus FILE | --perfsonar URL | --esmond FILE`: a run's
results where operators already look. The builders are `coordinator.export`'s; this module
checks the arguments, writes files whole (a temporary file, then renamed: nothing
half-written) or PUTs the records, and says what it did. `--dry-run` prints, as JSON, what it
would write or send, and neither writes nor sends.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import socket
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import write_to_textfile
from rich.markup import escape

from coordinator.cli.command import Command
from coordinator.cli.terminal import terminal
from coordinator.cli.traces_out import otlp_dry_run, send_request_traces
from coordinator.config.run_dir import read_record
from coordinator.config.run_records import ExperimentAsRun
from coordinator.config.run_weblog import read_run_weblog
from coordinator.config.strict_json import dumps
from coordinator.config.trace_file import TRACE_FILE, read_trace
from coordinator.export import archive_put, esmond, perfsonar, prometheus
from coordinator.export.otlp import check_endpoint
from coordinator.export.proxy_auth import authorization, redacted
from coordinator.export.source import RunExport, read_run
from coordinator.regress.files import write_error, write_whole
from linkgrad.errors import InputError, Problem
from linkgrad.paths.budget import progress_line
from linkgrad.paths.candidates import TraceTooLong
from linkgrad.paths.from_hosts import link_hosts
from linkgrad.reading import read_text

WIDTH = 80

DESCRIPTION = """\
Exports a run directory's results: to a Prometheus text file for node_exporter's textfile
collector (each link's gradient per transaction with its 95% interval, SNAP's seconds per
class and phase, the host probes' metrics in node_exporter's names), to a perfSONAR 5 archive
(one pScheduler-shaped record per link measurement, PUT to its Logstash), or to a file of
esmond metadata and data documents (perfSONAR 4's archive), or, to an OpenTelemetry collector
(Jaeger, Tempo, any OTLP back end), every request of the run's causal-path capture as a trace,
linked again from paths-trace.jsonl within the run's linking budget and named by the
transactions of its saved web log. Files are written whole or not at all."""

EPILOG = """\
examples:
  linkgrad export runs/shop-20260301-1200 --prometheus /var/lib/prometheus/node-exporter/shop.prom
  linkgrad export runs/shop-20260301-1200 --perfsonar https://archive.example/logstash \\
      --auth-file /etc/perfsonar/logstash/proxy_auth.json
  linkgrad export runs/shop-20260301-1200 --esmond shop-esmond.json
  linkgrad export runs/shop-20260301-1200 --otlp http://localhost:4318
  linkgrad export runs/shop-20260301-1200 --perfsonar https://archive.example/logstash --dry-run"""


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run's directory")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--prometheus", type=Path, metavar="FILE.prom",
                        help="write the text exposition for node_exporter's textfile collector")
    target.add_argument("--perfsonar", metavar="URL",
                        help="PUT pScheduler-shaped records to a perfSONAR 5 archive's Logstash "
                        "(https://ARCHIVE/logstash)")
    target.add_argument("--esmond", type=Path, metavar="FILE",
                        help="write esmond metadata and data documents (perfSONAR 4's archive)")
    target.add_argument("--otlp", metavar="URL",
                        help="send every request the run's causal-path trace links as an "
                        "OpenTelemetry trace over OTLP/HTTP to this base endpoint "
                        "(http://COLLECTOR:4318; /v1/traces is appended; the "
                        "OTEL_EXPORTER_OTLP_* variables apply)")
    p.add_argument("--auth-file", type=Path, metavar="F",
                   help="with --perfsonar: Basic auth from a file shaped like perfSONAR's "
                   "/etc/perfsonar/logstash/proxy_auth.json")
    p.add_argument("--observer", metavar="HOST",
                   help="with --perfsonar or --esmond: the x-ps-observer header and the host of "
                   "the records' hrefs (default: the host that ran the run, from run.json)")
    p.add_argument("--insecure", action="store_true",
                   help="with --perfsonar: do not verify the archive's TLS certificate "
                   "(perfSONAR archives often have a self-signed one)")
    p.add_argument("--dry-run", action="store_true",
                   help="print, as JSON, what would be written or sent; write and send nothing")


def _version() -> str:
    try:
        return importlib.metadata.version("linkgrad")
    except importlib.metadata.PackageNotFoundError:  # a source tree, not installed
        return "unknown"


def _check_output(path: Path, option: str) -> None:
    try:
        is_dir, parent_is_dir = path.is_dir(), path.parent.is_dir()
    except OSError as e:  # stat itself failed: a name too long, a directory not searchable
        raise write_error(e, path, option) from e
    if is_dir:
        raise InputError(Problem("is a directory: name a file in it", str(path), field=option))
    if not parent_is_dir:
        raise InputError(Problem(f"no directory {path.parent} to write into", str(path),
                                 field=option))


def _written(write: Callable[[], None], path: Path, option: str) -> None:
    """`write()`, its OSError said as the path's problem (exit 2) or the machine's (exit 1)."""
    try:
        write()
    except OSError as e:
        raise write_error(e, path, option) from e


def _say(*paragraphs: str) -> None:
    for text in paragraphs:
        print(textwrap.fill(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False,
                            break_long_words=False))


def _observer(args: argparse.Namespace, run: RunExport) -> str:
    if args.observer:
        return str(args.observer)
    if run.journal is not None and run.journal.coordinator is not None:
        return run.journal.coordinator.host
    return socket.getfqdn()


def _to_prometheus(args: argparse.Namespace, run: RunExport) -> dict[str, Any]:
    path: Path = args.prometheus
    if path.suffix != ".prom":
        raise InputError(Problem("node_exporter's textfile collector reads only files named "
                                 "*.prom", str(path), field="--prometheus"))
    _check_output(path, "--prometheus")
    families = prometheus.families(run)
    registry = prometheus.registry_of(families)
    if args.dry_run:
        return {"target": "prometheus", "file": str(path),
                "text": prometheus.exposition(registry)}
    # a temporary file beside it, then renamed (removed if the write fails)
    _written(lambda: write_to_textfile(str(path), registry), path, "--prometheus")
    gradients = next((len(f.samples) for f in families if f.name == "linkgrad_gradient"), 0)
    hosts = {v[1] for f in families if f.name.startswith("linkgrad_host_") for v in f.samples}
    return {"target": "prometheus", "file": str(path), "metrics": len(families),
            "series": sum(len(f.samples) for f in families), "gradients": gradients,
            "links": len(run.last_per_link()), "hosts": len(hosts)}


def _to_perfsonar(args: argparse.Namespace, run: RunExport) -> dict[str, Any]:
    url: str = args.perfsonar
    archive_put.check_url(url)
    auth = authorization(read_text(args.auth_file, "the archive's credentials"),
                         str(args.auth_file)) if args.auth_file else None
    observer = _observer(args, run)
    records = [r.model_dump(mode="json") for r in perfsonar.records(run, observer, _version())]
    if args.dry_run:
        shown = archive_put.headers(observer, redacted(auth) if auth else None)
        return {"target": "perfsonar", "url": url, "method": "PUT", "headers": shown,
                "records": records}
    sent = archive_put.put_records(url, [dumps(r, indent=None, note=False) for r in records],
                                   observer, auth, str(args.auth_file) if args.auth_file else None,
                                   verify_tls=not args.insecure)
    return {"target": "perfsonar", "url": url, "observer": observer, "records": sent,
            "test_type": perfsonar.TEST_TYPE}


def _to_esmond(args: argparse.Namespace, run: RunExport) -> dict[str, Any]:
    path: Path = args.esmond
    _check_output(path, "--esmond")
    document = esmond.documents(run, _observer(args, run), _version())
    if args.dry_run:
        return {"target": "esmond", "file": str(path), "document": document}
    text = dumps(document, indent=2, note=False) + "\n"
    _written(lambda: write_whole(path, text), path, "--esmond")
    return {"target": "esmond", "file": str(path), "entries": len(document["entries"])}


def _summary(done: dict[str, Any], run: RunExport) -> None:
    head = f"Exported {run.run} (experiment {run.experiment})"
    if done["target"] == "prometheus":
        hosts = f"{done['hosts']} hosts' metrics" if done["hosts"] else \
            "no host metrics (the run has no hosts.json)"
        _say(f"{head} to {done['file']}: {done['series']} series in {done['metrics']} metrics, "
             f"{done['gradients']} gradients of {done['links']} links, {hosts}.",
             "Next: node_exporter reads it with --collector.textfile.directory="
             f"{Path(done['file']).parent}; query linkgrad_gradient in Prometheus, and alert "
             "when node_textfile_mtime_seconds goes stale.")
    elif done["target"] == "perfsonar":
        _say(f"{head}: {done['records']} records PUT to {done['url']} as observer "
             f"{done['observer']}.",
             "Next: in the archive they are index pscheduler_linkgrad (alias pscheduler); "
             "filter on test.type:linkgrad in OpenSearch Dashboards.")
    else:
        _say(f"{head} to {done['file']}: {done['entries']} esmond entries (metadata and data).",
             "Next: POST each entry's metadata to https://ARCHIVE/esmond/perfsonar/archive/ "
             "with 'Authorization: Token KEY', then PUT its data to the uri the archive "
             "answers.")


def _to_otlp(args: argparse.Namespace) -> int:
    """The run's requests as traces: its trace linked again (a run keeps patterns, not each
    request's tree), as the run linked it, named by the transactions of its web log."""
    url = check_endpoint(args.otlp, "--otlp")
    run_dir: Path = args.run_dir
    if not run_dir.is_dir():
        raise InputError(Problem("no such run directory", str(run_dir)))
    trace_path = run_dir / TRACE_FILE
    if not trace_path.exists() and not trace_path.is_symlink():
        raise InputError(Problem("the run has no causal-path trace to send (its experiment "
                                 "had paths off, or no host could be traced)", str(trace_path)))
    experiment_path = run_dir / "experiment.json"
    experiment = read_record(experiment_path, ExperimentAsRun, "the experiment as run") \
        if experiment_path.exists() or experiment_path.is_symlink() else ExperimentAsRun()
    hosts = list(read_trace(trace_path))
    console = terminal(stderr=True)
    p = experiment.paths
    try:
        linked = link_hosts(hosts, p.linker, p.window_s, p.budget,
                            read_run_weblog(run_dir, experiment), experiment.transactions,
                            progress=None if args.json or args.dry_run else
                            lambda g: console.print(escape(progress_line(g))))
    except TraceTooLong as e:
        raise InputError(Problem(str(e), str(trace_path))) from e
    if args.dry_run:
        print(dumps({"dry_run": True, "target": "otlp", "url": url,
                     "body": otlp_dry_run(linked)}, indent=None, note=False))
        return 0
    said = send_request_traces(url, linked)
    if args.json:
        print(dumps({"target": "otlp", "url": url, "said": said}))
    else:
        print(said)
    return 0


def export_command(args: argparse.Namespace) -> int:
    if args.auth_file is not None and args.perfsonar is None:
        raise InputError(Problem("only with --perfsonar", field="--auth-file"))
    if args.insecure and args.perfsonar is None:
        raise InputError(Problem("only with --perfsonar", field="--insecure"))
    if args.observer is not None and (args.prometheus is not None or args.otlp is not None):
        raise InputError(Problem("only with --perfsonar or --esmond", field="--observer"))
    if args.otlp is not None:
        return _to_otlp(args)
    run = read_run(args.run_dir, hosts=args.prometheus is not None)
    if not run.links:
        raise InputError(Problem("no link measured yet: nothing to export",
                                 str(args.run_dir / "gradients.json")))
    target = _to_prometheus if args.prometheus is not None else \
        _to_perfsonar if args.perfsonar is not None else _to_esmond
    done = target(args, run)
    if args.dry_run:
        print(dumps({"dry_run": True, **done}))
    elif args.json:
        print(dumps(done))
    else:
        _summary(done, run)
    return 0


COMMANDS = (Command("export", "export a run to Prometheus, perfSONAR or OpenTelemetry",
                    DESCRIPTION, _arguments, export_command, epilog=EPILOG),)

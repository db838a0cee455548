"""A run's saved web log (`weblog.log`), read with the format its experiment named: the
report's response figures and `export --otlp`'s transactions come from it."""

from __future__ import annotations

from pathlib import Path

from coordinator.config.run_records import ExperimentAsRun
from linkgrad.errors import InputError, Problem
from linkgrad.weblog.model import RequestLog
from linkgrad.weblog.read import bounded_lines, choose_format, line_parser

__all__ = ["WEBLOG_FILE", "read_run_weblog"]

WEBLOG_FILE = "weblog.log"


def read_run_weblog(run_dir: Path, experiment: ExperimentAsRun) -> RequestLog | None:
    """The run's saved requests; None when it saved none."""
    weblog, path = experiment.web_log, run_dir / WEBLOG_FILE
    if weblog is None or not (path.exists() or path.is_symlink()):  # a dangling link: said
        return None
    parse, _ = line_parser(choose_format(Path(weblog.path), weblog.format, weblog.log_format),
                           weblog.log_format)
    try:  # the server's bytes as they came: a bad byte is a malformed line, counted there
        with path.open(encoding="utf-8", errors="surrogateescape", newline="") as f:
            lines = list(bounded_lines(f, path))  # /dev/zero is no log to read whole
    except OSError as e:
        raise InputError(Problem(f"cannot read: {e.strerror or e}", str(path))) from e
    return parse(lines, str(path)) if lines else None

"""Loading an experiment file: validated whole (file:line:field), relative paths made
relative to the file, a `testbed:` tag resolved, every host a field names checked against the
hosts (after the tag filled them in), and the error watch checked against the web log's
format, all before any host is touched."""

from __future__ import annotations

from pathlib import Path

from coordinator.config.experiment import Experiment
from coordinator.config.experiment_files import field_problem
from coordinator.config.testbed_tag import from_testbed
from coordinator.config.yamlconf import line_of, load_yaml
from linkgrad.errors import InputError, Problem
from linkgrad.weblog.apache_format import compile_apache
from linkgrad.weblog.nginx_format import compile_nginx


def load_experiment(path: str | Path, testbed_root: Path | None = None) -> Experiment:
    """Validate the experiment; relative paths in it are relative to the file; a `testbed:`
    tag fills hosts, ssh and web_log from that running testbed."""
    path = Path(path)
    experiment = load_yaml(path, Experiment)
    base = path.resolve().parent
    if experiment.testbed is not None:
        experiment = from_testbed(experiment, path, testbed_root)
    _check_references(experiment, path)
    _check_log_format(experiment, path)
    _check_error_watch(experiment, path)
    assert experiment.ssh is not None
    ssh = experiment.ssh.model_copy(update={
        "config": base / experiment.ssh.config if experiment.ssh.config else None,
        "known_hosts": base / experiment.ssh.known_hosts if experiment.ssh.known_hosts else None})
    hosts = tuple(h.model_copy(update={"key": base / h.key}) if h.key else h
                  for h in experiment.hosts)
    return experiment.model_copy(update={"ssh": ssh, "hosts": hosts,
                                         "output": base / experiment.output}).read_from(path)


def _check_references(experiment: Experiment, path: Path) -> None:
    """Every field naming a host names one of the experiment's (a testbed's, once filled
    in), and a load generator has a URL: each problem at its own line and field."""
    # field_problem puts a field the testbed: tag filled in (web_log) at that tag's line
    located = experiment.read_from(path)
    problems = [field_problem(located, loc, message)
                for loc, message in experiment.dangling_references()]
    if problems:
        raise InputError(problems)


def _check_log_format(experiment: Experiment, path: Path) -> None:
    """The web log's format is one the reader can parse, checked before any host is touched
    (the log is read only after the injections) and reported at the experiment's field, not
    at `--log-format`, which the compiler names since `linkgrad gradient` takes it there."""
    log = experiment.web_log
    if log is None or log.format not in ("nginx", "apache"):
        return
    try:
        (compile_nginx if log.format == "nginx" else compile_apache)(log.log_format)
    except InputError as e:
        located = experiment.read_from(path)
        raise InputError([field_problem(located, ("web_log", "log_format"), p.message)
                          for p in e.problems]) from e


def _check_error_watch(experiment: Experiment, path: Path) -> None:
    """An error limit the user set needs a status in the log: say so before touching a host.
    (A CSV log's columns are only known from its header: checked when the run reads it.)"""
    log = experiment.web_log
    if log is None or "error_rate_limit" not in experiment.parameters.model_fields_set:
        return
    if log.format in ("nginx", "apache"):
        spec = (compile_nginx if log.format == "nginx" else compile_apache)(log.log_format)
        if not spec.has_status:
            variable = "$status" if log.format == "nginx" else "%>s"
            raise InputError(Problem(
                f"the web log's format logs no HTTP status ({variable}), so the error rate "
                "cannot be watched: add it, or remove the limit",
                str(path), line_of(path, ("parameters", "error_rate_limit")),
                "parameters.error_rate_limit"))

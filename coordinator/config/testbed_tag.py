"""An experiment's `testbed: TAG`: its hosts, SSH and web log from a running `linkgrad
testbed` (the one place the configuration reads the testbed's state)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from coordinator.config.experiment import Experiment, Host, Ssh, WebLog
from linkgrad.errors import InputError, Problem
from testbed.lifecycle import status
from testbed.state import DEFAULT_ROOT


def from_testbed(experiment: Experiment, path: Path, root: Path | None) -> Experiment:
    """`experiment` with hosts, ssh and web_log taken from the running testbed it names."""
    root = root or Path(os.environ.get("LINKGRAD_TESTBED_ROOT", DEFAULT_ROOT))
    report = status(experiment.testbed or "", root)
    info = report.info
    if not report.up or info is None:
        raise InputError(Problem(f"testbed {experiment.testbed!r} is not up (linkgrad testbed "
                                 "up)", str(path), field="testbed"))
    log = info.web_log
    return experiment.model_copy(update={
        "hosts": tuple(Host(name=h.name, address=h.address) for h in info.hosts),
        # the testbed's hosts share this machine's files: the same python runs the daemons
        "ssh": Ssh(config=info.ssh_config, known_hosts=info.known_hosts, python=sys.executable),
        "web_log": WebLog(host=log.host, path=str(log.path), format=log.format,
                          log_format=log.log_format),
        "frontend_url": info.frontend_url,
        "application": experiment.application or info.app})

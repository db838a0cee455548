"""What a testbed made, on disk, so `down` and `status` work from another process or after a
crash: the plan, the undo list (in the order the changes were made), the services' pids.

Root runs the undo list, so the state is read only from a directory and a file that are root's
alone (`testbed.private_dir`), and written as a fresh 0600 file renamed into place.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from linkgrad.errors import RuntimeFailure
from testbed.private_dir import check_testbed_dir, read_trusted, trusted_parent, write_file

DEFAULT_ROOT = Path("/var/tmp")
ROOT_VARIABLE = "LINKGRAD_TESTBED_ROOT"


def default_root() -> Path:
    return Path(os.environ.get(ROOT_VARIABLE) or DEFAULT_ROOT)


def directory_for(tag: str, root: Path = DEFAULT_ROOT) -> Path:
    """The testbed's directory under the real path of `root`, once `root` is checked."""
    return trusted_parent(root) / f"linkgrad-testbed-{tag}"


@dataclass
class State:
    directory: Path
    plan: dict[str, Any] | None = None
    undo: list[list[str]] = field(default_factory=list)
    services: dict[str, dict[str, Any]] = field(default_factory=dict)  # "host/name" -> info
    info: dict[str, Any] = field(default_factory=dict)  # what `up --json` prints

    @property
    def path(self) -> Path:
        return self.directory / "state.json"

    def save(self) -> None:
        write_file(self.path, json.dumps({"plan": self.plan, "undo": self.undo,
                                          "services": self.services, "info": self.info},
                                         indent=2))  # never a half-written state

    @classmethod
    def load(cls, directory: Path) -> State | None:
        """The state in `directory`, None if there is none; refused (RuntimeFailure) where
        the directory or the file is not root's alone."""
        if not check_testbed_dir(directory):
            return None
        path = directory / "state.json"
        text = read_trusted(path)
        if text is None:
            return None
        try:
            data = json.loads(text)
            return cls(directory, data["plan"], _undo(data["undo"]), data["services"],
                       data["info"])
        except (ValueError, KeyError, TypeError) as e:
            raise RuntimeFailure(f"{path} is not a testbed state ({e}): remove the testbed's "
                                 "namespaces by hand, then the directory") from e


def _undo(undo: Any) -> list[list[str]]:
    if not isinstance(undo, list) or not all(
            isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
            for argv in undo):
        raise TypeError("'undo' is not a list of argument lists")
    return undo

"""What a testbed made, on disk, so `down` and `status` work from another process or after a
crash: the plan, the undo list (in the order the changes were made), the services' pids."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_ROOT = Path("/var/tmp")


def directory_for(tag: str, root: Path = DEFAULT_ROOT) -> Path:
    return root / f"linkgrad-testbed-{tag}"


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
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"plan": self.plan, "undo": self.undo,
                                   "services": self.services, "info": self.info}, indent=2))
        os.replace(tmp, self.path)  # never a half-written state

    @classmethod
    def load(cls, directory: Path) -> State | None:
        path = directory / "state.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(directory, data["plan"], data["undo"], data["services"], data["info"])

"""What a testbed made, on disk, so `down` and `status` work from another process or after a
crash: the plan, the undo list (in the order the changes were made), the services' pids, the
hosts' cgroups.

Root runs the undo list, so the state is read only from a directory and a file that are root's
alone (`testbed.private_dir`), and written as a fresh 0600 file renamed into place.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_serializer,
    field_validator,
)

from linkgrad.errors import RuntimeFailure
from testbed.description import DescribedTestbed
from testbed.netns import TestbedPlan
from testbed.private_dir import check_testbed_dir, read_trusted, trusted_parent, write_file

__all__ = ["DEFAULT_ROOT", "ROOT_VARIABLE", "ServiceRecord", "State", "StateFile", "default_root",
           "directory_for"]

DEFAULT_ROOT = Path("/var/tmp")
ROOT_VARIABLE = "LINKGRAD_TESTBED_ROOT"


def default_root() -> Path:
    return Path(os.environ.get(ROOT_VARIABLE) or DEFAULT_ROOT)


def directory_for(tag: str, root: Path = DEFAULT_ROOT) -> Path:
    """The testbed's directory under the real path of `root`, once `root` is checked."""
    return trusted_parent(root) / f"linkgrad-testbed-{tag}"


class ServiceRecord(BaseModel):
    """A daemon `Builder.start` started: its pid, command and log; for the Mininet keeper
    also the pids of Mininet's host shells (`shells`, absent for any other)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    pid: int
    argv: tuple[str, ...]
    log: str
    shells: tuple[int, ...] | None = None  # unset, so left out of the file (`State.save`)


_Argv = Annotated[list[str], Field(min_length=1)]


class StateFile(BaseModel):
    """`state.json`: its fields, in this order, are the file's format."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    plan: TestbedPlan | None
    undo: list[_Argv]  # in the order the changes were made
    services: dict[str, ServiceRecord]  # "host/name" -> its daemon
    info: DescribedTestbed | None  # `{}` in the file until `up` has described the testbed
    # host -> controller -> its cgroup (`testbed.cgroups`), recorded before it is made; absent
    # in a state written before hosts had cgroups
    cgroups: dict[str, dict[str, Path]] = {}

    @field_validator("info", mode="before")
    @classmethod
    def _described(cls, info: object) -> object:
        return None if info == {} else info

    @field_serializer("info", mode="wrap")
    def _undescribed(self, info: DescribedTestbed | None, handler: SerializerFunctionWrapHandler
                     ) -> object:
        return {} if info is None else handler(info)


@dataclass
class State:
    directory: Path
    plan: TestbedPlan | None = None
    undo: list[list[str]] = field(default_factory=list)
    services: dict[str, ServiceRecord] = field(default_factory=dict)  # "host/name" -> daemon
    info: DescribedTestbed | None = None  # what `up --json` prints, once it is known
    cgroups: dict[str, dict[str, Path]] = field(default_factory=dict)  # host -> controller -> dir

    @property
    def path(self) -> Path:
        return self.directory / "state.json"

    def save(self) -> None:
        saved = StateFile(plan=self.plan, undo=self.undo, services=self.services, info=self.info,
                          cgroups=self.cgroups)
        # exclude_unset: a field never given (a service's `shells`) is not in the file
        write_file(self.path, json.dumps(saved.model_dump(mode="json", exclude_unset=True),
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
            saved = StateFile.model_validate_json(text)
        except ValidationError as e:
            raise RuntimeFailure(f"{path} is not a testbed state ({_first_problem(e)}): remove "
                                 "the testbed's namespaces by hand, then the directory") from e
        return cls(directory, saved.plan, saved.undo, dict(saved.services), saved.info,
                   {host: dict(dirs) for host, dirs in saved.cgroups.items()})


def _first_problem(e: ValidationError) -> str:
    """pydantic's first complaint, on one line: where in the file, and what."""
    error = e.errors()[0]
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {error['msg']}" if where else error["msg"]

"""A run directory on disk: every file written whole as strict JSON, and read back through
the typed records of `run_records`, a problem named by file and field."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ValidationError,
)

from coordinator.config import bounds
from coordinator.config.run_records import LinkMeasurement
from coordinator.config.strict_json import dumps
from linkgrad.errors import InputError, Problem
from linkgrad.linearity import Linearity, linearity
from linkgrad.reading import problems_of, read_json

Record = TypeVar("Record", bound=BaseModel)
Earlier = TypeVar("Earlier")


@dataclass
class RunDir:
    """The run's directory; every file written whole (a temporary file, then renamed), so an
    interrupted run never leaves half a file."""

    path: Path

    def write(self, name: str, data: Any) -> None:
        """Strict JSON (a value that is not a finite number is written null)."""
        if isinstance(data, BaseModel):
            data = data.model_dump(mode="json", exclude_none=True)
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(dumps(data, indent=2, note=False))
        tmp.replace(target)

    def read(self, name: str) -> Any:
        target = self.path / name
        return read_json(target) if target.exists() else None

    def earlier(self, name: str, read: Callable[[Path], Earlier | None], what: str
                ) -> tuple[Earlier | None, list[str]]:
        """A resumed run's earlier `name` (None if there is none) and what to say of it: one
        cut short or edited is kept aside as `<stem>-unreadable.json`, and this session's
        `what` stands alone."""
        try:
            return read(self.path), []
        except InputError as e:
            aside = self.path / f"{Path(name).stem}-unreadable.json"
            n = 1
            while aside.exists():  # an earlier one set aside stays too
                n += 1
                aside = self.path / f"{Path(name).stem}-unreadable-{n}.json"
            (self.path / name).replace(aside)
            return None, [f"the earlier {name} cannot be read ({e}): kept as {aside.name}; "
                          f"{name} holds this session's {what} only"]

    def measurements(self) -> list[LinkMeasurement]:
        """What `gradients.json` holds so far (none before the first link is done)."""
        path = self.path / "gradients.json"
        return read_measurements(path) if path.exists() else []

    def write_measurements(self, experiment: str, links: list[LinkMeasurement]) -> None:
        """The links, and where a link was measured at delays far enough apart (several
        `magnitudes_ms`, or an adaptive cycle), how each gradient changes with the delay."""
        self.write("gradients.json", {
            "experiment": experiment, "links": [m.model_dump(mode="json") for m in links],
            "linearity": [x.record().model_dump(mode="json") for x in linearity_of(links)]})


def linearity_of(links: list[LinkMeasurement]) -> list[Linearity]:
    """`linkgrad.linearity` over every measurement of each link and the adaptive cycle before it."""
    points = []
    for m in links:
        label = m.link.label
        points.append((label, m.record.magnitude_ms, "measurement", m.transactions))
        if m.adaptive is not None:
            points.append((label, m.adaptive.record.magnitude_ms, "adaptive",
                           m.adaptive.transactions))
    return linearity(points)


def read_measurements(path: Path) -> list[LinkMeasurement]:
    """The one reader of a `gradients.json` (at `path`, whatever its name): its links, typed.
    A file that is missing, not JSON or not a linkgrad gradients.json is InputError naming it
    (and each wrong field)."""
    data = read_run_file(path, "the link gradients")
    links = data.get("links") if isinstance(data, dict) else None
    if not isinstance(links, list):
        raise InputError(Problem("not a linkgrad gradients.json (no list of links)", str(path),
                                 field="links"))
    out: list[LinkMeasurement] = []
    problems: list[Problem] = []
    for i, entry in enumerate(links):
        try:
            out.append(LinkMeasurement.model_validate(entry, context=bounds.READ_BACK))
        except ValidationError as e:
            problems += problems_of(e, str(path), prefix=("links", i))
    if problems:
        raise InputError(problems)
    return out


def read_record(path: Path, model: type[Record], what: str) -> Record:
    """A run directory's JSON file as `model`; InputError naming it and each wrong field."""
    data = read_run_file(path, what)
    try:
        return model.model_validate(data, context=bounds.READ_BACK)
    except ValidationError as e:
        raise InputError(problems_of(e, str(path))) from e


def read_run_file(path: Path, what: str) -> Any:
    try:
        path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(Problem(f"no {path.name} ({what}): not a linkgrad run directory, or a "
                                 "run from before it was written", str(path))) from None
    except OSError:
        pass  # (a name too long, no permission): read_json says which
    return read_json(path, what)

"""What a command answers, typed: `--json` prints the model, the text printer reads its
attributes, so the two never disagree on a field."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coordinator.config.fields import is_none
from coordinator.config.strict_json import dumps

__all__ = ["Answer", "absent_when_none"]


class Answer(BaseModel):
    """A command's answer. Numbers may be NaN (a mean of nothing): `json_text` writes them
    null and names them, as every `--json` output does."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def json_text(self, note: bool = True) -> str:
        """Strict JSON; with `note`, the fields written null are named under null_values."""
        return dumps(self.model_dump(), note=note)


def absent_when_none() -> Any:
    """A field left out of the JSON when it is None (the output never had a null there)."""
    return Field(None, exclude_if=is_none)

"""A bug's details: an exception that is not linkgrad's own is said in one sentence, its
traceback kept in a file of its own (under $TMPDIR) for the report."""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path


def internal_error_details(error: BaseException) -> tuple[str, str]:
    """A bug's one-line summary, and where its traceback was saved (a file of its own)."""
    summary = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    name = f"linkgrad-internal-error-{time.time_ns()}-{os.getpid()}.txt"
    details = Path(tempfile.gettempdir()) / name
    try:
        details.write_text("".join(traceback.format_exception(error)))
        return summary, str(details)
    except OSError as e:  # the sentence must come out even where no file can be written
        return summary, f"nowhere ({details} could not be written: {e.strerror})"

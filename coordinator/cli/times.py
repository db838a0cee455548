"""Times as a person reads them in the commands' answers and the report."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["local_time"]


def local_time(t_s: float | None) -> str:
    """A unix time as local ISO 8601 with its zone (`2026-12-05T09:35:12+01:00`: pasted into a
    log search or `date -d` as is); the number where no date can say it (1e300, infinity);
    "-" for none."""
    if t_s is None:
        return "-"
    try:
        return datetime.fromtimestamp(t_s, UTC).astimezone().isoformat(timespec="seconds")
    except (OverflowError, ValueError, OSError):
        return f"unix time {t_s:g}"

"""Times as a person reads them in the commands' answers and the report."""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime

__all__ = ["local_time", "time_value"]


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


def time_value(text: str) -> float:
    """A time asked on the command line: unix seconds (`1795000000.5`) or ISO 8601
    (`2026-11-18T11:06:40+01:00`, `...Z`; without a zone, this machine's local time), as
    unix seconds. An argparse type: anything else is the option's error (exit 2)."""
    try:
        value = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text[:60]!r}: expected unix seconds or ISO 8601, as "
                "2026-11-18T11:06:40+01:00") from None
        try:
            if moment.tzinfo is None:
                moment = moment.astimezone()  # the machine's zone, as `date` reads it
            return moment.timestamp()
        except (OverflowError, ValueError, OSError):  # year 1 in a zone east of UTC
            raise argparse.ArgumentTypeError(f"{text[:60]!r} is out of range") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is no time")
    return value

"""Hypothesis draws the same examples on every run, so a CI failure is reproducible from its
log and cannot come and go between runs of one tree. `LINKGRAD_HYPOTHESIS=explore` draws new
ones each run (a longer search for new bugs; it prints how to reproduce what it finds)."""

import os
import time

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile("explore" if os.environ.get("LINKGRAD_HYPOTHESIS") == "explore"
                      else "repeatable")

# Times in answers are local (coordinator/cli/times.py): every test reads them in UTC, whatever
# the machine's zone; tests/test_times.py checks another zone.
os.environ["TZ"] = "UTC"
time.tzset()

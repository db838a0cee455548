"""`python -m injector.leased -- CMD ...`: run CMD for as long as stdin stays open.

A command started over SSH without a terminal outlives a closed channel unless it happens to
read its stdin or write to its stdout (a load generator that reports only at the end, `tail`
on a quiet log). This wrapper makes the channel the command's lease, as it is for the daemons:
at end of input (or SIGTERM/SIGHUP) the command's whole process group is stopped, politely,
then by force. CMD's stdout and stderr pass through; its exit status is ours.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

GRACE_S = 5.0


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, GRACE_S)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m injector.leased -- CMD [ARG ...]", file=sys.stderr)
        return 2
    child = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
    ended = threading.Event()

    def lease() -> None:  # the raw fd: a buffered reader's lock would abort the exit
        while os.read(0, 65536):
            pass
        ended.set()

    threading.Thread(target=lease, daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: ended.set())
    while not ended.wait(0.2):
        if child.poll() is not None:
            return child.returncode
    _stop(child)
    return child.returncode if child.returncode is not None else 1


if __name__ == "__main__":
    sys.exit(main())

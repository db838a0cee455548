"""Removes a daemon's rules after it dies, even by SIGKILL.

Started by the daemon with a pipe on stdin. A daemon that stops cleanly writes `clean` before
it exits; end of file without it means the daemon was killed: remove its chain (by name, the
daemon's own) so the link is not left going through a queue nobody reads.

    python -m injector.reaper CHAIN
"""

from __future__ import annotations

import signal
import sys

from injector.rules import Firewall


def main() -> int:
    chain = sys.argv[1]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C for the daemon is not for us
    said = sys.stdin.buffer.read()
    if said.strip() == b"clean":
        return 0
    Firewall(chain).remove_stale()
    return 0


if __name__ == "__main__":
    sys.exit(main())

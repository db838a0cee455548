"""`python -m sniffer.rtt ADDR PORT --count N`: TCP connect round-trip times to ADDR:PORT.

A connect returns when the SYN-ACK arrives: one network round trip, answered by the peer's
kernel without waiting on any application (thesis §5.3 takes one-way latency as the mean of
TCP RTTs over two). Prints JSON {"rtt_s": [...], "failed": n}.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time

from linkgrad.protocol.sniffer import RttAnswer


def connect_rtts(addr: str, port: int, count: int, interval_s: float,
                 timeout_s: float = 2.0) -> tuple[list[float], int]:
    rtts, failed = [], 0
    for _ in range(count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            started = time.perf_counter()
            try:
                s.connect((addr, port))
            except OSError:
                failed += 1
            else:
                rtts.append(time.perf_counter() - started)
        time.sleep(interval_s)
    return rtts, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sniffer.rtt", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("addr")
    parser.add_argument("port", type=int)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--interval-s", type=float, default=0.01)
    args = parser.parse_args(argv)
    rtts, failed = connect_rtts(args.addr, args.port, args.count, args.interval_s)
    print(RttAnswer(rtt_s=tuple(rtts), failed=failed).model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())

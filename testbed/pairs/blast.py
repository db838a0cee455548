"""UDP load for benchmarks: `blast.py send HOST PORT RATE SECONDS` prints how many it sent;
`blast.py sink PORT` counts datagrams until 1.5 s of silence after the first, prints the count."""

import socket
import sys
import time


def send(host: str, port: int, rate: float, seconds: float) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((host, port))
    payload = b"x" * 64
    sent = 0
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * rate)
        while sent < due:
            try:
                sock.send(payload)
                sent += 1
            except BlockingIOError:
                break
        time.sleep(0.0005)
    return sent


def sink(port: int) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind(("0.0.0.0", port))
    print("ready", flush=True)
    count = 0
    sock.settimeout(30)
    sock.recv(2048)
    count = 1
    sock.settimeout(1.5)
    try:
        while True:
            sock.recv(2048)
            count += 1
    except TimeoutError:
        return count


if __name__ == "__main__":
    if sys.argv[1] == "send":
        print(send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])))
    else:
        print(sink(int(sys.argv[2])))

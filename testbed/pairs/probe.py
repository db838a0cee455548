"""Round-trip probes run inside a namespace; prints JSON {"sent": [...], "rtt": [...]} (s).

    probe.py tcp HOST PORT COUNT INTERVAL_S
    probe.py udp HOST PORT COUNT INTERVAL_S     (also "seq": echoed sequence in arrival order)
"""

import json
import socket
import struct
import sys
import threading
import time


def tcp(host: str, port: int, count: int, interval: float) -> dict:
    sock = socket.create_connection((host, port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent, rtt = [], []
    for _ in range(count):
        t0 = time.time()
        sock.sendall(b"x" * 32)
        got = 0
        while got < 32:
            got += len(sock.recv(64))
        rtt.append(time.time() - t0)
        sent.append(t0)
        time.sleep(interval)
    sock.close()
    return {"sent": sent, "rtt": rtt}


def udp(host: str, port: int, count: int, interval: float) -> dict:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((host, port))
    sent = [0.0] * count
    rtt = [float("nan")] * count
    order: list[int] = []
    done = threading.Event()

    def receive() -> None:
        sock.settimeout(2.0)
        try:
            while len(order) < count:
                data = sock.recv(64)
                seq, t0 = struct.unpack("!Id", data[:12])
                rtt[seq] = time.time() - t0
                order.append(seq)
        except OSError:
            pass
        done.set()

    threading.Thread(target=receive, daemon=True).start()
    next_t = time.time()
    for seq in range(count):
        while (wait := next_t - time.time()) > 0:
            time.sleep(wait - 0.0005 if wait > 0.001 else 0)  # yield: the receiver needs the GIL
        t0 = time.time()
        sent[seq] = t0
        sock.send(struct.pack("!Id", seq, t0) + b"x" * 20)
        next_t += interval
    done.wait(10)
    return {"sent": sent, "rtt": rtt, "seq": order}


def main() -> None:
    sys.setswitchinterval(1e-4)  # the receiving thread must not wait 5 ms for the GIL
    kind, host, port, count, interval = sys.argv[1:6]
    probe = tcp if kind == "tcp" else udp
    print(json.dumps(probe(host, int(port), int(count), float(interval))))


if __name__ == "__main__":
    main()

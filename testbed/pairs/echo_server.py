"""TCP and UDP echo servers for the namespace tests: `echo_server.py TCP_PORT,... UDP_PORT,...`.

Prints "ready" once every socket listens; runs until killed.
"""

import socket
import sys
import threading


def tcp_echo(port: int) -> None:
    srv = socket.create_server(("0.0.0.0", port), reuse_port=True)
    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_serve, args=(conn,), daemon=True).start()


def _serve(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def udp_echo(sock: socket.socket) -> None:
    while True:
        data, peer = sock.recvfrom(65536)
        sock.sendto(data, peer)


def main() -> None:
    tcp_ports = [int(p) for p in sys.argv[1].split(",") if p]
    udp_ports = [int(p) for p in sys.argv[2].split(",") if p]
    for port in tcp_ports:
        threading.Thread(target=tcp_echo, args=(port,), daemon=True).start()
    for port in udp_ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("0.0.0.0", port))
        threading.Thread(target=udp_echo, args=(sock,), daemon=True).start()
    import time

    time.sleep(0.2)
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()

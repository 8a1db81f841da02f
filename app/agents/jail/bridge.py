"""Runs inside a jail (standard library only): `python3 -I -S bridge.py PORT SOCKET -- ARGV...`.

The jail's network namespace has only its loopback. This listens on 127.0.0.1:PORT (what the CLI's
HTTPS_PROXY / HTTP_PROXY name), hands each connection to the host's egress proxy through the unix SOCKET
bound into the jail, and execs the CLI in its own place. The relay lives on in a forked child, which dies
with the jail's pid namespace when the CLI (the namespace's main process) ends.
"""

import os
import socket
import sys
import threading


def pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def relay(conn: socket.socket, path: str) -> None:
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(path)
    except OSError:
        conn.close()
        up.close()
        return
    back = threading.Thread(target=pump, args=(up, conn), daemon=True)
    back.start()
    pump(conn, up)
    back.join()
    conn.close()
    up.close()


def serve(listener: socket.socket, path: str) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=relay, args=(conn, path), daemon=True).start()


def main() -> None:
    port, path, sep, *argv = sys.argv[1:]
    if sep != "--" or not argv:
        sys.exit("usage: bridge.py PORT SOCKET -- ARGV...")
    listener = socket.create_server(("127.0.0.1", int(port)), backlog=128)
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        serve(listener, path)
        os._exit(0)
    listener.close()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main()

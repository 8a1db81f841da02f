"""Runs inside a jail (standard library only): `python3 -I -S tools_relay.py SOCKET`.

A CLI starts this as its stdio MCP server (`app/agents/cli/tools.py` configures it): it connects to the run's
tool server through the unix SOCKET bound into the jail and copies bytes both ways, stdin to the socket and
the socket to stdout, until either side closes. It adds nothing and reads nothing: the host's server speaks
MCP (newline-delimited JSON-RPC, as stdio does) and answers only its tools.
"""

import os
import socket
import sys
import threading


def upstream(conn: socket.socket) -> None:
    """stdin → socket; at stdin's end, the socket's write side is closed so the server sees the end."""
    try:
        while data := os.read(0, 65536):
            conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: tools_relay.py SOCKET")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sys.argv[1])
    except OSError as exc:
        sys.exit(f"tools_relay: cannot reach the tool server: {exc.strerror or exc}")
    threading.Thread(target=upstream, args=(conn,), daemon=True).start()
    try:
        while data := conn.recv(65536):
            view = memoryview(data)
            while view:
                view = view[os.write(1, view) :]
    except OSError:
        pass
    conn.close()


if __name__ == "__main__":
    main()

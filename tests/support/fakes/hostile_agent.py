#!/usr/bin/env python3
"""A hostile `ndjson` agent: does what a prompt-injected coding agent would try, and reports every outcome.

The prompt text is a JSON object naming the targets: `read` (paths to list or read), `write` (paths to
create), `connect` ([host, port] to open directly), `tunnel` ([host, port] to CONNECT through the
HTTPS_PROXY it was given, then GET / inside), `fetch` (http URLs to GET through HTTP_PROXY). It answers
with one `thinking` event: a JSON object {"env": its environment, "pid": its pid, "pids": what /proc
shows, "<attempt>": "ok ..." | "refused: <why>"}, then `done`. Standard library only (it runs with the
system's python3).
"""

import json
import os
import socket
import sys
import urllib.request


def out(obj):
    print(json.dumps(obj), flush=True)


def attempt(fn, *args):
    try:
        return "ok " + str(fn(*args))[:200]
    except Exception as exc:  # the outcome is the report
        return f"refused: {type(exc).__name__}: {exc}"[:300]


def read(path):
    return os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(64)


def write(path):
    with open(path, "w") as f:
        f.write("pwned")
    return "written"


def connect(host, port):
    with socket.create_connection((host, port), timeout=3):
        return "connected"


def tunnel(host, port):
    """CONNECT through HTTPS_PROXY; once through, one plain GET / in the tunnel and its body."""
    proxy = os.environ["HTTPS_PROXY"].rsplit("/", 1)[-1].rsplit(":", 1)
    with socket.create_connection((proxy[0], int(proxy[1])), timeout=5) as s:
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        status = s.recv(4096).split(b"\r\n", 1)[0].decode()
        if " 200 " not in status + " ":
            raise PermissionError(status)
        s.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        answer = b""
        while data := s.recv(4096):
            answer += data
    return answer.split(b"\r\n\r\n", 1)[-1].decode()


def fetch(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


prompt = json.loads(sys.stdin.readline())
plan = json.loads(prompt["text"])
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
report = {"env": dict(os.environ), "pid": os.getpid(), "pids": pids}
for path in plan.get("read", []):
    report[f"read {path}"] = attempt(read, path)
for path in plan.get("write", []):
    report[f"write {path}"] = attempt(write, path)
for host, port in plan.get("connect", []):
    report[f"connect {host}:{port}"] = attempt(connect, host, port)
for host, port in plan.get("tunnel", []):
    report[f"tunnel {host}:{port}"] = attempt(tunnel, host, port)
for url in plan.get("fetch", []):
    report[f"fetch {url}"] = attempt(fetch, url)
out({"kind": "thinking", "text": json.dumps(report)})
out({"kind": "done", "summary": "tried"})

"""A loopback smart-HTTP git server: `git http-backend` as CGI behind a small threaded HTTP server; fetches
for anyone (but of the private repositories named), pushes only with HTTP Basic `<user>:<token>`. It
records each request's path and Authorization header, so a test sees where a token went."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


@dataclass
class GitHttp:
    """A running server: the URL of its root (`<url>/<name>.git` serves `root/<name>.git`) and the requests
    it saw, (path, Authorization) in order."""

    url: str
    root: Path
    seen: list[tuple[str, str | None]] = field(default_factory=list)

    def tokens_sent_to(self, name: str) -> list[str | None]:
        """The Authorization headers of the requests for repository `name` (e.g. `project.git`)."""
        return [auth for path, auth in self.seen if path.startswith(f"/{name}/")]


class _Handler(BaseHTTPRequestHandler):
    served: GitHttp
    expected: str
    private: frozenset[str]

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def _cgi(self) -> None:
        path, _, query = self.path.partition("?")
        auth = self.headers.get("Authorization")
        self.served.seen.append((self.path, auth))
        closed = "git-receive-pack" in self.path or path.split("/")[1] in self.private
        if closed and auth != self.expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {
            **GIT_ENV,
            "GIT_PROJECT_ROOT": str(self.served.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "pusher",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        headers = [line.split(": ", 1) for line in head.decode().split("\r\n") if ": " in line]
        status = next((v for k, v in headers if k.lower() == "status"), "200 OK")
        self.send_response(int(status.split()[0]))
        for key, value in headers:
            if key.lower() != "status":
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def git_http(
    root: Path, token: str, user: str = "x-access-token", private: Iterable[str] = ()
) -> Iterator[GitHttp]:
    """Serve the bare repositories in `root` on 127.0.0.1 until the block ends; those named in `private`
    (`secret.git`) only with the token, fetches too."""
    expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    served = GitHttp(f"http://127.0.0.1:{httpd.server_address[1]}", root)
    handler = {"served": served, "expected": expected, "private": frozenset(private)}
    httpd.RequestHandlerClass = type("Handler", (_Handler,), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        httpd.shutdown()
        thread.join()
        httpd.server_close()

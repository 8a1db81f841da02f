"""push on real git: the task's branch reaches the remote from the server's mirror, over file:// and over
smart HTTP (`git http-backend` behind a small local server that wants a token to push), and the token goes
nowhere but that push's request headers."""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.agents.repos.cache import RepoCache
from app.agents.repos.changes import collect
from app.agents.repos.errors import GitError, RepoError
from app.agents.repos.push import push
from app.agents.repos.source import RepoSource

from .conftest import ENV, Origin, git

BRANCH = "a2a/0123abcd"
TOKEN = "tok-8c1f3a9e55d2"


def every_file_under(*roots: Path) -> Iterator[Path]:
    for root in roots:
        yield from (p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


async def test_the_branch_is_pushed_from_the_mirror_to_a_file_remote(
    cache: RepoCache, source: RepoSource, origin: Origin, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    (co.path / "notes.md").write_text("new\n")
    changes = await collect(co, None, "notes", 1 << 20)
    assert await push(cache, co, changes.head, token=TOKEN) == f"refs/heads/{BRANCH}"
    assert git("--git-dir", str(origin.bare), "rev-parse", f"refs/heads/{BRANCH}") == changes.head
    mirror = cache.path(source)
    assert "refs/a2a/" not in git("--git-dir", str(mirror), "for-each-ref"), (
        "the mirror keeps no ref of a task"
    )
    leaks = [
        p for p in every_file_under(co.path, cache.root, origin.bare) if TOKEN.encode() in p.read_bytes()
    ]
    assert leaks == []

    (co.path / "more.md").write_text("more\n")
    later = await collect(co, changes.head, "more", 1 << 20)
    await push(cache, co, later.head)
    assert git("--git-dir", str(origin.bare), "rev-parse", f"refs/heads/{BRANCH}") == later.head


async def test_a_push_is_never_forced_nor_of_another_commit(
    cache: RepoCache, source: RepoSource, origin: Origin, tmp_path: Path
) -> None:
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    (co.path / "a.md").write_text("a\n")
    changes = await collect(co, None, "a", 1 << 20)
    with pytest.raises(RepoError, match="not pushed"):
        await push(cache, co, co.base)
    with pytest.raises(RepoError, match="not a full commit id"):
        await push(cache, co, "HEAD")
    origin.add_commit("theirs.md", "someone else's branch\n", branch="main")
    git("push", "--quiet", "origin", f"main:refs/heads/{BRANCH}", cwd=origin.work)
    with pytest.raises(GitError, match="git push failed"):
        await push(cache, co, changes.head)
    assert git("--git-dir", str(origin.bare), "rev-parse", f"refs/heads/{BRANCH}") != changes.head


class _GitHttp(BaseHTTPRequestHandler):
    """`git http-backend` as CGI, fetches for anyone, pushes only with Basic `x-access-token:TOKEN`."""

    root: Path
    seen: list[tuple[str, str | None]]

    def do_GET(self) -> None:
        self._cgi()

    def do_POST(self) -> None:
        self._cgi()

    def _cgi(self) -> None:
        path, _, query = self.path.partition("?")
        auth = self.headers.get("Authorization")
        self.seen.append((self.path, auth))
        if "git-receive-pack" in self.path:
            expected = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
            if auth != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {
            **ENV,
            "GIT_PROJECT_ROOT": str(self.root),
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


@pytest.fixture
def http_remote(origin: Origin) -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    seen: list[tuple[str, str | None]] = []
    handler = type("Handler", (_GitHttp,), {"root": origin.bare.parent, "seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{origin.bare.name}", seen
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


async def test_a_push_over_http_sends_the_token_in_its_header_and_nowhere_else(
    cache: RepoCache, origin: Origin, tmp_path: Path, http_remote: tuple[str, list[tuple[str, str | None]]]
) -> None:
    url, seen = http_remote
    source = RepoSource(url)
    co = await cache.checkout(source, tmp_path / "ws", BRANCH)
    assert git("remote", "get-url", "origin", cwd=co.path) == url
    (co.path / "notes.md").write_text("new\n")
    changes = await collect(co, None, "notes", 1 << 20)
    assert all(auth is None for _, auth in seen), "fetching needs no token and gets none"
    with pytest.raises(GitError, match="git push failed"):
        await push(cache, co, changes.head)  # no token: refused, and no prompt waits for one
    await push(cache, co, changes.head, token=TOKEN)
    assert git("--git-dir", str(origin.bare), "rev-parse", f"refs/heads/{BRANCH}") == changes.head
    with_token = [path for path, auth in seen if auth]
    assert f"/{origin.bare.name}/git-receive-pack" in with_token
    assert all("git-receive-pack" in path for path in with_token), "the token goes with the push only"
    leaks = [p for p in every_file_under(co.path, cache.root) if TOKEN.encode() in p.read_bytes()]
    assert leaks == []

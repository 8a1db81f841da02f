"""`fetch_files`: files by URL fetched from a real loopback HTTP server through the SSRF guard, with the
limits and the redirects it must refuse."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from ipaddress import ip_network
from typing import Any

import pytest

from app.agents.repos.errors import RepoError
from app.agents.repos.fetch import fetch_files
from app.ssrf import Policy
from tests.support.loopback import Loopback, QuietHandler

LOOPBACK = Policy(allow_http=True, allowed_cidrs=(ip_network("127.0.0.0/8"), ip_network("::1/128")))
"""The operator trusting loopback (ATTACHMENT_URL_ALLOWED_CIDRS), as the push tests do for their receiver."""
DEFAULT = Policy(allow_http=True)
SPEC = b"the spec\n" * 100
released = threading.Event()


class Files(QuietHandler):
    def do_GET(self) -> None:
        if self.path == "/spec.txt":
            self.reply(SPEC, "text/plain")
        elif self.path == "/endless":
            # No Content-Length: the body ends when the connection closes, which this one never does unless
            # the client stops reading.
            self.send_response(200)
            self.end_headers()
            while True:
                self.wfile.write(b"x" * 4096)
        elif self.path == "/declared":
            self.send_response(200)
            self.send_header("Content-Length", str(10**9))
            self.end_headers()
        elif self.path.startswith("/to/"):
            self.send_response(302)
            self.send_header("Location", self.path.removeprefix("/to/").replace("_", "/"))
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/slow":
            released.wait(30)
            self.reply(b"late", "text/plain")
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading, as it must past the limit


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    loop = Loopback(Files)
    try:
        yield loop.url
    finally:
        released.set()
        loop.close()


async def fetch(
    links: list[tuple[str, str]], policy: Policy = LOOPBACK, **limits: Any
) -> list[tuple[str, bytes]]:
    each = limits.get("each", 4096)
    return await fetch_files(links, policy, each, limits.get("room", 8192), limits.get("timeout_s", 10))


async def test_a_file_is_fetched_and_a_relative_redirect_followed(server: str) -> None:
    got = await fetch([("a.txt", f"{server}/spec.txt"), ("b.txt", f"{server}/to/_spec.txt")], each=2048)
    assert got == [("a.txt", SPEC), ("b.txt", SPEC)]


async def test_a_body_past_the_limit_is_cut_off_declared_or_not(server: str) -> None:
    with pytest.raises(
        RepoError, match=r"'big' is longer, over the limit of 4096 bytes \(ATTACHMENT_MAX_BYTES\)"
    ):
        await fetch([("big", f"{server}/endless")])
    with pytest.raises(RepoError, match=r"'big' has 1000000000 bytes, over the limit of 4096"):
        await fetch([("big", f"{server}/declared")])


async def test_the_files_together_stay_within_the_room_the_inline_ones_left(server: str) -> None:
    links = [("a", f"{server}/spec.txt"), ("b", f"{server}/spec.txt")]
    assert len(SPEC) * 2 > 1500
    with pytest.raises(RepoError, match="'b' has 900 bytes: it takes the message's files over their limit"):
        await fetch(links, each=1000, room=1500)


async def test_loopback_is_refused_unless_the_operator_allows_it(server: str) -> None:
    with pytest.raises(
        RepoError, match=r"'a': the URL points to 127\.0\.0\.1, a forbidden address \(loopback\)"
    ):
        await fetch([("a", f"{server}/spec.txt")], DEFAULT)
    port = server.rsplit(":", 1)[1]
    with pytest.raises(RepoError, match=r"the host localhost points to .*, a forbidden address \(loopback\)"):
        await fetch([("a", f"http://localhost:{port}/spec.txt")], DEFAULT)


@pytest.mark.parametrize(
    "where",
    ["http:__169.254.169.254_latest_meta-data", "http:__10.0.0.1_x", "file:___etc_passwd", "http:__[::1]_x"],
)
async def test_a_redirect_to_a_forbidden_address_is_refused(server: str, where: str) -> None:
    policy = Policy(allow_http=True, allowed_cidrs=(ip_network("127.0.0.0/8"),))
    with pytest.raises(RepoError, match=r"'a' \(redirected to .*\): the URL"):
        await fetch([("a", f"{server}/to/{where}")], policy)


async def test_a_redirect_loop_an_error_status_and_a_slow_server_are_refused(server: str) -> None:
    with pytest.raises(RepoError, match="redirected more than 5 times"):
        await fetch([("a", f"{server}/loop")])
    with pytest.raises(RepoError, match="'a': its URL answered HTTP 404"):
        await fetch([("a", f"{server}/nothing")])
    with pytest.raises(RepoError, match=r"'a': its URL took over 0\.5 s"):
        await fetch([("a", f"{server}/slow")], timeout_s=0.5)

"""`fetch_files`: the file parts of a message given by URL, fetched by the server before the CLI starts, to
be written under `attachments/` with the inline ones (`attachments.py`).

A URL comes from the client and is called from inside the server's network, so it passes the webhooks'
SSRF guard (`app.ssrf`): http or https only, no credentials in it, and every address its host resolves
to public unless the operator trusts it (ATTACHMENT_URL_ALLOWED_HOSTS / _CIDRS); the request goes to the
address just checked (DNS pinned, the host in `Host` and TLS SNI). A redirect is followed by hand, each
hop checked again, at most `MAX_REDIRECTS`. The body is read in chunks and given up past the limit (the
file's, and what the message's files have left), and each file has ATTACHMENT_URL_TIMEOUT_S in all. Any
failure refuses every file of the message (a RepoError naming the part); nothing here touches the disk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from urllib.parse import unquote, urljoin, urlsplit

import aiohttp

from app import ssrf

from .errors import RepoError

MAX_REDIRECTS = 5
CHUNK = 64 * 1024
REDIRECTS = frozenset({301, 302, 303, 307, 308})
WHAT = "files by URL"
"""How the guard's refusals name these URLs."""


def url_name(url: str) -> str | None:
    """The file name a URL gives: its path's last segment, percent-decoded (None when it ends in `/`). It
    is checked as any attachment's name afterwards (a `%2F..` in it is refused there)."""
    try:
        last = urlsplit(url).path.rsplit("/", 1)[-1]
    except ValueError:
        return None
    return unquote(last) or None


def check_url(name: str, url: str, policy: ssrf.Policy) -> None:
    """RepoError for what the URL alone shows (scheme, credentials, a forbidden address literal)."""
    try:
        ssrf.literal(url, policy, WHAT)
    except ssrf.Refused as exc:
        raise RepoError(f"attachment {name!r}: {exc}") from None


async def fetch_files(
    links: Sequence[tuple[str, str]],
    policy: ssrf.Policy,
    max_bytes_each: int,
    room: int,
    timeout_s: float,
) -> list[tuple[str, bytes]]:
    """Each (name, url) of `links` fetched: (name, bytes), in order. `room`: the bytes the message's files
    may still take together (its limit less its inline files). RepoError naming the first refused."""
    files: list[tuple[str, bytes]] = []
    connector = aiohttp.TCPConnector(use_dns_cache=False)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)
    ) as s:
        for name, url in links:
            limit = min(max_bytes_each, room)
            try:
                async with asyncio.timeout(timeout_s):
                    data = await _fetch(s, name, url, policy, limit, max_bytes_each)
            except RepoError:
                raise
            except TimeoutError:
                raise RepoError(f"attachment {name!r}: its URL took over {timeout_s:g} s") from None
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                raise RepoError(f"attachment {name!r}: its URL cannot be fetched: {exc}"[:400]) from None
            room -= len(data)
            files.append((name, data))
    return files


async def _fetch(
    session: aiohttp.ClientSession, name: str, url: str, policy: ssrf.Policy, limit: int, each: int
) -> bytes:
    """One file: its redirects followed, each hop through the guard; the body cut off past `limit`."""
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        try:
            target = await ssrf.check(current, policy, WHAT)
        except ssrf.Refused as exc:
            hop = "" if current == url else f" (redirected to {current})"
            raise RepoError(f"attachment {name!r}{hop}: {exc}") from None
        headers: dict[str, str] = {}
        server_hostname: str | None = None
        if target.ip is not None:
            headers["Host"] = target.host_header()
            if target.url.scheme == "https":
                server_hostname = target.host
        async with session.get(
            str(target.request_url()), headers=headers, allow_redirects=False, server_hostname=server_hostname
        ) as resp:
            if resp.status in REDIRECTS:
                location = resp.headers.get("Location")
                if not location:
                    raise RepoError(f"attachment {name!r}: its URL redirected without a Location")
                current = urljoin(current, location)
                continue
            if resp.status != 200:
                raise RepoError(f"attachment {name!r}: its URL answered HTTP {resp.status}")
            return await _body(resp, name, limit, each)
    raise RepoError(f"attachment {name!r}: its URL redirected more than {MAX_REDIRECTS} times")


async def _body(resp: aiohttp.ClientResponse, name: str, limit: int, each: int) -> bytes:
    """The response's body, read in chunks, given up as soon as it passes `limit` (never read whole)."""
    declared = resp.content_length if resp.headers.get("Content-Encoding", "identity") == "identity" else None
    if declared is not None and declared > limit:
        raise RepoError(_over(name, declared, limit, each))
    data = bytearray()
    async for chunk in resp.content.iter_chunked(CHUNK):
        data += chunk
        if len(data) > limit:
            raise RepoError(_over(name, None, limit, each))
    return bytes(data)


def _over(name: str, size: int | None, limit: int, each: int) -> str:
    has = f"has {size} bytes" if size is not None else "is longer"
    if limit < each:
        return (
            f"attachment {name!r} {has}: it takes the message's files over their limit "
            "(ATTACHMENT_MAX_TOTAL_BYTES)"
        )
    return f"attachment {name!r} {has}, over the limit of {each} bytes (ATTACHMENT_MAX_BYTES)"

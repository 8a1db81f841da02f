"""The egress proxy of jailed CLIs (`AGENT_NETWORK=egress`): the only way out of a jail's network namespace.

A jail has no network but its own loopback. Inside it, `bridge.py` listens on 127.0.0.1:3128 (the CLI's
HTTPS_PROXY / HTTP_PROXY) and passes each connection through a unix socket bound into the jail to this
proxy, which runs in the server process. It speaks the two forms HTTP clients use with a proxy:

- `CONNECT host:port` (https, and anything tunnelled): answered 200, then bytes are relayed both ways;
- an absolute-form request (`GET http://host:port/path`, plain http): forwarded in origin form with
  `Connection: close`, then relayed (the next request opens a new connection, so each is checked).

A destination must match `AGENT_EGRESS_ALLOW`. An entry named exactly (`127.0.0.1:8080`, `llm.internal`) is
trusted as the operator wrote it; a wildcard (`*.googleapis.com`) only reaches public addresses, and the
address that was checked is the one connected to. Everything else is answered 403 and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from dataclasses import dataclass

from . import scratch

log = logging.getLogger(__name__)

HEAD_LIMIT = 64 * 1024
CONNECT_TIMEOUT_S = 15.0
HEAD_TIMEOUT_S = 30.0
CHUNK = 1 << 16
_HOP_HEADERS = {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"te", b"upgrade"}


class Refused(Exception):
    """The destination is not allowed; the message says why (sent to the CLI and logged)."""


@dataclass(frozen=True, slots=True)
class Allowed:
    """One `AGENT_EGRESS_ALLOW` entry: a host (or `*.domain`) and a port (None: 443 and 80)."""

    host: str
    port: int | None

    @property
    def wildcard(self) -> bool:
        return self.host.startswith("*.")

    def matches(self, host: str, port: int) -> bool:
        if self.port is None and port not in (443, 80):
            return False
        if self.port is not None and port != self.port:
            return False
        if self.wildcard:
            return host.endswith(self.host[1:])
        return host == self.host


def split_host_port(value: str, default_port: int | None = None) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]:port` → (lower-case host without brackets, port or default)."""
    value = value.strip()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
    else:
        host, port = value, ""
    if not host:
        raise ValueError(f"{value!r} has no host")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"{value!r} has a bad port")
    return host.lower().rstrip("."), int(port) if port else default_port


def parse_allow(value: str) -> tuple[Allowed, ...]:
    """The entries of `AGENT_EGRESS_ALLOW` (comma-separated); ValueError for one that is not host[:port]."""
    out = []
    for item in (x.strip() for x in value.split(",")):
        if item:
            host, port = split_host_port(item)
            if "*" in host and (not host.startswith("*.") or "*" in host[2:]):
                raise ValueError(f"{item!r}: a wildcard is only allowed as a leading '*.'")
            out.append(Allowed(host, port))
    return tuple(out)


def _public(address: str) -> bool:
    return ipaddress.ip_address(address).is_global


class Policy:
    """Decides where a jailed CLI may connect, and to which address."""

    def __init__(self, allow: tuple[Allowed, ...]) -> None:
        self.allow = allow

    async def resolve(self, host: str, port: int) -> list[str]:
        """The addresses to try for host:port; Refused when the allowlist or the addresses say no."""
        entry = next((a for a in self.allow if a.matches(host, port)), None)
        if entry is None:
            raise Refused(f"{host}:{port} is not in AGENT_EGRESS_ALLOW")
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise Refused(f"{host} does not resolve ({exc})") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if entry.wildcard:
            addresses = [a for a in addresses if _public(a)]
            if not addresses:
                raise Refused(f"{host} resolves to no public address (only an exact entry may be private)")
        return addresses


class EgressProxy:
    """The host side: a unix-socket HTTP proxy enforcing a `Policy`; `path` is bound into each jail."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._dir = scratch.make("a2a-egress-")
        """Only the socket is bound into a jail; the folder's owner record lets a later start remove it
        should this process be killed (`scratch.sweep`)."""
        self.path = self._dir / "proxy.sock"
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._client, path=str(self.path), limit=HEAD_LIMIT)
        os.chmod(self.path, 0o666)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        scratch.remove(self._dir)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        line, _, rest = head.partition(b"\r\n")
        try:
            method, target, version = line.decode("latin-1").split(" ")
            if method == "CONNECT":
                host, port = split_host_port(target)
                forward = None
            else:
                host, port, forward = _origin_form(method, target, version, rest)
            if port is None:
                raise ValueError("no port")
        except ValueError:
            await _answer(writer, 400, "Bad Request", "not a proxy request")
            return
        try:
            up_reader, up_writer = await _connect(await self.policy.resolve(host, port), port)
        except Refused as refused:
            log.warning("egress refused: %s", refused)
            await _answer(writer, 403, "Forbidden", f"egress refused: {refused}")
            return
        except (OSError, TimeoutError) as exc:
            await _answer(writer, 502, "Bad Gateway", f"cannot connect to {host}:{port}: {exc}")
            return
        try:
            if forward is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                up_writer.write(forward)
            await asyncio.gather(_relay(reader, up_writer), _relay(up_reader, writer))
        finally:
            up_writer.close()


async def _connect(addresses: list[str], port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The first of the checked addresses that answers (an IPv6 one may be unreachable from here)."""
    error: Exception = OSError("no address")
    for address in addresses:
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(address, port, limit=CHUNK), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            error = exc
    raise error


def _origin_form(method: str, target: str, version: str, headers: bytes) -> tuple[str, int | None, bytes]:
    """An absolute-form request → (host, port, the request to send upstream: origin form, no hop headers,
    `Connection: close`)."""
    if not target.lower().startswith("http://"):
        raise ValueError("only http:// URLs are forwarded; use CONNECT for the rest")
    authority, slash, path = target[7:].partition("/")
    host, port = split_host_port(authority.rpartition("@")[2], 80)
    kept = [
        h for h in headers.split(b"\r\n") if h and h.partition(b":")[0].strip().lower() not in _HOP_HEADERS
    ]
    request = f"{method} {slash or '/'}{path} {version}".encode("latin-1")
    return host, port, b"\r\n".join([request, *kept, b"Connection: close", b"", b""])


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


async def _answer(writer: asyncio.StreamWriter, code: int, reason: str, text: str) -> None:
    body = (text + "\n").encode()
    writer.write(
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()

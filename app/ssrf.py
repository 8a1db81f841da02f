"""The SSRF guard: which webhook URLs the server may call, and the address it calls them at; the same guard
decides which files by URL a coding agent's message may bring (`agents/repos/fetch.py`). A leaf: it imports
nothing of ours, so both rooms use it.

A URL passes when its scheme is https (or http where allowed) and every address its host resolves to is
public, or inside a trusted network. The address checked is the one connected to (DNS pinned): the caller
sends the request to `Target.ip` with the original host in `Host` and in TLS SNI, so a DNS answer that
changes between check and call (rebinding) cannot move the call onto an internal address. Host names in the
allowlist are trusted as they are: no DNS check, the normal connection.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PARSED = 4096
"""Webhook URLs whose parse (`_parse`) is kept, least recently used dropped first."""
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(ValueError):
    """The URL may not be called; the message says why, for the client."""


@dataclass(slots=True, frozen=True)
class Policy:
    allow_http: bool = False
    allowed_hosts: frozenset[str] = frozenset()
    allowed_cidrs: tuple[IPNetwork, ...] = ()


@dataclass(slots=True, frozen=True)
class Target:
    """Where to send a checked URL: `ip` is None for an allowlisted host (connect by name)."""

    url: httpx.URL
    host: str
    ip: IPAddress | None

    def request_url(self) -> httpx.URL:
        """The URL with the checked address in place of the host name."""
        if self.ip is None:
            return self.url
        return self.url.copy_with(host=str(self.ip))

    def host_header(self) -> str:
        port = self.url.port
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if port is None else f"{host}:{port}"


def forbidden(ip: IPAddress) -> str | None:
    """Why an address may not be called (None: it is public)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            why = forbidden(ip.ipv4_mapped)
            return f"IPv4-mapped {why}" if why else None
        if ip.sixtofour is not None:
            why = forbidden(ip.sixtofour)
            return f"6to4 {why}" if why else None
        if ip in _NAT64:
            why = forbidden(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
            return f"NAT64 {why}" if why else None
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local (cloud metadata)" if str(ip) == "169.254.169.254" else "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "carrier-grade NAT (100.64.0.0/10)"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return "private (RFC 1918 / unique local)"
    if not ip.is_global:
        return "not globally routable"
    return None


def _trusted(ip: IPAddress, cidrs: Iterable[IPNetwork]) -> bool:
    return any(ip.version == net.version and ip in net for net in cidrs)


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to (an address literal: itself)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"the host {host} does not resolve") from exc
    seen: list[IPAddress] = []
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if ip not in seen:
            seen.append(ip)
    if not seen:
        raise Refused(f"the host {host} does not resolve")
    return seen


@functools.lru_cache(maxsize=PARSED)
def _parse(url: str, policy: Policy) -> tuple[httpx.URL, str, int, bool]:
    """What the URL alone decides (no DNS): the parsed URL, its host and port, and whether the host is
    allowlisted; Refused if its form is. A pure function of its arguments, so kept (a refusal is not):
    a webhook's URL is checked at every send that registers it and every run of its deliveries."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise Refused("the URL is not a valid absolute URL") from exc
    scheme = parsed.scheme
    if scheme not in ("https", "http"):
        raise Refused(f"the URL scheme must be https, not {scheme or 'missing'}")
    if scheme == "http" and not policy.allow_http:
        raise Refused("the URL must use https (plain http is not allowed on this server)")
    host = (parsed.host or "").lower().rstrip(".")
    if not host:
        raise Refused("the URL has no host")
    if parsed.userinfo:
        raise Refused("the URL must not carry credentials; use token or authentication")
    port = parsed.port or (443 if scheme == "https" else 80)
    return parsed, host, port, host in policy.allowed_hosts


def literal(url: str, policy: Policy, what: str = "webhooks") -> None:
    """Refused for what the URL alone shows (its form, an address literal that is forbidden), with no DNS:
    what a request can be refused for before anything is stored."""
    _, host, _, allowlisted = _parse(url, policy)
    if allowlisted or not _literal(host):
        return
    ip = ipaddress.ip_address(host)
    why = None if _trusted(ip, policy.allowed_cidrs) else forbidden(ip)
    if why is not None:
        raise Refused(f"the URL points to {ip}, a forbidden address ({why}); {what} must be public")


async def check(url: str, policy: Policy, what: str = "webhooks") -> Target:
    """The checked target for `url`, or Refused naming the reason (`what` names the URLs' kind in it). The
    host is resolved on every call (never from a cache): the address returned is the one just checked, and
    the one to connect to."""
    parsed, host, port, allowlisted = _parse(url, policy)
    if allowlisted:
        return Target(parsed, host, None)
    addresses = await resolve(host, port)
    for ip in addresses:
        if _trusted(ip, policy.allowed_cidrs):
            continue
        why = forbidden(ip)
        if why is not None:
            where = "the URL" if _literal(host) else f"the host {host}"
            raise Refused(f"{where} points to {ip}, a forbidden address ({why}); {what} must be public")
    return Target(parsed, host, addresses[0])

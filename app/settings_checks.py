"""The checks behind `Settings`' validators, as plain functions `settings.py` applies by name, so its class
reads as the list of settings.

Each takes the value as given (a `before` check) or as parsed, and returns it (normalised) or raises
`ValueError` without naming the setting: pydantic names it. The three that read another setting get
`info.data`, which holds only the settings declared above the one checked (and valid).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import ValidationInfo

from app.agents.repos.source import parse_allow
from app.protocol.extensions import extension_entry


def split(value: str) -> list[str]:
    """A comma-separated setting's items, stripped, the empty ones dropped."""
    return [x.strip() for x in value.split(",") if x.strip()]


def blank_is_unset(v: str | None) -> str | None:
    return v or None


def lower(v: object) -> object:
    """Before parsing: a name in any case, padded or not (`AGENT_SANDBOX= BWRAP`)."""
    return v.strip().lower() if isinstance(v, str) else v


def auth_mode(v: object) -> object:
    """Before parsing: empty is the default, `required`."""
    return "required" if v in (None, "") else v.strip().lower() if isinstance(v, str) else v


def database_url(v: str) -> str:
    if v.startswith("postgresql://") or v.startswith("postgres://"):
        v = "postgresql+asyncpg://" + v.split("://", 1)[1]
    if not (v.startswith("sqlite+aiosqlite://") or v.startswith("postgresql+asyncpg://")):
        raise ValueError("must start with sqlite+aiosqlite:// or postgresql+asyncpg://")
    return v


def redis_url(v: str | None) -> str | None:
    if v in (None, ""):
        return None
    if not v.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("must start with redis://, rediss:// or unix://")
    return v


def public_url(v: str) -> str:
    if v and not v.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return v.rstrip("/")


def optional_http_url(v: str) -> str:
    if v and not v.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return v


def otlp_url(v: str) -> str:
    if v and not v.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL (OTLP over HTTP)")
    return v


def log_level(v: str) -> str:
    v = v.lower()
    if v not in {"critical", "error", "warning", "info", "debug"}:
        raise ValueError("must be one of critical, error, warning, info, debug")
    return v


def workers(v: int, info: ValidationInfo) -> int:
    if v > 1 and not info.data.get("redis_url"):
        raise ValueError("above 1 needs REDIS_URL: the workers share events as replicas do")
    if v > 1 and not str(info.data.get("database_url", "")).startswith("postgresql"):
        raise ValueError("above 1 needs a PostgreSQL DATABASE_URL (SQLite has a single writer)")
    return v


def egress_needs_the_jail(v: str | None, info: ValidationInfo) -> str | None:
    if v == "egress" and info.data.get("agent_sandbox") == "none":
        raise ValueError("egress needs the jail (AGENT_SANDBOX=bwrap)")
    return v


def provider_pair(v: str, info: ValidationInfo) -> str:
    """The card's provider has both its fields (the proto requires both) or neither."""
    if bool(v) != bool(info.data.get("card_provider_organization")):
        raise ValueError("CARD_PROVIDER_URL and CARD_PROVIDER_ORGANIZATION go together: set both or neither")
    return v


def outlives_the_heartbeat(v: float, info: ValidationInfo) -> float:
    heartbeat = info.data.get("discovery_heartbeat_s")
    if heartbeat is not None and v <= heartbeat:
        raise ValueError(f"must be above DISCOVERY_HEARTBEAT_S ({heartbeat:g}), or live instances vanish")
    return v


def cidrs(v: str) -> str:
    for item in split(v):
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError as exc:
            raise ValueError(f"{item!r} is not a network (e.g. 10.0.0.0/8)") from exc
    return v


def hashed_keys(v: dict[str, str]) -> dict[str, str]:
    out = {}
    for digest, principal in v.items():
        digest = digest.strip().lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError("keys must be sha256 hex digests (see `a2a-server hash-key`)")
        if not isinstance(principal, str) or not principal.strip():
            raise ValueError("each key must map to a non-empty principal name")
        out[digest] = principal.strip()
    return out


def card_extensions(v: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [extension_entry(e) for e in v]
    uris = [e["uri"] for e in out]
    if len(set(uris)) != len(uris):
        raise ValueError("each extension uri may appear once")
    return out


def repo_allow(v: str) -> str:
    """Each entry a local folder or a URL prefix (`repos.source.parse_allow`)."""
    parse_allow(v)
    return v

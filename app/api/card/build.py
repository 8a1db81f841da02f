"""The agent card, built and rendered: what `routes.py` serves at `/.well-known/agent-card.json` (and the
`agent.json` alias), and the extended card operations return, cache-friendly.

The card is built once at start-up from a `CardOptions` and the active agent; it advertises only what
works: streaming, push notifications and state-transition history yes, the authenticated extended card
when one is configured (and authentication is on), and the security schemes in force.

It declares the A2A extensions of the agent and of CARD_EXTENSIONS (`capabilities.extensions`; what a
request must name is checked by `extensions.Declared`), and, with CARD_SIGNING_KEY_FILE, carries a JWS per
key in `signatures` (`signing.py`), over the v1.0 view, so every variant is signed alike; the ETag is
the body's, so it changes with the keys.

It comes in two variants. The hybrid one serves both versions in one document: v1.0 clients read
`supportedInterfaces`, v0.3 clients `url` and friends. The 1.0 one has only the v1.0 AgentCard's fields,
for checkers that refuse unknown ones. A request with `A2A-Version: 1.x` gets the 1.0 card, `0.x` the
hybrid, none the one `CARD_COMPAT` names (`Vary: A2A-Version`; each variant has its own ETag).

With no PUBLIC_URL, a card fetched through a loopback origin other than the default `http://localhost:$PORT`
(`http://127.0.0.1:$PORT`, a local proxy's port) advertises the origin it was fetched through (`Card.at`):
clients that insist on a card whose interfaces share its origin (Google ADK's `RemoteA2aAgent`) take the
card of `make run` whichever loopback name they were given.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import format_datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

import orjson
from fastapi import Request, Response

from app.agents.errors import SettingError
from app.agents.sdk import Agent
from app.protocol import json_v03, protojson_v10
from app.protocol.extensions import extension_entry
from app.roles import Role

from ..edge.auth import security_fields
from ..extensions import Declared
from ..versions import raw_version
from . import signing
from .options import CardOptions

ROLE_METADATA = "a2a-role"
"""The gRPC request metadata that selects a role (the HTTP bindings select it by URL)."""
ROLE_EXTENSION = "urn:a2a-coding-server:role"
MAX_ORIGINS = 8
"""Loopback origins a card is rebuilt for (`Card.at`); a request through yet another gets the default."""


def _server_version() -> str:
    try:
        return version("a2a-coding-server")
    except PackageNotFoundError:
        return "0.0.0"


# The v1.0 AgentCard's fields ([P1.0]); the 1.0 variant keeps only these.
V10_CARD_FIELDS = (
    "name",
    "description",
    "supportedInterfaces",
    "provider",
    "version",
    "documentationUrl",
    "capabilities",
    "securitySchemes",
    "securityRequirements",
    "defaultInputModes",
    "defaultOutputModes",
    "skills",
    "signatures",
    "iconUrl",
)
V10_CAPABILITY_FIELDS = ("streaming", "pushNotifications", "extensions", "extendedAgentCard")
V10_SKILL_FIELDS = (
    "id",
    "name",
    "description",
    "tags",
    "examples",
    "inputModes",
    "outputModes",
    "securityRequirements",
)
V10_SCHEME_WRAPPERS = (
    "apiKeySecurityScheme",
    "httpAuthSecurityScheme",
    "oauth2SecurityScheme",
    "openIdConnectSecurityScheme",
    "mtlsSecurityScheme",
)


@dataclass(slots=True, frozen=True)
class Variant:
    body: bytes
    etag: str

    @classmethod
    def of(cls, card: dict[str, Any]) -> Variant:
        body = orjson.dumps(card)
        return cls(body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')


@dataclass(slots=True, frozen=True)
class Card:
    hybrid: Variant
    v10: Variant
    default_v10: bool
    """CARD_COMPAT=1.0: the 1.0 variant for requests that name no version."""
    last_modified: str
    max_age: int
    extensions: Declared = field(default_factory=Declared)
    """The extensions the card declares: what a request activates, and must name (`required`)."""
    origin: str = ""
    """The origin its URLs name (`http://localhost:41242`)."""
    rebuild: Callable[[str], Card] | None = None
    """With no PUBLIC_URL: the same card at another origin."""
    _at: dict[str, Card] = field(default_factory=dict)

    def at(self, host: str | None) -> Card:
        """The card as seen through the request's `Host`: with no PUBLIC_URL and a loopback host, its
        URLs name that origin; otherwise this card."""
        if self.rebuild is None or not host:
            return self
        origin = loopback_origin(host)
        if origin is None or origin == self.origin:
            return self
        card = self._at.get(origin)
        if card is None:
            if len(self._at) >= MAX_ORIGINS:
                return self
            card = self._at[origin] = self.rebuild(origin)
        return card

    def for_request(self, request: Request) -> Variant:
        """The variant the request's `A2A-Version` (header or query parameter) asks for."""
        raw = raw_version(request)
        major = raw.split(".")[0]
        if major == "1":
            return self.v10
        if major == "0":
            return self.hybrid
        return self.v10 if self.default_v10 else self.hybrid


def loopback_origin(host: str) -> str | None:
    """`http://<host>` when the `Host` header names this machine (localhost, 127.0.0.0/8, ::1) with an
    optional port, else None."""
    try:
        parts = urlsplit(f"http://{host}")
        name, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not name or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    if name != "localhost":
        try:
            if not ipaddress.ip_address(name).is_loopback:
                return None
        except ValueError:
            return None
    shown = f"[{name}]" if ":" in name else name
    return f"http://{shown}" + (f":{port}" if port is not None else "")


def v10_only(card: dict[str, Any]) -> dict[str, Any]:
    """The card without the v0.3 fields the hybrid carries: what a v1.0 schema check accepts."""
    out = {k: card[k] for k in V10_CARD_FIELDS if k in card}
    out["capabilities"] = {k: v for k, v in card["capabilities"].items() if k in V10_CAPABILITY_FIELDS}
    out["skills"] = [{k: v for k, v in s.items() if k in V10_SKILL_FIELDS} for s in card["skills"]]
    if "securitySchemes" in out:
        out["securitySchemes"] = {
            name: {k: v for k, v in scheme.items() if k in V10_SCHEME_WRAPPERS}
            for name, scheme in card["securitySchemes"].items()
        }
    return out


def extended_skills(options: CardOptions) -> list[dict[str, Any]] | None:
    """The extra skills of the authenticated extended card, or None when there is none to serve.

    From EXTENDED_CARD_SKILLS (JSON) and EXTENDED_CARD_FILE (a JSON list, or `{"skills": [...]}`); with
    AUTH_MODE=off nobody is authenticated, so no extended card is served.
    """
    skills = list(options.extended_card_skills)
    if options.extended_card_file:
        try:
            with open(options.extended_card_file, "rb") as f:
                loaded = orjson.loads(f.read())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise SettingError("EXTENDED_CARD_FILE", f"cannot read it as JSON: {exc}") from None
        if isinstance(loaded, dict):
            loaded = loaded.get("skills")
        if not isinstance(loaded, list):
            raise SettingError("EXTENDED_CARD_FILE", 'must hold a JSON list of skills or {"skills": [...]}')
        skills.extend(loaded)
    for skill in skills:
        ok = isinstance(skill, dict) and all(
            isinstance(skill.get(k), str) and skill[k] for k in ("id", "name", "description")
        )
        if not ok or not isinstance(skill.get("tags", []), list):
            raise SettingError(
                "EXTENDED_CARD_SKILLS", "each skill needs string id, name, description (and a list of tags)"
            )
    if not skills or options.auth.off:
        return None
    return [{"tags": [], **s} for s in skills]


def card_extensions(options: CardOptions, agent: Agent) -> list[dict[str, Any]]:
    """The agent's extensions (`Agent.extensions`), then CARD_EXTENSIONS (which replace the agent's entry
    of the same URI), as the card prints them."""
    merged: dict[str, dict[str, Any]] = {}
    for ext in agent.extensions:
        raw = {
            "uri": getattr(ext, "uri", None),
            "description": getattr(ext, "description", ""),
            "required": getattr(ext, "required", False),
            "params": dict(ext.params) if getattr(ext, "params", None) is not None else None,
        }
        try:
            entry = extension_entry(raw)
        except ValueError as exc:
            raise SettingError("AGENT_ADAPTER", f"{type(agent).__name__}.extensions: {exc}") from None
        merged[entry["uri"]] = entry
    for entry in options.card_extensions:
        merged[entry["uri"]] = entry
    return list(merged.values())


def build_card(
    options: CardOptions,
    agent: Agent,
    built_at: datetime,
    extra_skills: list[dict[str, Any]] | None = None,
    has_extended: bool = False,
    role: Role | None = None,
    origin: str | None = None,
    at_root: bool = False,
) -> Card:
    """The public card (`extra_skills` None) or the authenticated extended one (its extra skills appended).

    With `role`, the card of that role: its endpoints under the role's path (`/agents/{role}`, the default
    role's too), its card overrides, and the gRPC metadata that selects it, as an optional extension.
    `at_root`: the root card, the default role's served at `/.well-known/`: the same card with the root
    endpoints, which need no metadata on gRPC. `origin`: the loopback origin it is seen through when no
    PUBLIC_URL is set (`Card.at`)."""
    origin = origin or options.public_url
    grpc_address = _grpc_address(options, origin)
    overrides = role.entry.card if role is not None else None
    name = (overrides and overrides.name) or agent.name
    skills = _skills(agent) if overrides is None or overrides.skills is None else list(overrides.skills)
    extensions = card_extensions(options, agent)
    path = role.path if role is not None and not at_root else ""
    if role is not None and path and grpc_address:
        extensions.append(_role_extension(role))
    card: dict[str, Any] = {
        "name": name,
        "description": (overrides and overrides.description)
        or agent.description
        or f"{name} behind the A2A protocol",
        **_interfaces(origin + path, grpc_address),
        "version": _server_version(),
        "capabilities": {
            "streaming": True,
            "pushNotifications": True,
            "stateTransitionHistory": True,
            **({"extendedAgentCard": True} if has_extended else {}),
            **({"extensions": extensions} if extensions else {}),
        },
        "defaultInputModes": list(agent.input_modes),
        "defaultOutputModes": list(agent.output_modes),
        "skills": skills + (extra_skills or []),
        "supportsAuthenticatedExtendedCard": has_extended,
        **security_fields(options.auth),
        **_about(options),
    }
    signer = signing.signer(options.signing)
    if signer is not None:
        # Over the card as the v1.0 AgentCard proto sees it: the same for both variants.
        card["signatures"] = signer.signatures(v10_only(card))
    return Card(
        hybrid=Variant.of(card),
        v10=Variant.of(v10_only(card)),
        default_v10=options.card_compat == "1.0",
        last_modified=format_datetime(built_at, usegmt=True),
        max_age=options.card_max_age_s,
        extensions=Declared.of(extensions),
        origin=origin,
        rebuild=(
            (lambda o: build_card(options, agent, built_at, extra_skills, has_extended, role, o, at_root))
            if options.follows_host
            else None
        ),
    )


def _about(options: CardOptions) -> dict[str, Any]:
    """Who runs the agent and where to read about it, as the settings give them (unset: left out)."""
    about: dict[str, Any] = {}
    if options.card_provider_organization and options.card_provider_url:
        about["provider"] = {
            "organization": options.card_provider_organization,
            "url": options.card_provider_url,
        }
    if options.card_documentation_url:
        about["documentationUrl"] = options.card_documentation_url
    if options.card_icon_url:
        about["iconUrl"] = options.card_icon_url
    return about


def _grpc_address(options: CardOptions, origin: str) -> str:
    """The `host:port` the card names for gRPC ("" without gRPC): GRPC_PUBLIC_ADDRESS, or with none given
    and the card seen through another origin, that origin's host with GRPC_PORT."""
    grpc_address = options.grpc_public_address if options.grpc_port else ""
    if grpc_address and origin != options.public_url and options.grpc_follows_host:
        host = urlsplit(origin).hostname or "localhost"
        grpc_address = f"[{host}]:{options.grpc_port}" if ":" in host else f"{host}:{options.grpc_port}"
    return grpc_address


def _skills(agent: Agent) -> list[dict[str, Any]]:
    """The agent's skills as the card prints them."""
    return [
        {
            "id": s.id,
            "name": s.name,
            "description": s.description,
            "tags": list(s.tags),
            "examples": list(s.examples),
            **({"inputModes": list(s.input_modes)} if s.input_modes else {}),
            **({"outputModes": list(s.output_modes)} if s.output_modes else {}),
        }
        for s in agent.skills
    ]


def _role_extension(role: Role) -> dict[str, Any]:
    """The optional extension that tells a gRPC client the request metadata selecting `role`."""
    return {
        "uri": ROLE_EXTENSION,
        "description": f"gRPC: send the request metadata {ROLE_METADATA}: {role.name}",
        "required": False,
        "params": {"grpcMetadata": {ROLE_METADATA: role.name}, "role": role.name},
    }


def _interfaces(base: str, grpc_address: str) -> dict[str, Any]:
    """The card's endpoints under `base` (and gRPC's at `grpc_address`, if any), in the fields of both
    versions."""
    url = f"{base}/a2a/jsonrpc"
    # HTTP+JSON: one base URL for both versions; v0.3 clients append `/v1` themselves.
    rest_url = f"{base}/a2a/rest"
    return {
        # v1.0: every interface with its version, the preferred first.
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": protojson_v10.PROTOCOL_VERSION},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {
                "url": rest_url,
                "protocolBinding": "HTTP+JSON",
                "protocolVersion": protojson_v10.PROTOCOL_VERSION,
            },
            {"url": rest_url, "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
            # gRPC: `host:port`; the proto package tells the two versions apart on the one port.
            *(
                {"url": grpc_address, "protocolBinding": "GRPC", "protocolVersion": version}
                for version in ((protojson_v10.PROTOCOL_VERSION, "0.3") if grpc_address else ())
            ),
        ],
        # v0.3: the same endpoints in the fields v0.3 clients read.
        "protocolVersion": json_v03.PROTOCOL_VERSION,
        "url": url,
        "preferredTransport": "JSONRPC",
        "additionalInterfaces": [
            {"url": url, "transport": "JSONRPC"},
            {"url": rest_url, "transport": "HTTP+JSON"},
            *([{"url": grpc_address, "transport": "GRPC"}] if grpc_address else []),
        ],
    }


def _matches(if_none_match: str, etag: str) -> bool:
    tags = [t.strip() for t in if_none_match.split(",")]
    return "*" in tags or any(t.removeprefix("W/") == etag for t in tags)


def card_response(
    request: Request, card: Card, media_type: str = "application/json", public: bool = True
) -> Response:
    """The variant the request asks for, at the origin it came through (`Card.at`), conditional on
    `If-None-Match`; caches key it on A2A-Version."""
    variant = card.at(request.headers.get("host")).for_request(request)
    headers = {
        "ETag": variant.etag,
        "Vary": "A2A-Version",
        "Last-Modified": card.last_modified,
        "Cache-Control": f"{'public' if public else 'private'}, max-age={card.max_age}",
    }
    inm = request.headers.get("if-none-match")
    if inm is not None and _matches(inm, variant.etag):
        return Response(status_code=304, headers=headers)
    return Response(variant.body, media_type=media_type, headers=headers)

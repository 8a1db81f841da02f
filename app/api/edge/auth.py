"""Who is calling: API keys (kept only as sha256 hashes), OAuth2/OIDC bearer JWTs, or nobody (`off`).

The guard middleware (`auth_guard.py`) asks `Authenticator.authenticate` for every route but the card and the
health checks; the principal's name becomes the `owner` of everything the call creates or reads. The card
declares the same schemes (`security_fields`). Both are built from an `AuthOptions`, never the settings.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.agents.errors import SettingError
from app.options import from_attributes
from app.protocol.errors import A2AError, PermissionDeniedError, UnauthenticatedError

from .jwks import InsufficientScopeError, InvalidTokenError, JwtConfigError, JwtOptions, JwtVerifier

ANONYMOUS = "anonymous"
REALM = "a2a"
API_KEY_HEADER = "X-API-Key"
PRINCIPAL_KEY = "a2a.principal"
"""Where the guard (`auth_guard.Guard`) leaves the authenticated `Principal` in the ASGI scope."""


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    worker: bool = False
    """A remote worker's credential (WORKER_KEYS, or a JWT with WORKER_JWT_SCOPE): the worker endpoints
    only."""


class AuthSettings(Protocol):
    """What `AuthOptions.from_settings` reads of the server's settings (`settings.Settings`, not imported
    here)."""

    auth_mode: Literal["required", "off"]
    api_keys: dict[str, str]
    worker_keys: dict[str, str]
    worker_jwt_scope: str
    jwt_jwks_url: str
    jwt_issuer: str
    jwt_audience: str
    jwt_required_scopes: str
    jwt_algorithms: str
    jwt_principal_claim: str
    jwt_leeway_s: float
    jwks_cache_s: float
    jwks_refresh_min_s: float
    oidc_discovery_url: str


@dataclass(frozen=True, slots=True)
class AuthOptions:
    """Who may call, and with what: what `Authenticator` and the card's schemes (`security_fields`) are built
    from, once at start-up, instead of the server's settings. The defaults are the settings'."""

    mode: Literal["required", "off"] = "required"
    """AUTH_MODE."""
    api_keys: Mapping[str, str] = field(default_factory=dict)
    """API_KEYS: sha256 hex of a key → principal name."""
    worker_keys: Mapping[str, str] = field(default_factory=dict)
    """WORKER_KEYS: sha256 hex of a worker's key → worker name."""
    worker_jwt_scope: str = "a2a:worker"
    jwt: JwtOptions = field(default_factory=JwtOptions)
    """The JWT_* and JWKS_* settings; `jwt.jwks_url` empty: no JWTs."""
    oidc_discovery_url: str = ""
    """Advertised by the card, when set, as the JWT scheme's openIdConnect URL."""

    @property
    def off(self) -> bool:
        return self.mode == "off"

    @classmethod
    def from_settings(cls, settings: AuthSettings) -> AuthOptions:
        """The options of these settings, as given: `Authenticator` and `JwtVerifier` check them."""
        s = settings
        return cls(
            mode=s.auth_mode,
            api_keys=dict(s.api_keys),
            worker_keys=dict(s.worker_keys),
            worker_jwt_scope=s.worker_jwt_scope,
            jwt=from_attributes(
                JwtOptions,
                s,
                prefix="jwt_",
                scopes=tuple(x for x in s.jwt_required_scopes.replace(",", " ").split() if x),
                cache_s=s.jwks_cache_s,
                refresh_min_s=s.jwks_refresh_min_s,
            ),
            oidc_discovery_url=s.oidc_discovery_url,
        )


def hash_key(key: str) -> str:
    """What API_KEYS stores for a key: its sha256 in hex (keys are random: no salt or stretching needed)."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return secrets.token_urlsafe(32)


def challenge(err: A2AError) -> str:
    """The `WWW-Authenticate` value for a 401 or 403 (RFC 6750 §3)."""
    if isinstance(err, InsufficientScopeError):
        scope = err.data.get("scope", "") if isinstance(err.data, dict) else ""
        return f'Bearer realm="{REALM}", error="insufficient_scope", scope="{scope}"'
    if isinstance(err, InvalidTokenError):
        return f'Bearer realm="{REALM}", error="invalid_token"'
    return f'Bearer realm="{REALM}"'


class Authenticator:
    def __init__(self, options: AuthOptions) -> None:
        self.options = options
        """What it was built from (the cards declare the same schemes)."""
        self.off = options.off
        self.keys: Mapping[str, str] = {} if self.off else dict(options.api_keys)
        self.worker_keys: Mapping[str, str] = dict(options.worker_keys)
        self.worker_scope = options.worker_jwt_scope
        overlap = set(self.keys) & set(self.worker_keys)
        if overlap:
            raise SettingError("WORKER_KEYS", "a key cannot be both an API key and a worker key")
        try:
            self.jwt = JwtVerifier(options.jwt) if options.jwt.jwks_url and not self.off else None
        except JwtConfigError as exc:
            raise SettingError("JWT_JWKS_URL", str(exc)) from None
        if not self.off and not self.keys and self.jwt is None:
            raise SettingError(
                "AUTH_MODE",
                "AUTH_MODE=required needs API_KEYS or JWT_JWKS_URL (or AUTH_MODE=off for a trusted loopback)",
            )

    def describe(self) -> str:
        """One line for the start-up log."""
        if self.off:
            return f"auth OFF: every caller is the principal {ANONYMOUS!r} (AUTH_MODE=off)"
        modes = []
        if self.keys:
            modes.append(f"API keys for {len(set(self.keys.values()))} principal(s)")
        if self.jwt is not None:
            modes.append(f"JWTs from {self.jwt.issuer}")
        return "auth required: " + " and ".join(modes)

    async def aclose(self) -> None:
        if self.jwt is not None:
            await self.jwt.aclose()

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """The caller's principal; UnauthenticatedError (401) or PermissionDeniedError (403)."""
        if self.off:
            return Principal(ANONYMOUS)
        return await self._verify(headers)

    async def _verify(self, headers: Mapping[str, str]) -> Principal:
        api_key = headers.get("x-api-key")
        scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
        token = token.strip()
        if api_key is None and not (scheme.lower() == "bearer" and token):
            raise UnauthenticatedError(
                f"Authentication required: send Authorization: Bearer <token> or {API_KEY_HEADER}: <key>"
            )
        candidate = api_key if api_key is not None else token
        digest = hash_key(candidate)
        name = self.keys.get(digest) if self.keys else None
        if name is not None:
            return Principal(name)
        worker = self.worker_keys.get(digest)
        if worker is not None:
            return Principal(worker, worker=True)
        if api_key is None and self.jwt is not None:
            subject, scopes = await self.jwt.verify(token)
            return Principal(subject, scopes, worker=self.worker_scope in scopes)
        raise InvalidTokenError("The credential is not valid here")

    async def authenticate_worker(self, headers: Mapping[str, str]) -> Principal:
        """A remote worker's principal, whatever AUTH_MODE says: a worker always shows its credential.
        UnauthenticatedError without one, PermissionDeniedError for an ordinary A2A credential."""
        if not self.worker_keys and self.jwt is None:
            raise PermissionDeniedError("No worker credentials are configured here (WORKER_KEYS)")
        principal = await self._verify(headers)
        if not principal.worker:
            raise PermissionDeniedError("Only a worker credential may call the worker endpoints")
        return principal


def security_fields(options: AuthOptions) -> dict[str, Any]:
    """The card's security declarations for both versions in one document.

    v0.3 reads OpenAPI-style schemes (`type`, ...) and `security`; v1.0 reads one-of wrappers
    (`apiKeySecurityScheme`, ...) and `securityRequirements`. Each scheme object carries both forms, as
    a2a-python's hybrid card does; each reader ignores the other's fields.
    """
    if options.off:
        return {}
    schemes: dict[str, dict[str, Any]] = {}
    scopes: dict[str, list[str]] = {}
    if options.api_keys:
        schemes["apiKey"] = {
            "type": "apiKey",
            "in": "header",
            "name": API_KEY_HEADER,
            "apiKeySecurityScheme": {"location": "header", "name": API_KEY_HEADER},
        }
        schemes["bearer"] = {
            "type": "http",
            # The same value in both forms (auth schemes are case-insensitive, RFC 9110 §11.1): a v1.0
            # client that reads the v0.3 form (a2a-sdk's card resolver) sees the scheme a signature covers.
            "scheme": "Bearer",
            "httpAuthSecurityScheme": {"scheme": "Bearer"},
        }
        scopes["apiKey"] = scopes["bearer"] = []
    if options.jwt.jwks_url:
        if options.oidc_discovery_url:
            schemes["oidc"] = {
                "type": "openIdConnect",
                "openIdConnectUrl": options.oidc_discovery_url,
                "openIdConnectSecurityScheme": {"openIdConnectUrl": options.oidc_discovery_url},
            }
            scopes["oidc"] = list(options.jwt.scopes)
        else:
            schemes["jwt"] = {
                "type": "http",
                "scheme": "Bearer",
                "bearerFormat": "JWT",
                "httpAuthSecurityScheme": {"scheme": "Bearer", "bearerFormat": "JWT"},
            }
            scopes["jwt"] = list(options.jwt.scopes)
    return {
        "securitySchemes": schemes,
        "security": [{name: s} for name, s in scopes.items()],
        "securityRequirements": [{"schemes": {name: {"list": s}}} for name, s in scopes.items()],
    }

"""Bearer JWTs from an OAuth2/OIDC issuer, verified with PyJWT against the issuer's JWKS.

Keys are cached for `JWKS_CACHE_S`; a token signed with a `kid` not in the cache re-reads the JWKS (key
rotation), at most once per `JWKS_REFRESH_MIN_S` so a flood of made-up kids costs one fetch. Only
asymmetric algorithms are accepted, so `alg: none` and HMAC-with-a-public-key confusions never verify.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
from jwt import PyJWK, PyJWKSet

from app.protocol.errors import PermissionDeniedError, UnauthenticatedError

log = logging.getLogger(__name__)

ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
FETCH_TIMEOUT_S = 5.0


class JwtConfigError(ValueError):
    """The JWT settings cannot work; raised at start-up."""


class InvalidTokenError(UnauthenticatedError):
    """A bearer token that does not verify (RFC 6750 `invalid_token`)."""


class InsufficientScopeError(PermissionDeniedError):
    """A verified token without a required scope (RFC 6750 `insufficient_scope`)."""


def token_scopes(claims: dict[str, Any]) -> frozenset[str]:
    """Scopes from `scope` (space-separated, RFC 8693) or `scp` (a list or a string, as some IdPs do)."""
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class JwtOptions:
    """What the verifier and its JWKS fetcher run with: the JWT_* and JWKS_* settings, as given (checked by
    `JwtVerifier`). Built by `auth.AuthOptions.from_settings`: each field is the setting `JWT_<FIELD>` but the
    three that say otherwise; the defaults are the settings'."""

    jwks_url: str = ""
    """JWT_JWKS_URL; empty: no JWT authentication."""
    issuer: str = ""
    audience: str = ""
    scopes: tuple[str, ...] = ()
    """JWT_REQUIRED_SCOPES, split."""
    algorithms: str = "RS256,ES256"
    """JWT_ALGORITHMS, comma-separated."""
    principal_claim: str = "sub"
    leeway_s: float = 30.0
    cache_s: float = 300.0
    """JWKS_CACHE_S."""
    refresh_min_s: float = 10.0
    """JWKS_REFRESH_MIN_S."""


class JwtVerifier:
    def __init__(self, options: JwtOptions, client: httpx.AsyncClient | None = None) -> None:
        if not options.issuer or not options.audience:
            raise JwtConfigError("JWT_JWKS_URL needs JWT_ISSUER and JWT_AUDIENCE too")
        algorithms = [a.strip() for a in options.algorithms.split(",") if a.strip()]
        bad = [a for a in algorithms if a not in ASYMMETRIC]
        if not algorithms or bad:
            raise JwtConfigError(
                f"JWT_ALGORITHMS takes asymmetric algorithms only ({', '.join(sorted(ASYMMETRIC))})"
            )
        self.jwks_url = options.jwks_url
        self.issuer = options.issuer
        self.audience = options.audience
        self.scopes = frozenset(options.scopes)
        self.algorithms = algorithms
        self.claim = options.principal_claim
        self.leeway = options.leeway_s
        self.cache_s = options.cache_s
        self.refresh_min_s = options.refresh_min_s
        self._client = client or httpx.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False)
        self._keys: dict[str, PyJWK] = {}
        self._fetched_at = float("-inf")
        self._lock = asyncio.Lock()
        self.fetches = 0

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _fetch(self) -> None:
        self.fetches += 1
        self._fetched_at = time.monotonic()
        try:
            resp = await self._client.get(self.jwks_url)
            resp.raise_for_status()
            keyset = PyJWKSet.from_dict(resp.json())
        except (httpx.HTTPError, ValueError, jwt.PyJWKSetError) as exc:
            log.warning("could not read the JWKS at %s: %s", self.jwks_url, exc)
            return
        self._keys = {k.key_id or "": k for k in keyset.keys}

    async def _key(self, kid: str | None) -> PyJWK:
        now = time.monotonic()
        if now - self._fetched_at > self.cache_s or (
            kid not in self._keys and now - self._fetched_at >= self.refresh_min_s
        ):
            async with self._lock:
                # Another request may have refreshed while this one waited for the lock.
                if time.monotonic() - self._fetched_at >= min(self.refresh_min_s, self.cache_s):
                    await self._fetch()
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        key = self._keys.get(kid or "")
        if key is None:
            raise InvalidTokenError("The token's signing key (kid) is not one the issuer publishes")
        return key

    async def verify(self, token: str) -> tuple[str, frozenset[str]]:
        """The principal name and scopes of a valid token; InvalidTokenError or InsufficientScopeError."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise InvalidTokenError("The bearer token is not a well-formed JWT") from None
        if header.get("alg") not in self.algorithms:
            raise InvalidTokenError(f"Token algorithm {header.get('alg')!r} is not accepted")
        kid = header.get("kid")
        key = await self._key(kid if isinstance(kid, str) else None)
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", self.claim]},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidTokenError("The token has expired") from None
        except jwt.InvalidAudienceError:
            raise InvalidTokenError("The token is not meant for this server (audience)") from None
        except jwt.InvalidIssuerError:
            raise InvalidTokenError("The token's issuer is not trusted here") from None
        except jwt.MissingRequiredClaimError as exc:
            raise InvalidTokenError(f"The token lacks the {exc.claim!r} claim") from None
        except jwt.InvalidTokenError:
            raise InvalidTokenError("The token's signature or claims do not verify") from None
        principal = claims.get(self.claim)
        if not isinstance(principal, str) or not principal:
            raise InvalidTokenError(f"The token's {self.claim!r} claim is not a non-empty string")
        scopes = token_scopes(claims)
        missing = self.scopes - scopes
        if missing:
            raise InsufficientScopeError(
                f"The token lacks the scope(s) {' '.join(sorted(missing))}",
                {"scope": " ".join(sorted(self.scopes))},
            )
        return principal, scopes

"""Credentials for tests: API keys of two principals, and a JWKS served on loopback with keys to sign with."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from app.api.edge.auth import hash_key
from tests.support.loopback import Loopback, QuietHandler
from tests.support.secrets import remember

KEYS = {name: f"{name}-{uuid.uuid4().hex}" for name in ("alice", "bob", "carol")}
"""API keys by principal; carol is the console admin where a test makes one (CONSOLE_ADMINS)."""
remember(*KEYS.values())
ISSUER = "https://issuer.test"
AUDIENCE = "a2a-tests"


def api_keys_env(**extra: str) -> dict[str, str]:
    """Server settings that admit alice and bob by API key."""
    return {
        "AUTH_MODE": "required",
        "API_KEYS": json.dumps({hash_key(key): name for name, key in KEYS.items()}),
        **extra,
    }


def key_of(name: str) -> dict[str, str]:
    return {"X-API-Key": KEYS[name]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class SigningKey:
    """An RSA (or EC) key pair with a kid: signs tokens and shows its public JWK."""

    def __init__(self, kid: str, kind: str = "RSA") -> None:
        self.kid = kid
        self.alg = "RS256" if kind == "RSA" else "ES256"
        self.private = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if kind == "RSA"
            else ec.generate_private_key(ec.SECP256R1())
        )
        algo = jwt.algorithms.RSAAlgorithm if kind == "RSA" else jwt.algorithms.ECAlgorithm
        self.jwk: dict[str, Any] = {
            **json.loads(algo.to_jwk(self.private.public_key())),
            "kid": kid,
            "use": "sig",
        }

    def sign(self, sub: str = "carol", *, headers: dict[str, Any] | None = None, **claims: Any) -> str:
        now = int(time.time())
        body: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now, "exp": now + 300}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        token = jwt.encode(
            body, self.private, algorithm=self.alg, headers={"kid": self.kid, **(headers or {})}
        )
        remember(token)  # no log of the run may show it (tests/conftest.py)
        return token


class JwksServer(Loopback):
    """A JWKS document on loopback; `keys` can change (rotation) and `hits` counts the fetches."""

    def __init__(self, keys: list[SigningKey]) -> None:
        self.keys = list(keys)
        self.hits = 0
        outer = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                self.reply(json.dumps({"keys": [k.jwk for k in outer.keys]}).encode(), "application/json")

        super().__init__(Handler)
        self.url += "/jwks.json"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "AUTH_MODE": "required",
            "JWT_JWKS_URL": self.url,
            "JWT_ISSUER": ISSUER,
            "JWT_AUDIENCE": AUDIENCE,
            **extra,
        }


async def db_state(database_url: str) -> dict[str, Any]:
    """What a rejected request must not change: every task row (but lease expiry, which heartbeats move)
    and the row counts of messages, events and artifacts."""
    from sqlalchemy import text

    from app.store.db import create_engine

    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            tasks = (
                await conn.execute(
                    text("SELECT id, owner, context_id, state, last_seq, lease_owner FROM tasks ORDER BY id")
                )
            ).all()
            counts = {
                t: (await conn.execute(text(f"SELECT count(*) FROM {t}"))).scalar_one()
                for t in ("messages", "events", "artifacts")
            }
    finally:
        await engine.dispose()
    return {"tasks": [tuple(r) for r in tasks], **counts}

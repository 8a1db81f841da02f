"""Bearer JWTs verified against a JWKS served on loopback, end to end through a real server: every way a
token can be wrong is a 401 (`invalid_token`), a missing scope a 403, and a key rotation is picked up."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from app.api.edge.auth import AuthOptions
from app.api.edge.jwks import InvalidTokenError, JwtVerifier
from app.settings import Settings
from tests.conftest import make_server
from tests.support.auth import AUDIENCE, ISSUER, JwksServer, SigningKey, bearer

SCOPE = "a2a:tasks"


@pytest.fixture(scope="module")
def keys() -> dict[str, SigningKey]:
    return {"k1": SigningKey("k1"), "ec": SigningKey("ec", "EC"), "evil": SigningKey("k1")}


@pytest.fixture(scope="module")
async def jwks(keys):
    srv = JwksServer([keys["k1"], keys["ec"]])
    yield srv
    srv.close()


@pytest.fixture(scope="module")
async def jwt_server(jwks, tmp_path_factory):
    srv = await make_server(
        "sqlite",
        tmp_path_factory.mktemp("jwt"),
        **jwks.env(
            JWT_REQUIRED_SCOPES=SCOPE,
            JWKS_REFRESH_MIN_S="0",
            OIDC_DISCOVERY_URL=ISSUER + "/.well-known/openid-configuration",
        ),
    )
    yield srv
    srv.stop()


@pytest.fixture
async def c(jwt_server):
    async with httpx.AsyncClient(base_url=jwt_server.base_url, timeout=15) as client:
        yield client


def _b64(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


async def _get(c: httpx.AsyncClient, token: str) -> httpx.Response:
    return await c.get("/a2a/rest/tasks", headers=bearer(token))


@pytest.mark.parametrize("kind", ["RSA", "EC"])
async def test_a_valid_token_gets_in_as_its_subject(c, keys, kind):
    key = keys["k1"] if kind == "RSA" else keys["ec"]
    carol = key.sign("carol", scope=f"openid {SCOPE}")
    dave = key.sign("dave", scp=[SCOPE])
    sent = await c.post(
        "/a2a/rest/message:send",
        json={"message": {"messageId": f"m-{kind}", "role": "ROLE_USER", "parts": [{"text": "say:hi"}]}},
        headers=bearer(carol),
    )
    assert sent.status_code == 200, sent.text
    task_id = sent.json()["task"]["id"]
    assert (await c.get(f"/a2a/rest/tasks/{task_id}", headers=bearer(carol))).status_code == 200
    assert (await c.get(f"/a2a/rest/tasks/{task_id}", headers=bearer(dave))).status_code == 404


def _unsigned(header: dict, claims: dict) -> str:
    return _b64(header) + "." + _b64(claims)


def _bad_tokens(keys: dict[str, SigningKey]) -> dict[str, str]:
    k = keys["k1"]
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": now + 300, "scope": SCOPE}
    # HMAC keyed with the RSA public key: the classic algorithm-confusion forgery.
    public_pem = k.private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    hs = _unsigned({"alg": "HS256", "typ": "JWT", "kid": "k1"}, claims)
    hs_sig = base64.urlsafe_b64encode(hmac.new(public_pem, hs.encode(), hashlib.sha256).digest())
    good = k.sign(scope=SCOPE).split(".")
    return {
        "wrong issuer": k.sign(scope=SCOPE, iss="https://evil.test"),
        "wrong audience": k.sign(scope=SCOPE, aud="someone-else"),
        "expired": k.sign(scope=SCOPE, exp=now - 3600, iat=now - 7200),
        "no exp": k.sign(scope=SCOPE, exp=None),
        "no sub": k.sign(None, scope=SCOPE),
        "bad signature": keys["evil"].sign(scope=SCOPE),
        "alg none": _unsigned({"alg": "none", "typ": "JWT", "kid": "k1"}, claims) + ".",
        "HS256 keyed with the public key": hs + "." + hs_sig.rstrip(b"=").decode(),
        "unknown kid": SigningKey("nobody-knows").sign(scope=SCOPE),
        "tampered payload": good[0] + "." + _b64({**claims, "sub": "root"}) + "." + good[2],
        "not a jwt": "just-a-string",
    }


@pytest.mark.parametrize(
    "case",
    [
        "wrong issuer",
        "wrong audience",
        "expired",
        "no exp",
        "no sub",
        "bad signature",
        "alg none",
        "HS256 keyed with the public key",
        "unknown kid",
        "tampered payload",
        "not a jwt",
    ],
)
async def test_a_bad_token_is_401_invalid_token(c, keys, case):
    resp = await _get(c, _bad_tokens(keys)[case])
    assert resp.status_code == 401, resp.text
    assert 'error="invalid_token"' in resp.headers["www-authenticate"]
    assert resp.json()["error"]["status"] == "UNAUTHENTICATED"
    rpc = await c.post(
        "/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}},
        headers=bearer(_bad_tokens(keys)[case]),
    )
    assert rpc.status_code == 401 and rpc.json()["error"]["code"] == -32090


async def test_a_token_without_the_scope_is_403(c, keys):
    resp = await _get(c, keys["k1"].sign(scope="openid"))
    assert resp.status_code == 403
    assert (
        resp.headers["www-authenticate"] == f'Bearer realm="a2a", error="insufficient_scope", scope="{SCOPE}"'
    )
    assert resp.json()["error"]["status"] == "PERMISSION_DENIED"


async def test_key_rotation_is_picked_up_by_an_unknown_kid(c, jwks, keys):
    rotated = SigningKey("k2")
    assert (await _get(c, rotated.sign(scope=SCOPE))).status_code == 401
    jwks.keys.append(rotated)
    hits = jwks.hits
    assert (await _get(c, rotated.sign(scope=SCOPE))).status_code == 200
    assert jwks.hits == hits + 1
    assert (await _get(c, rotated.sign(scope=SCOPE))).status_code == 200
    assert jwks.hits == hits + 1, "a known kid is served from the cache"


async def test_card_declares_openid_connect(c):
    card = (await c.get("/.well-known/agent-card.json")).json()
    assert card["securitySchemes"]["oidc"]["type"] == "openIdConnect"
    assert card["securitySchemes"]["oidc"]["openIdConnectSecurityScheme"]["openIdConnectUrl"].startswith(
        ISSUER
    )
    assert card["security"] == [{"oidc": [SCOPE]}]
    assert card["securityRequirements"] == [{"schemes": {"oidc": {"list": [SCOPE]}}}]


async def test_unknown_kids_refetch_at_most_once_per_interval(jwks):
    """A flood of made-up kids costs one JWKS fetch per JWKS_REFRESH_MIN_S, not one per request."""
    settings = Settings(
        _env_file=None,
        auth_mode="required",
        jwt_jwks_url=jwks.url,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        jwks_refresh_min_s=3600,
    )
    verifier = JwtVerifier(AuthOptions.from_settings(settings).jwt)
    try:
        hits = jwks.hits
        for i in range(5):
            with pytest.raises(InvalidTokenError):
                await verifier.verify(SigningKey(f"made-up-{i}").sign())
        assert jwks.hits == hits + 1
    finally:
        await verifier.aclose()


def test_pyjwt_refuses_none_by_itself():
    """Belt and braces: even the library call we make rejects an unsigned token."""
    token = jwt.encode({"sub": "x"}, None, algorithm="none")
    with pytest.raises(jwt.InvalidTokenError):
        jwt.decode(token, "k", algorithms=["RS256"])

"""Interop: signed cards served by a real server, verified by the official Python SDK (`a2a-sdk` 1.3.0).

Each server signs with one key (ES256, RS256, EdDSA; PEM or JWK), runs two roles, API keys, an extended
card and gRPC, on both databases. Every variant it serves verifies with the SDK's own verifier
(`create_signature_verifier`) through the SDK's own paths: the card resolver (hybrid, and the 1.0 variant
with `A2A-Version: 1.0`), per role, and the client's `get_extended_agent_card` over JSON-RPC, HTTP+JSON and
gRPC; the extended card of the v0.3 JSON-RPC method (hybrid) as the resolver parses it. A tampered card
fails; a restart with the same key serves the same bytes and ETag, another key changes both; during a
rotation (two keys) either key verifies. In process: tests/api/test_card_signing.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import GetExtendedAgentCardRequest
from a2a.utils.constants import TransportProtocol
from a2a.utils.signing import InvalidSignaturesError

from tests.api.test_card_signing import new_key, verifier, write_key
from tests.conftest import BACKENDS, make_server
from tests.interop.test_interop_grpc import channel
from tests.support.auth import KEYS, api_keys_env
from tests.support.server import ServerProcess, free_port

ALICE = {"X-API-Key": KEYS["alice"]}
SKILLS = '[{"id": "admin", "name": "Admin", "description": "Only for signed-in callers", "tags": ["x"]}]'
AGENTS = {"coder": {"adapter": "scripted"}, "reviewer": {"adapter": "scripted"}}
EXTENSIONS = [
    {"uri": "https://example.com/ext/v1", "description": "ünïcode ✓", "params": {"n": 1.5, "l": [1]}}
]
KEYS_BY_ALG = {"ES256": "pem", "RS256": "jwk", "EdDSA": "pem"}


async def signing_server(backend: str, tmp: Path, files: str, kids: str) -> ServerProcess:
    port = free_port()
    srv = await make_server(
        backend,
        tmp,
        **api_keys_env(
            AGENTS=json.dumps(AGENTS),
            CARD_EXTENSIONS=json.dumps(EXTENSIONS),
            EXTENDED_CARD_SKILLS=SKILLS,
            GRPC_PORT=str(port),
            CARD_SIGNING_KEY_FILE=files,
            CARD_SIGNING_KID=kids,
            CARD_SIGNING_JKU="https://keys.example/jwks.json",
        ),
    )
    srv.grpc_port = port  # type: ignore[attr-defined]
    return srv


@pytest.fixture(scope="module", params=[(b, a) for b in BACKENDS for a in KEYS_BY_ALG], ids="-".join)
async def signed(
    request: pytest.FixtureRequest, tmp_path_factory: Any
) -> AsyncIterator[tuple[ServerProcess, Any]]:
    """A server signing with one key of the algorithm, and the official verifier for that key."""
    backend, alg = request.param
    tmp = tmp_path_factory.mktemp(f"signed-{backend}-{alg}")
    key = new_key(alg)
    path = write_key(tmp / f"key.{KEYS_BY_ALG[alg]}", key, KEYS_BY_ALG[alg])
    srv = await signing_server(backend, tmp, str(path), alg)
    yield srv, verifier({alg: key.public_key()})
    srv.stop()


async def _every_variant(srv: ServerProcess, verify: Any) -> int:
    """Verify every card variant through the SDK's own paths; the number verified."""
    checked = 0
    async with httpx.AsyncClient(timeout=30, headers=ALICE) as http:
        for prefix in ("", "/agents/reviewer"):
            resolver = A2ACardResolver(http, srv.base_url + prefix)
            hybrid = await resolver.get_agent_card(signature_verifier=verify)
            v10 = await resolver.get_agent_card(
                http_kwargs={"headers": {"A2A-Version": "1.0"}}, signature_verifier=verify
            )
            assert hybrid == v10, "the resolver reads the same card from both variants"
            assert hybrid.signatures and hybrid.capabilities.extensions[0].uri == EXTENSIONS[0]["uri"]
            checked += 2
            # The v0.3 JSON-RPC extended card (the hybrid), parsed as the resolver parses a card.
            resp = await http.post(
                f"{srv.base_url}{prefix}/a2a/jsonrpc",
                json={"jsonrpc": "2.0", "id": 1, "method": "agent/getAuthenticatedExtendedCard"},
            )
            verify(parse_agent_card(resp.json()["result"]))
            checked += 1
            # The client's GetExtendedAgentCard, by each binding in protocol 1.0 (the 1.0 variant).
            for binding in (TransportProtocol.JSONRPC, TransportProtocol.HTTP_JSON, TransportProtocol.GRPC):
                metadata = {"x-api-key": KEYS["alice"], **({"a2a-role": "reviewer"} if prefix else {})}
                config = ClientConfig(
                    httpx_client=http,
                    supported_protocol_bindings=[binding],
                    grpc_channel_factory=lambda url, metadata=metadata: channel(url, metadata),
                )
                client = ClientFactory(config).create(hybrid)
                try:
                    extended = await client.get_extended_agent_card(
                        GetExtendedAgentCardRequest(), signature_verifier=verify
                    )
                finally:
                    await client.close()
                assert "admin" in [s.id for s in extended.skills], binding
                assert extended.signatures != hybrid.signatures, "another card, another signature"
                checked += 1
    return checked


async def test_every_variant_verifies_with_the_official_verifier(signed):
    srv, verify = signed
    assert await _every_variant(srv, verify) == 12


async def test_a_tampered_card_fails_the_official_verifier(signed):
    srv, verify = signed
    async with httpx.AsyncClient(timeout=30) as http:
        for headers in ({}, {"A2A-Version": "1.0"}):
            raw = (await http.get(f"{srv.base_url}/.well-known/agent-card.json", headers=headers)).json()
            verify(parse_agent_card(json.loads(json.dumps(raw))))
            raw["capabilities"]["extensions"][0]["description"] = "ünïcode ✗"
            with pytest.raises(InvalidSignaturesError):
                verify(parse_agent_card(raw))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_etag_follows_the_key_across_restarts(backend, tmp_path):
    first, second = new_key("ES256"), new_key("ES256")
    key_file = tmp_path / "key.pem"
    write_key(key_file, first, "pem")
    srv = await signing_server(backend, tmp_path, str(key_file), "k1")
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as http:
            url = "/.well-known/agent-card.json"
            before = await http.get(url)
            assert (await http.get(url, headers={"If-None-Match": before.headers["etag"]})).status_code == 304
            srv.restart()
            again = await http.get(url)
            assert (again.content, again.headers["etag"]) == (before.content, before.headers["etag"]), (
                "the same key signs the same bytes: replicas and restarts agree"
            )
            write_key(key_file, second, "pem")
            srv.restart()
            rekeyed = await http.get(url)
            assert rekeyed.headers["etag"] != before.headers["etag"]
            assert (await http.get(url, headers={"If-None-Match": before.headers["etag"]})).status_code == 200
        verifier({"k1": second.public_key()})(parse_agent_card(rekeyed.json()))
        with pytest.raises(InvalidSignaturesError):
            verifier({"k1": first.public_key()})(parse_agent_card(rekeyed.json()))
    finally:
        srv.stop()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_rotation_verifies_with_either_key(backend, tmp_path):
    old, new = new_key("RS256"), new_key("EdDSA")
    files = f"{write_key(tmp_path / 'old.pem', old, 'pem')},{write_key(tmp_path / 'new.jwk', new, 'jwk')}"
    srv = await signing_server(backend, tmp_path, files, "old,new")
    try:
        assert await _every_variant(srv, verifier({"old": old.public_key()})) == 12
        assert await _every_variant(srv, verifier({"new": new.public_key()})) == 12
    finally:
        srv.stop()

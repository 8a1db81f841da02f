"""Authentication by API key on a real server: who gets in, the 401 in each binding's shape, what stays
public, the card's security declarations (read by the official SDK's types), the extended card, hash-key."""

from __future__ import annotations

import json
import os
import subprocess

import grpc
import httpx
import pytest
from a2a.compat.v0_3 import a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc

from app.api.edge.auth import hash_key
from tests.conftest import make_server
from tests.support.auth import KEYS, api_keys_env, bearer, key_of
from tests.support.rpc import text_message
from tests.support.secrets import remember
from tests.support.server import BIN, ROOT, free_port

V10 = {"A2A-Version": "1.0"}

# (method, path, body): one route of each kind; none may answer without a credential.
GUARDED = [
    ("POST", "/a2a/jsonrpc", {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}),
    ("POST", "/a2a", {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}),
    ("GET", "/a2a/rest/tasks/x", None),
    ("GET", "/a2a/rest/tasks", None),
    ("POST", "/a2a/rest/message:send", {"message": {}}),
    ("GET", "/a2a/rest/extendedAgentCard", None),
    ("GET", "/a2a/rest/acme/tasks/x", None),
    ("GET", "/a2a/rest/v1/tasks/x", None),
    ("GET", "/a2a/rest/v1/card", None),
    ("GET", "/a2a/tasks/x", None),
    ("GET", "/a2a/tasks", None),
    ("GET", "/agents", None),
    ("GET", "/no/such/route", None),
]


@pytest.fixture
async def anon(auth_server):
    async with httpx.AsyncClient(base_url=auth_server.base_url, timeout=30) as c:
        yield c


@pytest.mark.parametrize(("method", "path", "body"), GUARDED)
@pytest.mark.parametrize(
    "headers", [{}, {"X-API-Key": "wrong"}, bearer("wrong"), {"Authorization": "Basic eDp5"}]
)
async def test_every_route_needs_a_valid_credential(anon, method, path, body, headers):
    resp = await anon.request(method, path, json=body, headers=headers)
    assert resp.status_code == 401, resp.text
    assert resp.headers["www-authenticate"].startswith('Bearer realm="a2a"')
    data = resp.json()
    if path in ("/a2a/jsonrpc", "/a2a"):
        assert data == {"jsonrpc": "2.0", "id": None, "error": data["error"]}
        assert data["error"]["code"] == -32090
    elif path.startswith(("/a2a/rest/v1/", "/a2a/tasks")):
        assert data["code"] == -32090 and data["type"] == "UnauthenticatedError"
    else:
        assert data["error"]["code"] == 401 and data["error"]["status"] == "UNAUTHENTICATED"
        assert data["error"]["details"][0]["reason"] == "UNAUTHENTICATED"
    assert "Traceback" not in resp.text


async def test_v10_jsonrpc_401_carries_error_info(anon):
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    resp = await anon.post("/a2a/jsonrpc", json=body, headers=V10)
    assert resp.status_code == 401
    assert resp.json()["error"]["data"][0]["reason"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(
    "path", ["/.well-known/agent-card.json", "/.well-known/agent.json", "/healthz", "/readyz"]
)
async def test_card_and_health_stay_public(anon, path):
    assert (await anon.get(path)).status_code == 200


@pytest.mark.parametrize("how", ["x-api-key", "bearer"])
async def test_a_valid_key_gets_in_either_way(anon, how):
    headers = key_of("alice") if how == "x-api-key" else bearer(KEYS["alice"])
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {"message": text_message("say:hi")},
    }
    resp = await anon.post("/a2a/jsonrpc", json=body, headers=headers)
    assert resp.status_code == 200
    assert resp.json()["result"]["status"]["state"] == "completed"


async def test_card_declares_the_schemes_for_both_versions(anon):
    from a2a.compat.v0_3.types import AgentCard as V03Card
    from a2a.types import AgentCard
    from google.protobuf.json_format import ParseDict

    card = (await anon.get("/.well-known/agent-card.json")).json()
    assert card["security"] == [{"apiKey": []}, {"bearer": []}]
    assert card["securityRequirements"][0] == {"schemes": {"apiKey": {"list": []}}}
    v10 = ParseDict(card, AgentCard(), ignore_unknown_fields=True)
    assert v10.security_schemes["apiKey"].api_key_security_scheme.name == "X-API-Key"
    assert v10.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert v10.capabilities.extended_agent_card is True
    v03 = V03Card.model_validate(card)
    assert v03.security_schemes["apiKey"].root.in_.value == "header"
    assert v03.supports_authenticated_extended_card is True


async def test_extended_card_only_for_the_authenticated(anon):
    public = (await anon.get("/.well-known/agent-card.json")).json()
    assert "admin" not in {s["id"] for s in public["skills"]}
    v03 = {"jsonrpc": "2.0", "id": 1, "method": "agent/getAuthenticatedExtendedCard"}
    got = (await anon.post("/a2a/jsonrpc", json=v03, headers=key_of("bob"))).json()["result"]
    assert "admin" in {s["id"] for s in got["skills"]}
    assert got["name"] == public["name"]
    v10 = {"jsonrpc": "2.0", "id": 2, "method": "GetExtendedAgentCard"}
    got = (await anon.post("/a2a/jsonrpc", json=v10, headers={**key_of("bob"), **V10})).json()["result"]
    assert "admin" in {s["id"] for s in got["skills"]}
    rest = await anon.get("/a2a/rest/extendedAgentCard", headers=key_of("bob"))
    assert rest.status_code == 200 and "admin" in {s["id"] for s in rest.json()["skills"]}
    v03rest = await anon.get("/a2a/rest/v1/card", headers=key_of("bob"))
    assert "admin" in {s["id"] for s in v03rest.json()["skills"]}
    assert (await anon.get("/a2a/rest/extendedAgentCard")).status_code == 401


async def test_no_extended_card_when_none_is_configured(client):
    """The anonymous test server has none: v0.3 says not configured, v1.0 says not declared."""
    v03 = {"jsonrpc": "2.0", "id": 1, "method": "agent/getAuthenticatedExtendedCard"}
    assert (await client.post("/a2a/jsonrpc", json=v03)).json()["error"]["code"] == -32007
    v10 = {"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}
    assert (await client.post("/a2a/jsonrpc", json=v10, headers=V10)).json()["error"]["code"] == -32004


def test_hash_key_cli():
    done = subprocess.run(
        [str(BIN / "a2a-server"), "hash-key"], input="s3cret\n", capture_output=True, text=True, check=True
    )
    assert hash_key("s3cret") in done.stdout
    gen = subprocess.run([str(BIN / "a2a-server"), "hash-key", "--generate"], capture_output=True, text=True)
    key = gen.stdout.split("not stored): ")[1].split()[0]
    assert len(key) >= 40 and hash_key(key) in gen.stdout


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"AUTH_MODE": "required"}, "AUTH_MODE"),
        ({"AUTH_MODE": "sometimes"}, "AUTH_MODE"),
        ({"AUTH_MODE": "required", "API_KEYS": '{"abc": "alice"}'}, "API_KEYS"),
        ({"AUTH_MODE": "required", "API_KEYS": "not json"}, "API_KEYS"),
        ({"AUTH_MODE": "required", "JWT_JWKS_URL": "http://127.0.0.1:9/jwks"}, "JWT_JWKS_URL"),
        (
            {
                "AUTH_MODE": "required",
                "JWT_JWKS_URL": "http://127.0.0.1:9/jwks",
                "JWT_ISSUER": "i",
                "JWT_AUDIENCE": "a",
                "JWT_ALGORITHMS": "HS256",
            },
            "JWT_JWKS_URL",
        ),
        ({"AUTH_MODE": "off", "EXTENDED_CARD_SKILLS": '[{"id": 1}]'}, "EXTENDED_CARD_SKILLS"),
        ({"AUTH_MODE": "off", "EXTENDED_CARD_FILE": "/nonexistent.json"}, "EXTENDED_CARD_FILE"),
    ],
)
def test_auth_settings_that_cannot_work_stop_start_up_in_one_line(env, name, tmp_path):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AUTH_", "API_KEYS", "JWT_"))}
    proc = subprocess.run(
        [str(BIN / "a2a-server"), "serve"],
        cwd=ROOT,
        env={**clean, "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/x.db", **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: invalid setting {name}:"), err


async def test_start_up_line_says_auth_is_off(server):
    assert "auth OFF" in server.log_path.read_text()


async def test_start_up_line_names_the_key_principals(auth_server):
    assert f"auth required: API keys for {len(KEYS)} principal(s)" in auth_server.log_path.read_text()
    assert json.dumps(KEYS["alice"]) not in auth_server.log_path.read_text()


WORKER_KEY = "wk-auth-" + os.urandom(8).hex()


@pytest.fixture(scope="module")
async def worker_key_server(tmp_path_factory):
    """API keys for alice and bob, a worker key, and gRPC: every binding a worker key could be tried on."""
    remember(WORKER_KEY)
    workers = json.dumps({hash_key(WORKER_KEY): "box"})
    env = api_keys_env(WORKER_KEYS=workers, GRPC_PORT=str(free_port()))
    srv = await make_server("sqlite", tmp_path_factory.mktemp("worker-key"), **env)
    yield srv
    srv.stop()


@pytest.mark.parametrize(("method", "path", "body"), [g for g in GUARDED if g[1] != "/no/such/route"])
@pytest.mark.parametrize("version", [{}, V10], ids=["v03", "v10"])
async def test_a_worker_key_is_refused_on_every_a2a_route(worker_key_server, method, path, body, version):
    """A worker's credential opens only `/workers/`: on every A2A binding and alias, either version, it is
    a 403 (not the anonymous 401: the key is known, and not the principal `box`'s access either)."""
    async with httpx.AsyncClient(base_url=worker_key_server.base_url, timeout=30) as c:
        resp = await c.request(method, path, json=body, headers={"X-API-Key": WORKER_KEY, **version})
        alice = await c.request(method, path, json=body, headers={**key_of("alice"), **version})
    assert resp.status_code == 403, (path, resp.status_code, resp.text)
    assert alice.status_code != 403, "the same route lets a principal's key in"


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_a_worker_key_is_refused_on_grpc_in_both_versions(worker_key_server, version):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{worker_key_server.env['GRPC_PORT']}") as ch:
        if version == "1.0":
            call = a2a_pb2_grpc.A2AServiceStub(ch).GetTask(
                a2a_pb2.GetTaskRequest(id="x"), metadata=(("x-api-key", WORKER_KEY),), timeout=30
            )
        else:
            call = a2a_v0_3_pb2_grpc.A2AServiceStub(ch).GetTask(
                a2a_v0_3_pb2.GetTaskRequest(name="tasks/x"), metadata=(("x-api-key", WORKER_KEY),), timeout=30
            )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED

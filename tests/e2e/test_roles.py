"""Teams of agents on one server: two roles (`AGENTS`), each with its own card and every binding under
`/agents/{role}/` (the first role also at the root), driven by the official Python SDK from each role's
card, over raw JSON-RPC, REST and gRPC. A task belongs to its role: its id on another role's endpoints is
"task not found"; owners stay apart within a role; limits count per role; a bad entry stops start-up with
one line naming the role and the field."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import new_text_message
from a2a.types import GetTaskRequest, Role, SendMessageRequest, Task, a2a_pb2, a2a_pb2_grpc

from tests.conftest import BACKENDS, make_server
from tests.interop.test_interop_js import (
    Variant,
    node as node,  # the fixture, for the JS test here
    run_interop,
)
from tests.interop.test_interop_sdk import only_v03
from tests.support.auth import api_keys_env, key_of
from tests.support.server import BIN, ROOT, ServerProcess, free_port

AGENTS = {
    "reviewer": {"adapter": "scripted", "card": {"name": "Reviewer"}},
    "triager": {
        "adapter": "echo",
        "slots": 2,
        "card": {
            "name": "Triager",
            "description": "Sorts issues.",
            "skills": [{"id": "triage", "name": "Triage", "description": "Labels an issue", "tags": ["t"]}],
        },
    },
}
TRIAGER = "/agents/triager"


def rpc_body(method: str, params: dict[str, Any], rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def message(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "messageId": f"m-{text}-{free_port()}",
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        **extra,
    }


@pytest.fixture(scope="module", params=BACKENDS)
async def team(request: pytest.FixtureRequest, tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    srv = await make_server(
        request.param,
        tmp_path_factory.mktemp(f"team-{request.param}"),
        **api_keys_env(AGENTS=json.dumps(AGENTS), GRPC_PORT=str(free_port())),
    )
    yield srv
    srv.stop()


async def send(c: httpx.AsyncClient, path: str, text: str, who: str = "alice") -> dict[str, Any]:
    resp = await c.post(
        f"{path}/a2a/jsonrpc", json=rpc_body("message/send", {"message": message(text)}), headers=key_of(who)
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["result"]


async def test_each_role_has_its_card_with_its_own_urls(team: ServerProcess):
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        root = (await c.get("/.well-known/agent-card.json")).json()
        triager = (await c.get(f"{TRIAGER}/.well-known/agent-card.json")).json()
        alias = (await c.get(f"{TRIAGER}/.well-known/agent.json")).json()
        v10 = (await c.get(f"{TRIAGER}/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})).json()
        missing = await c.get("/agents/nobody/.well-known/agent-card.json")
    assert root["name"] == "Reviewer"
    assert root["url"].endswith("/a2a/jsonrpc") and "/agents/" not in root["url"]
    assert triager == alias
    assert triager["name"] == "Triager" and triager["description"] == "Sorts issues."
    assert [s["id"] for s in triager["skills"]] == ["triage"]
    assert triager["url"].endswith(f"{TRIAGER}/a2a/jsonrpc")
    http = [i["url"] for i in v10["supportedInterfaces"] if i["protocolBinding"] != "GRPC"]
    assert http and all(TRIAGER in u for u in http), http
    grpc_ext = [e for e in v10["capabilities"]["extensions"] if e["params"].get("role") == "triager"]
    assert grpc_ext and grpc_ext[0]["params"]["grpcMetadata"] == {"a2a-role": "triager"}
    assert missing.status_code == 404


@pytest.mark.parametrize("protocol", ["1.0", "0.3"])
async def test_the_official_sdk_reaches_each_role_from_its_card(team: ServerProcess, protocol: str):
    for base, expect in ((team.base_url, "reviewed"), (team.base_url + TRIAGER, "triaged")):
        async with httpx.AsyncClient(timeout=30, headers=key_of("alice")) as http:
            factory = ClientFactory(ClientConfig(httpx_client=http, streaming=False))
            card = await A2ACardResolver(http, base).get_agent_card()
            client = factory.create(card if protocol == "1.0" else only_v03(card))
            try:
                msg = new_text_message(expect, role=Role.ROLE_USER)
                got = [item async for item in client.send_message(SendMessageRequest(message=msg))]
                task = got[-1].task if got[-1].HasField("task") else None
                assert task is not None, got
                text = " ".join(p.text for a in task.artifacts for p in a.parts)
                # The scripted agent echoes an unknown step as thinking; the echo agent echoes the text.
                assert expect in text, (base, text)
                again = await client.get_task(GetTaskRequest(id=task.id))
                assert isinstance(again, Task) and again.id == task.id
            finally:
                await client.close()


async def test_a_task_is_not_found_on_another_roles_endpoints(team: ServerProcess):
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        task = await send(c, TRIAGER, "hello")
        tid = task["id"]
        h = key_of("alice")
        here = await c.post(f"{TRIAGER}/a2a/jsonrpc", json=rpc_body("tasks/get", {"id": tid}), headers=h)
        assert here.json()["result"]["id"] == tid
        for method, params in (
            ("tasks/get", {"id": tid}),
            ("tasks/cancel", {"id": tid}),
            ("tasks/pushNotificationConfig/list", {"id": tid}),
        ):
            there = await c.post("/a2a/jsonrpc", json=rpc_body(method, params), headers=h)
            assert there.json()["error"]["code"] == -32001, (method, there.text)
        v10 = {**h, "A2A-Version": "1.0"}
        assert (await c.get(f"/a2a/rest/tasks/{tid}", headers=v10)).status_code == 404
        assert (await c.get(f"{TRIAGER}/a2a/rest/tasks/{tid}", headers=v10)).status_code == 200
        follow = rpc_body("message/send", {"message": message("more", taskId=tid)})
        assert (await c.post("/a2a/jsonrpc", json=follow, headers=h)).json()["error"]["code"] == -32001
        listed_here = await c.post(f"{TRIAGER}/a2a/jsonrpc", json=rpc_body("ListTasks", {}), headers=v10)
        listed_root = await c.post("/a2a/jsonrpc", json=rpc_body("ListTasks", {}), headers=v10)
        assert tid in [t["id"] for t in listed_here.json()["result"]["tasks"]]
        assert tid not in [t["id"] for t in listed_root.json()["result"]["tasks"]]
        # Owners stay apart within the role too.
        bob = await c.post(
            f"{TRIAGER}/a2a/jsonrpc", json=rpc_body("tasks/get", {"id": tid}), headers=key_of("bob")
        )
        assert bob.json()["error"]["code"] == -32001
        # Without a credential a role's endpoints are refused like the root's; its card is public.
        anon = await c.post(f"{TRIAGER}/a2a/jsonrpc", json=rpc_body("tasks/get", {"id": tid}))
        assert anon.status_code == 401


async def test_grpc_selects_the_role_by_metadata(team: ServerProcess):
    port = int(team.env["GRPC_PORT"])
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        tid = (await send(c, TRIAGER, "by-grpc"))["id"]
    auth = (("x-api-key", key_of("alice")["X-API-Key"]),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = a2a_pb2_grpc.A2AServiceStub(ch)
        got = await stub.GetTask(
            a2a_pb2.GetTaskRequest(id=tid), metadata=(*auth, ("a2a-role", "triager")), timeout=30
        )
        assert got.id == tid
        with pytest.raises(grpc.aio.AioRpcError) as root:
            await stub.GetTask(a2a_pb2.GetTaskRequest(id=tid), metadata=auth, timeout=30)
        assert root.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await stub.GetTask(
                a2a_pb2.GetTaskRequest(id=tid), metadata=(*auth, ("a2a-role", "nobody")), timeout=30
            )
        assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_the_task_rate_counts_per_role(backend: str, tmp_path: Path):
    srv = await make_server(
        backend, tmp_path, AGENTS=json.dumps(AGENTS), TASK_RATE_PER_MIN="1", TASK_RATE_BURST="1"
    )
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
            ok = await c.post("/a2a/jsonrpc", json=rpc_body("message/send", {"message": message("a")}))
            assert "result" in ok.json(), ok.text
            limited = await c.post("/a2a/jsonrpc", json=rpc_body("message/send", {"message": message("b")}))
            assert limited.status_code == 429, limited.text
            other = await c.post(
                f"{TRIAGER}/a2a/jsonrpc", json=rpc_body("message/send", {"message": message("c")})
            )
            assert "result" in other.json(), other.text
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("agents", "roles", "says"),
    [
        ({"ok": {"adapter": "echo", "slots": 0}}, "", "role 'ok', field slots:"),
        ({"ok": {"adapter": "echo", "colour": "red"}}, "", "role 'ok', field colour:"),
        ({"ok": {"adapter": "no-such-adapter"}}, "", "role 'ok', field adapter:"),
        ({"Bad Name": {"adapter": "echo"}}, "", "role name 'Bad Name'"),
        ({"ok": {"adapter": "echo"}}, "ok,ghost", "AGENT_ROLES names ghost"),
    ],
)
def test_a_bad_entry_stops_start_up_with_one_line_naming_role_and_field(
    tmp_path: Path, agents: dict[str, Any], roles: str, says: str
):
    env = {
        "PATH": "/usr/bin:/bin",
        "DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'a.db'}",
        "AGENTS": json.dumps(agents),
        "AGENT_ROLES": roles,
        "AUTH_MODE": "off",
        "PORT": str(free_port()),
        "GRPC_PORT": "0",
    }
    done = subprocess.run(
        [str(BIN / "a2a-server"), "serve"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: invalid setting AGENT"), done.stderr
    assert says in lines[0], lines[0]


JS_STEPS = ("send", "stream", "get", "cancel", "not_found", "multi_turn")


@pytest.mark.parametrize(
    "variant",
    [
        Variant(("--transport", "JSONRPC", "--protocol", "1.0"), "JSONRPC", "1.0"),
        Variant(("--transport", "HTTP+JSON", "--protocol", "1.0"), "HTTP+JSON", "1.0"),
        Variant(("--transport", "JSONRPC", "--protocol", "0.3"), "JSONRPC", "0.3"),
    ],
    ids=["v10-jsonrpc", "v10-rest", "v03-jsonrpc"],
)
async def test_the_official_js_sdk_reaches_a_role_from_its_card(tmp_path: Path, node: str, variant: Variant):
    """@a2a-js/sdk's client, built from the role's card URL, stays on the role's endpoints for every step."""
    srv = await make_server(
        "sqlite",
        tmp_path,
        AGENTS=json.dumps({"default": {"adapter": "echo"}, "coder": {"adapter": "scripted"}}),
    )
    try:
        variant = Variant((*variant.args, "--steps", ",".join(JS_STEPS)), variant.transport, variant.version)
        # A base URL with its trailing slash, as URL resolution (and so the JS SDK's card resolver) needs it.
        run = await run_interop(node, srv.base_url + "/agents/coder/", variant)
        for name in JS_STEPS:
            step = run.step(name)
            paths = [call["path"] for call in step["wire"]]
            assert paths and all(p.startswith("/agents/coder/") for p in paths), (name, paths)
        assert run.client["transport"] == variant.transport
    finally:
        srv.stop()

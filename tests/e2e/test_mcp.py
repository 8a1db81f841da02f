"""`/mcp` driven by the official `mcp` client against a real server with two roles, API keys and JWTs: the
tools and the resource template, a task that asks and is answered, a cancel, progress while a task is waited
on, another principal's tasks invisible, bad arguments as tool errors, and no credential a 401. A task
started over MCP is an ordinary task: JSON-RPC `tasks/get` on its role's endpoints returns it."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse
from mcp.shared.exceptions import MCPError
from mcp_types import TextResourceContents

from tests.conftest import make_server
from tests.support.auth import JwksServer, SigningKey, api_keys_env, bearer, key_of
from tests.support.mcp import MODES, answer, mcp_client, refusal
from tests.support.server import ServerProcess, until_available

AGENTS = {
    "lead": {"adapter": "scripted", "card": {"name": "Lead", "description": "Leads the work."}},
    "reviewer": {
        "adapter": "scripted",
        "card": {
            "name": "Reviewer",
            "skills": [{"id": "review", "name": "Review", "description": "Reviews a diff", "tags": ["r"]}],
        },
    },
}
ORIGIN = "https://host.example"
"""A browser-based MCP host's origin (CORS_ORIGINS)."""
ENDPOINT = {"lead": "", "reviewer": "/agents/reviewer"}
"""Each role's A2A endpoints: the first role's at the root."""


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey("mcp")


@pytest.fixture(scope="module")
async def team(tmp_path_factory: Any, key: SigningKey) -> AsyncIterator[ServerProcess]:
    jwks = JwksServer([key])
    try:
        srv = await make_server(
            "sqlite",
            tmp_path_factory.mktemp("mcp"),
            **{**api_keys_env(AGENTS=json.dumps(AGENTS)), **jwks.env(), "AUTH_MODE": "required"},
            CORS_ORIGINS=ORIGIN,
        )
        try:
            await until_available([srv], AGENTS, key_of("alice"))
            yield srv
        finally:
            srv.stop()
    finally:
        jwks.close()


def mcp(server: ServerProcess, headers: dict[str, str], mode: str = "legacy") -> Any:
    return mcp_client(server.base_url, headers, mode)


async def rpc_task(server: ServerProcess, role: str, task_id: str, who: str = "alice") -> dict[str, Any]:
    """The task as JSON-RPC `tasks/get` on its role's endpoint returns it to `who`."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as c:
        resp = await c.post(f"{ENDPOINT[role]}/a2a/jsonrpc", json=body, headers=key_of(who))
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.parametrize("mode", MODES)
async def test_tools_and_the_task_template_are_listed(team: ServerProcess, mode: str):
    async with mcp(team, key_of("alice"), mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        templates = (await client.list_resource_templates()).resource_templates
        agents = answer(await client.call_tool("list_agents", {}))["agents"]
    assert set(tools) == {"list_agents", "run_task", "get_task", "answer_task", "cancel_task", "list_tasks"}
    assert set(tools["run_task"].input_schema["required"]) == {"role", "message"}
    assert {"files", "context_id", "repository", "wait"} <= set(tools["run_task"].input_schema["properties"])
    assert [t.uri_template for t in templates] == ["task://{task_id}"]
    by_role = {a["role"]: a for a in agents}
    assert set(by_role) == {"lead", "reviewer"}
    assert by_role["lead"]["name"] == "Lead" and by_role["lead"]["description"] == "Leads the work."
    assert [s["id"] for s in by_role["reviewer"]["skills"]] == ["review"]
    assert all(a["available"] for a in agents)


@pytest.mark.parametrize("mode", MODES)
async def test_a_task_run_over_mcp_is_an_ordinary_task(team: ServerProcess, mode: str):
    async with mcp(team, key_of("alice"), mode) as client:
        done = answer(await client.call_tool("run_task", {"role": "reviewer", "message": "say:looks good"}))
        again = answer(await client.call_tool("get_task", {"task_id": done["taskId"]}))
        read = await client.read_resource(f"task://{done['taskId']}")
        listed = answer(await client.call_tool("list_tasks", {"role": "reviewer", "state": "completed"}))
    assert done["role"] == "reviewer" and done["state"] == "completed"
    assert done["text"] == "looks good"
    assert again == done
    content = read.contents[0]
    assert isinstance(content, TextResourceContents) and content.mime_type == "application/json"
    assert json.loads(content.text)["id"] == done["taskId"]
    assert done["taskId"] in [t["taskId"] for t in listed["tasks"]]
    got = await rpc_task(team, "reviewer", done["taskId"])
    assert got["result"]["id"] == done["taskId"]
    assert got["result"]["contextId"] == done["contextId"]
    assert got["result"]["status"]["state"] == "completed"


@pytest.mark.parametrize("mode", MODES)
async def test_a_task_that_asks_is_answered(team: ServerProcess, mode: str):
    async with mcp(team, key_of("alice"), mode) as client:
        asked = answer(await client.call_tool("run_task", {"role": "lead", "message": "ask:Merge it?"}))
        assert asked["state"] == "input-required", asked
        assert "Merge it?" in asked["text"]
        waiting = await rpc_task(team, "lead", asked["taskId"])
        assert waiting["result"]["status"]["state"] == "input-required"
        done = answer(await client.call_tool("answer_task", {"task_id": asked["taskId"], "message": "y"}))
    assert done["taskId"] == asked["taskId"] and done["state"] == "completed"
    assert "answer:y" in done["text"]
    assert (await rpc_task(team, "lead", asked["taskId"]))["result"]["status"]["state"] == "completed"


async def test_the_a2a_stream_follows_a_task_started_over_mcp(team: ServerProcess):
    async with mcp(team, key_of("alice")) as client:
        asked = answer(await client.call_tool("run_task", {"role": "reviewer", "message": "ask:Approve?"}))
        assert asked["state"] == "input-required", asked
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/resubscribe", "params": {"id": asked["taskId"]}}
        states: list[str] = []
        async with (
            httpx.AsyncClient(base_url=team.base_url, timeout=30) as http,
            aconnect_sse(
                http, "POST", "/agents/reviewer/a2a/jsonrpc", json=body, headers=key_of("alice")
            ) as src,
        ):
            events = src.aiter_sse()
            first = json.loads((await anext(events)).data)["result"]
            assert first["id"] == asked["taskId"] and first["status"]["state"] == "input-required"
            # Subscribed: the answer over MCP moves the task the stream follows.
            answering = asyncio.ensure_future(
                client.call_tool("answer_task", {"task_id": asked["taskId"], "message": "y", "wait": False})
            )
            async for sse in events:
                event = json.loads(sse.data)["result"]
                if event.get("kind") == "status-update":
                    states.append(event["status"]["state"])
                    if event.get("final"):
                        break
            answer(await answering)
    assert states[0] == "working" and states[-1] == "completed", states


@pytest.mark.parametrize("mode", MODES)
async def test_waiting_sends_progress(team: ServerProcess, mode: str):
    notes: list[tuple[float, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        notes.append((value, message))

    async with mcp(team, key_of("alice"), mode) as client:
        # The agent works a while after the task is stored, so its events come after the task's first read.
        result = await client.call_tool(
            "run_task", {"role": "lead", "message": "sleep:2;say:one;say:two"}, progress_callback=progress
        )
    done = answer(result)
    assert done["state"] == "completed" and done["text"] == "onetwo"
    assert notes, "no progress notification while the task was waited on"
    assert [v for v, _ in notes] == sorted(v for v, _ in notes)
    assert any(m and m.startswith("completed") for _, m in notes), notes
    # Every chunk of the answer is named as its artifact, though only the first carries the name.
    assert {m for _, m in notes if m and m.startswith("artifact")} == {"artifact assistant-response"}, notes


async def test_a_task_is_canceled(team: ServerProcess):
    async with mcp(team, key_of("alice")) as client:
        started = answer(
            await client.call_tool("run_task", {"role": "reviewer", "message": "sleep:60", "wait": False})
        )
        assert started["state"] in ("submitted", "working"), started
        canceled = answer(await client.call_tool("cancel_task", {"task_id": started["taskId"]}))
        again = refusal(await client.call_tool("cancel_task", {"task_id": started["taskId"]}))
        late = refusal(await client.call_tool("answer_task", {"task_id": started["taskId"], "message": "y"}))
    assert canceled["state"] == "canceled"
    assert again == f"Task {started['taskId']} is already canceled and cannot be canceled"
    assert late == f"Task {started['taskId']} is canceled; a finished task takes no more messages"
    assert (await rpc_task(team, "reviewer", started["taskId"]))["result"]["status"]["state"] == "canceled"


async def test_another_principals_task_is_not_found(team: ServerProcess, key: SigningKey):
    async with mcp(team, key_of("alice")) as alice:
        mine = answer(await alice.call_tool("run_task", {"role": "lead", "message": "ask:Deploy?"}))
    assert mine["state"] == "input-required"
    tid = mine["taskId"]
    for headers in (key_of("bob"), bearer(key.sign("dave"))):
        async with mcp(team, headers) as other:
            refused = [
                refusal(await other.call_tool("get_task", {"task_id": tid})),
                refusal(await other.call_tool("answer_task", {"task_id": tid, "message": "y"})),
                refusal(await other.call_tool("cancel_task", {"task_id": tid})),
                refusal(await other.call_tool("get_task", {"task_id": "no-such-task"})),
            ]
            listed = answer(await other.call_tool("list_tasks", {}))
            with pytest.raises(MCPError) as read:
                await other.read_resource(f"task://{tid}")
        assert refused == [f"Task {tid} not found"] * 3 + ["Task no-such-task not found"]
        assert tid not in [t["taskId"] for t in listed["tasks"]]
        assert "not found" in read.value.error.message
    # Untouched: still asking, and still its owner's to answer.
    assert (await rpc_task(team, "lead", tid))["result"]["status"]["state"] == "input-required"
    async with mcp(team, key_of("alice")) as alice:
        done = answer(await alice.call_tool("answer_task", {"task_id": tid, "message": "n"}))
    assert done["state"] == "completed" and "answer:n" in done["text"]


async def test_a_jwt_principal_sees_its_own_tasks(team: ServerProcess, key: SigningKey):
    async with mcp(team, bearer(key.sign("erin"))) as client:
        done = answer(await client.call_tool("run_task", {"role": "lead", "message": "say:hi"}))
        listed = answer(await client.call_tool("list_tasks", {}))
    assert done["state"] == "completed"
    assert [t["taskId"] for t in listed["tasks"]] == [done["taskId"]]


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("run_task", {"message": "hi"}, "role: Field required"),
        (
            "run_task",
            {"role": "nobody", "message": "hi"},
            "No role named 'nobody'; the roles are: lead, reviewer",
        ),
        ("run_task", {"role": "lead", "message": ""}, "message: String should have at least 1 character"),
        (
            "run_task",
            {"role": "lead", "message": "hi", "wait": "soon"},
            "wait: Input should be a valid boolean",
        ),
        (
            "run_task",
            {"role": "lead", "message": "hi", "files": [{"name": "a.txt", "content_base64": "%%%"}]},
            "files.0.content_base64: Value error, must be base64-encoded",
        ),
        (
            "run_task",
            {"role": "lead", "message": "hi", "files": [{"name": "a.txt"}]},
            "a file needs exactly one of content_base64 or url",
        ),
        (
            "run_task",
            {"role": "lead", "message": "hi", "repository": "https://example.com/x.git"},
            "repository",
        ),
        (
            "run_task",
            {"role": "lead", "message": "hi", "colour": "red"},
            "colour: Extra inputs are not permitted",
        ),
        ("answer_task", {"task_id": "no-such-task", "message": "y"}, "Task no-such-task not found"),
        ("list_tasks", {"state": "sleeping"}, "state: Input should be"),
        ("list_tasks", {"limit": 0}, "limit: Input should be greater than or equal to 1"),
        ("no_such_tool", {}, "No tool named 'no_such_tool'"),
    ],
)
async def test_bad_arguments_are_tool_errors(team: ServerProcess, tool: str, arguments: dict, says: str):
    async with mcp(team, key_of("alice")) as client:
        text = refusal(await client.call_tool(tool, arguments))
    assert says in text
    assert "Traceback" not in text


async def test_a_file_reaches_the_agent(team: ServerProcess):
    content = base64.b64encode(b"diff --git a/x b/x\n").decode()
    files = [{"name": "change.diff", "media_type": "text/plain", "content_base64": content}]
    async with mcp(team, key_of("alice")) as client:
        done = answer(
            await client.call_tool("run_task", {"role": "lead", "message": "say:ok", "files": files})
        )
    assert done["state"] == "completed"
    history = (await rpc_task(team, "lead", done["taskId"]))["result"]["history"]
    parts = history[0]["parts"]
    assert any(p.get("kind") == "file" and p["file"]["name"] == "change.diff" for p in parts), parts


@pytest.mark.parametrize("headers", [{}, {"X-API-Key": "wrong"}, bearer("wrong")])
async def test_no_credential_is_a_401(team: ServerProcess, headers: dict[str, str]):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        resp = await c.post(
            "/mcp", json=body, headers={**headers, "Accept": "application/json, text/event-stream"}
        )
    assert resp.status_code == 401, resp.text
    assert resp.headers["www-authenticate"].startswith("Bearer")
    assert "Traceback" not in resp.text


@pytest.mark.parametrize("uri", ["note://x", "task://"])
async def test_a_resource_this_server_lacks_is_an_error(team: ServerProcess, uri: str):
    async with mcp(team, key_of("alice")) as client:
        with pytest.raises(MCPError) as read:
            await client.read_resource(uri)
    assert read.value.error.message == f"No resource {uri!r}: this server has task://{{task_id}} only"


async def test_a_browser_host_may_call_from_an_allowed_origin(team: ServerProcess):
    asked = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-api-key,mcp-protocol-version",
    }
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        resp = await c.options("/mcp", headers=asked)
    assert resp.status_code == 200, resp.text
    assert resp.headers["access-control-allow-origin"] == ORIGIN
    allowed = {h.strip().lower() for h in resp.headers["access-control-allow-headers"].split(",")}
    assert {"content-type", "x-api-key", "mcp-protocol-version"} <= allowed

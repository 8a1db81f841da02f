"""Teams of agents on one server: three roles (`AGENTS`), each with its own card and every binding under
`/agents/{role}/` (the first role, the default, there too, and also at the root), driven by the official
Python and JS SDKs from each role's card, over raw JSON-RPC, REST, SSE and gRPC. A task belongs to its role:
its id on another role's endpoints is "task not found", while the root finds it on whichever role it is;
a send at the root naming a skill (`metadata.skill`) runs on the role declaring it; owners stay apart within
a role; limits count per role; a bad entry stops start-up with one line naming the role and the field."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.compat.v0_3 import a2a_v0_3_pb2, a2a_v0_3_pb2_grpc
from a2a.helpers import new_text_message
from a2a.types import GetTaskRequest, Role, SendMessageRequest, Task, a2a_pb2, a2a_pb2_grpc
from google.protobuf import json_format

from tests.conftest import BACKENDS, make_server
from tests.interop.test_interop_js import (
    Variant,
    node as node,  # the fixture, for the JS test here
    run_interop,
)
from tests.interop.test_interop_sdk import only_v03
from tests.support.auth import api_keys_env, key_of
from tests.support.server import BIN, ROOT, ServerProcess, free_port


def skill(sid: str) -> dict[str, Any]:
    return {"id": sid, "name": sid.title(), "description": f"Does {sid}", "tags": ["t"]}


AGENTS = {
    "reviewer": {
        "adapter": "scripted",
        "card": {"name": "Reviewer", "skills": [skill("review"), skill("both")]},
    },
    "triager": {
        "adapter": "echo",
        "slots": 2,
        "card": {
            "name": "Triager",
            "description": "Sorts issues.",
            "skills": [skill("triage"), skill("both")],
        },
    },
    "builder": {"adapter": "scripted", "card": {"name": "Builder", "skills": [skill("build")]}},
}
ROLES = list(AGENTS)
"""The default role (the first) included: every role answers under /agents/{role}/."""
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
        cards = {}
        for role in ROLES:
            card = (await c.get(f"/agents/{role}/.well-known/agent-card.json")).json()
            alias = (await c.get(f"/agents/{role}/.well-known/agent.json")).json()
            v10 = await c.get(f"/agents/{role}/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
            assert card == alias, role
            cards[role] = (card, v10.json())
        missing = await c.get("/agents/nobody/.well-known/agent-card.json")
    # The root card is the default role's, with the root URLs (an alias needs no role metadata on gRPC).
    assert root["name"] == "Reviewer" == cards["reviewer"][0]["name"]
    assert root["url"].endswith("/a2a/jsonrpc") and "/agents/" not in root["url"]
    assert not [e for e in root["capabilities"].get("extensions", []) if "role" in (e.get("params") or {})]
    for role, (card, v10) in cards.items():
        assert card["url"] == f"{team.base_url}/agents/{role}/a2a/jsonrpc", (role, card["url"])
        http = [i["url"] for i in v10["supportedInterfaces"] if i["protocolBinding"] != "GRPC"]
        assert http and all(u.startswith(f"{team.base_url}/agents/{role}/") for u in http), http
        grpc_ext = [e for e in v10["capabilities"]["extensions"] if e["params"].get("role") == role]
        assert grpc_ext and grpc_ext[0]["params"]["grpcMetadata"] == {"a2a-role": role}
        assert [s["id"] for s in card["skills"]] == [s["id"] for s in AGENTS[role]["card"]["skills"]]
    triager = cards["triager"][0]
    assert triager["name"] == "Triager" and triager["description"] == "Sorts issues."
    assert missing.status_code == 404


async def test_get_agents_lists_each_roles_skills_and_stable_card(team: ServerProcess):
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30, headers=key_of("alice")) as c:
        body = (await c.get("/agents")).json()
    roles = {r["role"]: r for r in body["roles"]}
    assert list(roles) == ROLES
    for role in ROLES:
        assert urlsplit(roles[role]["card_url"]).path == f"/agents/{role}/.well-known/agent-card.json"
        assert [s["id"] for s in roles[role]["skills"]] == [s["id"] for s in AGENTS[role]["card"]["skills"]]
        assert roles[role]["default"] is (role == "reviewer")
    assert roles["triager"]["skills"][0] == {
        "id": "triage",
        "name": "Triage",
        "description": "Does triage",
        "tags": ["t"],
    }


async def sse_results(
    c: httpx.AsyncClient, path: str, body: dict[str, Any], **h: str
) -> list[dict[str, Any]]:
    """The JSON-RPC results of an SSE answer, until the server ends the stream."""
    out = []
    async with c.stream("POST", path, json=body, headers={**key_of("alice"), **h}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        async for line in resp.aiter_lines():
            if line.startswith("data:"):
                item = json.loads(line[5:])
                assert "result" in item, item
                out.append(item["result"])
    return out


def pb_send(text: str, **metadata: Any) -> a2a_pb2.SendMessageRequest:
    body = {
        "message": {"messageId": f"g-{text}-{free_port()}", "role": "ROLE_USER", "parts": [{"text": text}]},
        **({"metadata": metadata} if metadata else {}),
    }
    return json_format.ParseDict(body, a2a_pb2.SendMessageRequest())


@pytest.mark.parametrize("role", ROLES)
async def test_every_binding_answers_for_every_role_under_its_path(team: ServerProcess, role: str):
    """JSON-RPC (v0.3, v1.0), SSE, REST (v0.3, v1.0), the /a2a/tasks alias and gRPC of both protos
    (a2a-role: the role, the default one included) each reach the role's agent at /agents/{role}/: the task
    it makes is the role's, not found on another role's endpoints."""
    base = f"/agents/{role}"
    other = next(r for r in ROLES if r != role)
    h, v10 = key_of("alice"), {**key_of("alice"), "A2A-Version": "1.0"}
    made: list[str] = []
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        made.append((await send(c, base, f"rpc03-{role}"))["id"])
        got = await c.post(f"{base}/a2a/jsonrpc", json=rpc_body("tasks/get", {"id": made[-1]}), headers=h)
        assert got.json()["result"]["status"]["state"] == "completed", got.text
        v10_msg = {
            "messageId": f"m10-{role}-{free_port()}",
            "role": "ROLE_USER",
            "parts": [{"text": "rpc10"}],
        }
        sent = await c.post(
            f"{base}/a2a/jsonrpc", json=rpc_body("SendMessage", {"message": v10_msg}), headers=v10
        )
        made.append(sent.json()["result"]["task"]["id"])
        got = await c.post(f"{base}/a2a/jsonrpc", json=rpc_body("GetTask", {"id": made[-1]}), headers=v10)
        assert got.json()["result"]["id"] == made[-1], got.text
        streamed = await sse_results(
            c, f"{base}/a2a/jsonrpc", rpc_body("message/stream", {"message": message("sse")})
        )
        assert streamed[0]["kind"] == "task" and streamed[-1]["status"]["state"] == "completed", streamed
        made.append(streamed[0]["id"])
        rest03 = await c.post(
            f"{base}/a2a/rest/v1/message:send",
            json={
                "message": {
                    "messageId": f"r03-{free_port()}",
                    "role": "ROLE_USER",
                    "content": [{"text": "r03"}],
                }
            },
            headers=h,
        )
        assert rest03.status_code == 200, rest03.text
        made.append(rest03.json()["task"]["id"])
        assert (await c.get(f"{base}/a2a/rest/v1/tasks/{made[-1]}", headers=h)).status_code == 200
        rest10 = await c.post(
            f"{base}/a2a/rest/message:send",
            json={"message": {**v10_msg, "messageId": f"r10-{free_port()}"}},
            headers=v10,
        )
        assert rest10.status_code == 200, rest10.text
        made.append(rest10.json()["task"]["id"])
        assert (await c.get(f"{base}/a2a/rest/tasks/{made[-1]}", headers=v10)).status_code == 200
        alias = await c.get(f"{base}/a2a/tasks/{made[-1]}", headers=h)
        assert alias.status_code == 200 and alias.json()["id"] == made[-1], alias.text
        auth = (("x-api-key", h["X-API-Key"]), ("a2a-role", role))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{team.env['GRPC_PORT']}") as ch:
            stub = a2a_pb2_grpc.A2AServiceStub(ch)
            by_grpc = await stub.SendMessage(pb_send(f"grpc-{role}"), metadata=auth, timeout=30)
            made.append(by_grpc.task.id)
            again = await stub.GetTask(a2a_pb2.GetTaskRequest(id=by_grpc.task.id), metadata=auth, timeout=30)
            assert again.id == by_grpc.task.id
            old = a2a_v0_3_pb2_grpc.A2AServiceStub(ch)
            v03_send = json_format.ParseDict(
                {
                    "request": {
                        "messageId": f"g03-{free_port()}",
                        "role": "ROLE_USER",
                        "content": [{"text": "g03"}],
                    }
                },
                a2a_v0_3_pb2.SendMessageRequest(),
            )
            by_v03 = await old.SendMessage(v03_send, metadata=auth, timeout=30)
            made.append(by_v03.task.id)
            got03 = await old.GetTask(
                a2a_v0_3_pb2.GetTaskRequest(name=f"tasks/{by_v03.task.id}"), metadata=auth
            )
            assert got03.id == by_v03.task.id
        for tid in made:
            here = await c.post(f"{base}/a2a/jsonrpc", json=rpc_body("tasks/get", {"id": tid}), headers=h)
            assert here.json()["result"]["id"] == tid, here.text
            there = await c.post(
                f"/agents/{other}/a2a/jsonrpc", json=rpc_body("tasks/get", {"id": tid}), headers=h
            )
            assert there.json()["error"]["code"] == -32001, (tid, there.text)
    assert len(set(made)) == 7


@pytest.mark.parametrize("protocol", ["1.0", "0.3"])
async def test_the_official_sdk_reaches_each_role_from_its_card(team: ServerProcess, protocol: str):
    for role in ROLES:
        base = f"{team.base_url}/agents/{role}"
        # The scripted agent echoes an unknown step as thinking; the echo agent echoes the text.
        expect = f"sdk-{role}"
        async with httpx.AsyncClient(timeout=30, headers=key_of("alice")) as http:
            factory = ClientFactory(ClientConfig(httpx_client=http, streaming=False))
            card = await A2ACardResolver(http, base).get_agent_card()
            assert all(
                i.url.startswith(f"{base}/")
                for i in card.supported_interfaces
                if i.protocol_binding != "GRPC"
            )
            client = factory.create(card if protocol == "1.0" else only_v03(card))
            try:
                msg = new_text_message(expect, role=Role.ROLE_USER)
                got = [item async for item in client.send_message(SendMessageRequest(message=msg))]
                task = got[-1].task if got[-1].HasField("task") else None
                assert task is not None, got
                text = " ".join(p.text for a in task.artifacts for p in a.parts)
                assert expect in text, (base, text)
                again = await client.get_task(GetTaskRequest(id=task.id))
                assert isinstance(again, Task) and again.id == task.id
            finally:
                await client.close()
        async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
            there = await c.post(
                f"/agents/{role}/a2a/jsonrpc",
                json=rpc_body("tasks/get", {"id": task.id}),
                headers=key_of("alice"),
            )
            assert there.json()["result"]["id"] == task.id


async def test_a_task_is_found_on_its_role_and_the_root_only(team: ServerProcess):
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        task = await send(c, TRIAGER, "hello")
        tid = task["id"]
        h = key_of("alice")
        here = await c.post(f"{TRIAGER}/a2a/jsonrpc", json=rpc_body("tasks/get", {"id": tid}), headers=h)
        assert here.json()["result"]["id"] == tid
        # The root endpoints find the caller's task on whichever role it is.
        root = await c.post("/a2a/jsonrpc", json=rpc_body("tasks/get", {"id": tid}), headers=h)
        assert root.json()["result"]["id"] == tid, root.text
        for method, params in (
            ("tasks/get", {"id": tid}),
            ("tasks/cancel", {"id": tid}),
            ("tasks/pushNotificationConfig/list", {"id": tid}),
        ):
            there = await c.post("/agents/reviewer/a2a/jsonrpc", json=rpc_body(method, params), headers=h)
            assert there.json()["error"]["code"] == -32001, (method, there.text)
        v10 = {**h, "A2A-Version": "1.0"}
        assert (await c.get(f"/agents/builder/a2a/rest/tasks/{tid}", headers=v10)).status_code == 404
        assert (await c.get(f"/a2a/rest/tasks/{tid}", headers=v10)).status_code == 200
        assert (await c.get(f"{TRIAGER}/a2a/rest/tasks/{tid}", headers=v10)).status_code == 200
        follow = rpc_body("message/send", {"message": message("more", taskId=tid)})
        there = await c.post("/agents/reviewer/a2a/jsonrpc", json=follow, headers=h)
        assert there.json()["error"]["code"] == -32001
        listed_here = await c.post(f"{TRIAGER}/a2a/jsonrpc", json=rpc_body("ListTasks", {}), headers=v10)
        listed_root = await c.post("/a2a/jsonrpc", json=rpc_body("ListTasks", {}), headers=v10)
        assert tid in [t["id"] for t in listed_here.json()["result"]["tasks"]]
        # Listing at the root is the default role's.
        assert tid not in [t["id"] for t in listed_root.json()["result"]["tasks"]]
        # Owners stay apart within the role and at the root too.
        for path in (TRIAGER, ""):
            bob = await c.post(
                f"{path}/a2a/jsonrpc", json=rpc_body("tasks/get", {"id": tid}), headers=key_of("bob")
            )
            assert bob.json()["error"]["code"] == -32001
        # Without a credential a role's endpoints are refused like the root's; its card is public.
        anon = await c.post(f"{TRIAGER}/a2a/jsonrpc", json=rpc_body("tasks/get", {"id": tid}))
        assert anon.status_code == 401


async def test_grpc_selects_the_role_by_metadata(team: ServerProcess):
    port = int(team.env["GRPC_PORT"])
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        tid = (await send(c, TRIAGER, "by-grpc"))["id"]
        reviewed = (await send(c, "/agents/reviewer", "by-grpc-default"))["id"]
    auth = (("x-api-key", key_of("alice")["X-API-Key"]),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = a2a_pb2_grpc.A2AServiceStub(ch)
        got = await stub.GetTask(
            a2a_pb2.GetTaskRequest(id=tid), metadata=(*auth, ("a2a-role", "triager")), timeout=30
        )
        assert got.id == tid
        # The default role by its name, and the root (no metadata), which finds a task on any role.
        mine = await stub.GetTask(
            a2a_pb2.GetTaskRequest(id=reviewed), metadata=(*auth, ("a2a-role", "reviewer")), timeout=30
        )
        assert mine.id == reviewed
        assert (await stub.GetTask(a2a_pb2.GetTaskRequest(id=tid), metadata=auth, timeout=30)).id == tid
        with pytest.raises(grpc.aio.AioRpcError) as elsewhere:
            await stub.GetTask(
                a2a_pb2.GetTaskRequest(id=tid), metadata=(*auth, ("a2a-role", "reviewer")), timeout=30
            )
        assert elsewhere.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await stub.GetTask(
                a2a_pb2.GetTaskRequest(id=tid), metadata=(*auth, ("a2a-role", "nobody")), timeout=30
            )
        assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def rpc(
    c: httpx.AsyncClient, method: str, params: dict[str, Any], path: str = "", **h: str
) -> dict[str, Any]:
    resp = await c.post(
        f"{path}/a2a/jsonrpc", json=rpc_body(method, params), headers={**key_of("alice"), **h}
    )
    return resp.json()


async def test_a_skill_at_the_root_runs_on_the_role_declaring_it(team: ServerProcess):
    v10 = {"A2A-Version": "1.0"}
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        # The message's metadata (v0.3 JSON-RPC), the request's (v1.0 JSON-RPC), REST v1.0.
        by_msg = (await rpc(c, "message/send", {"message": message("m", metadata={"skill": "triage"})}))[
            "result"
        ]
        msg10 = {"messageId": f"s10-{free_port()}", "role": "ROLE_USER", "parts": [{"text": "p"}]}
        by_req = await rpc(c, "SendMessage", {"message": msg10, "metadata": {"skill": "triage"}}, **v10)
        rest = await c.post(
            "/a2a/rest/message:send",
            json={"message": {**msg10, "messageId": f"r-{free_port()}"}, "metadata": {"skill": "triage"}},
            headers={**key_of("alice"), **v10},
        )
        assert rest.status_code == 200, rest.text
        # A skill two roles declare runs on the first of them: the default role first, then AGENTS' order.
        shared = (await rpc(c, "message/send", {"message": message("s", metadata={"skill": "both"})}))[
            "result"
        ]
        ids = [by_msg["id"], by_req["result"]["task"]["id"], rest.json()["task"]["id"]]
        for tid in ids:
            assert "result" in await rpc(c, "tasks/get", {"id": tid}, TRIAGER), tid
            assert (await rpc(c, "tasks/get", {"id": tid}, "/agents/reviewer"))["error"]["code"] == -32001
        # The task keeps the skill the request named (in its message's metadata).
        got = (await rpc(c, "tasks/get", {"id": ids[1], "historyLength": 5}, TRIAGER))["result"]
        assert got["history"][0]["metadata"]["skill"] == "triage", got
        assert "result" in await rpc(c, "tasks/get", {"id": shared["id"]}, "/agents/reviewer")
        # gRPC at the root (no a2a-role): the request's metadata routes too.
        auth = (("x-api-key", key_of("alice")["X-API-Key"]),)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{team.env['GRPC_PORT']}") as ch:
            stub = a2a_pb2_grpc.A2AServiceStub(ch)
            sent = await stub.SendMessage(pb_send("g", skill="triage"), metadata=auth, timeout=30)
        assert "result" in await rpc(c, "tasks/get", {"id": sent.task.id}, TRIAGER)


async def test_a_routed_task_is_followed_at_the_root(team: ServerProcess):
    """A task a skill sent to another role: get, subscribe, answer and cancel at the root all reach it."""
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        ask = message("ask:Proceed?", metadata={"skill": "build"})
        first = (await rpc(c, "message/send", {"message": ask}))["result"]
        tid = first["id"]
        assert first["status"]["state"] == "input-required", first
        assert (await rpc(c, "tasks/get", {"id": tid}, "/agents/builder"))["result"]["id"] == tid
        assert (await rpc(c, "tasks/get", {"id": tid}))["result"]["status"]["state"] == "input-required"
        v10 = await rpc(c, "GetTask", {"id": tid}, **{"A2A-Version": "1.0"})
        assert v10["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", v10
        rest = await c.get(f"/a2a/rest/tasks/{tid}", headers={**key_of("alice"), "A2A-Version": "1.0"})
        assert rest.status_code == 200, rest.text
        # The answer, at the root, continues it on its role; a resubscribe follows it to its end.
        answer = await rpc(
            c, "message/send", {"message": message("yes", taskId=tid, contextId=first["contextId"])}
        )
        assert answer["result"]["status"]["state"] == "completed", answer
        events = await sse_results(c, "/a2a/jsonrpc", rpc_body("tasks/resubscribe", {"id": tid}))
        assert events[0]["id"] == tid and events[0]["status"]["state"] == "completed", events
        # Another one canceled at the root.
        other = await rpc(c, "message/send", {"message": message("ask:Again?", metadata={"skill": "build"})})
        oid = other["result"]["id"]
        canceled = await rpc(c, "tasks/cancel", {"id": oid})
        assert canceled["result"]["status"]["state"] == "canceled", canceled
        assert (await rpc(c, "tasks/get", {"id": oid}, "/agents/builder"))["result"]["status"][
            "state"
        ] == "canceled"
        # An answer naming only its context, and a legacy tasks/send naming the task by its id, reach it.
        build = {"skill": "build"}
        third = (await rpc(c, "message/send", {"message": message("ask:Third?", metadata=build)}))["result"]
        by_context = await rpc(c, "message/send", {"message": message("ok", contextId=third["contextId"])})
        assert by_context["result"]["id"] == third["id"], by_context
        assert by_context["result"]["status"]["state"] == "completed", by_context
        fourth = (await rpc(c, "message/send", {"message": message("ask:Fourth?", metadata=build)}))["result"]
        legacy = await rpc(c, "tasks/send", {"id": fourth["id"], "message": message("ok")})
        assert legacy["result"]["id"] == fourth["id"], legacy
        assert legacy["result"]["status"]["state"] == "completed", legacy
        # Tasks of one context waiting on two roles: naming only the context is ambiguous at the root.
        fifth = (await rpc(c, "message/send", {"message": message("ask:Fifth?", metadata=build)}))["result"]
        ctx = fifth["contextId"]
        mine = await rpc(
            c, "message/send", {"message": message("ask:Mine?", contextId=ctx)}, "/agents/reviewer"
        )
        assert mine["result"]["status"]["state"] == "input-required", mine
        both = await rpc(c, "message/send", {"message": message("ok", contextId=ctx)})
        assert both["error"]["code"] == -32602 and both["error"]["data"]["roles"] == "builder,reviewer", both
        for tid in (fifth["id"], mine["result"]["id"]):
            assert (await rpc(c, "tasks/cancel", {"id": tid}))["result"]["status"]["state"] == "canceled"


async def test_an_unknown_skill_is_refused_listing_the_skills(team: ServerProcess):
    everyone = sorted({s["id"] for r in AGENTS.values() for s in r["card"]["skills"]})
    async with httpx.AsyncClient(base_url=team.base_url, timeout=30) as c:
        refused = await rpc(c, "message/send", {"message": message("x", metadata={"skill": "fly"})})
        err = refused["error"]
        assert err["code"] == -32602 and "fly" in err["message"], err
        assert all(s in err["message"] for s in everyone) and err["data"]["skills"] == ",".join(everyone)
        # A role's own endpoints take only its own skills.
        mine = await rpc(
            c, "message/send", {"message": message("x", metadata={"skill": "triage"})}, "/agents/builder"
        )
        assert mine["error"]["code"] == -32602 and "build" in mine["error"]["message"], mine
        assert mine["error"]["data"]["skills"] == "build"
        assert "result" in await rpc(
            c, "message/send", {"message": message("x", metadata={"skill": "build"})}, "/agents/builder"
        )
        # The message's and the request's differ; not a string.
        differ = {"message": message("x", metadata={"skill": "build"}), "metadata": {"skill": "triage"}}
        assert (await rpc(c, "message/send", differ))["error"]["code"] == -32602
        assert (await rpc(c, "message/send", {"message": message("x", metadata={"skill": 3})}))["error"][
            "code"
        ] == -32602
        rest = await c.post(
            "/a2a/rest/message:send",
            json={
                "message": {"messageId": f"u-{free_port()}", "role": "ROLE_USER", "parts": [{"text": "x"}]},
                "metadata": {"skill": "fly"},
            },
            headers={**key_of("alice"), "A2A-Version": "1.0"},
        )
        assert rest.status_code == 400 and "triage" in rest.text, rest.text
    auth = (("x-api-key", key_of("alice")["X-API-Key"]),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{team.env['GRPC_PORT']}") as ch:
        stub = a2a_pb2_grpc.A2AServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await stub.SendMessage(pb_send("g", skill="fly"), metadata=auth, timeout=30)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "triage" in (bad.value.details() or "")


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
JS_AGENTS = {"coder": {"adapter": "scripted"}, "builder": {"adapter": "scripted"}}
"""`coder` is the default role: its /agents/coder/ endpoints are tested like `builder`'s."""


@pytest.fixture(scope="module")
async def js_team(tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    srv = await make_server("sqlite", tmp_path_factory.mktemp("js-team"), AGENTS=json.dumps(JS_AGENTS))
    yield srv
    srv.stop()


@pytest.mark.parametrize("role", list(JS_AGENTS))
@pytest.mark.parametrize(
    "variant",
    [
        Variant(("--transport", "JSONRPC", "--protocol", "1.0"), "JSONRPC", "1.0"),
        Variant(("--transport", "HTTP+JSON", "--protocol", "1.0"), "HTTP+JSON", "1.0"),
        Variant(("--transport", "JSONRPC", "--protocol", "0.3"), "JSONRPC", "0.3"),
    ],
    ids=["v10-jsonrpc", "v10-rest", "v03-jsonrpc"],
)
async def test_the_official_js_sdk_reaches_each_role_from_its_card(
    js_team: ServerProcess, node: str, variant: Variant, role: str
):
    """@a2a-js/sdk's client, built from the role's card URL (the default role's included), stays on the
    role's endpoints for every step."""
    variant = Variant((*variant.args, "--steps", ",".join(JS_STEPS)), variant.transport, variant.version)
    # A base URL with its trailing slash, as URL resolution (and so the JS SDK's card resolver) needs it.
    run = await run_interop(node, js_team.base_url + f"/agents/{role}/", variant)
    for name in JS_STEPS:
        step = run.step(name)
        paths = [call["path"] for call in step["wire"]]
        assert paths and all(p.startswith(f"/agents/{role}/") for p in paths), (name, paths)
    assert run.client["transport"] == variant.transport

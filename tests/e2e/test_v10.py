"""v1.0 JSON-RPC beside v0.3 on the same endpoint: negotiation, ProtoJSON shapes, errors with ErrorInfo,
ListTasks, SubscribeToTask, content types, and the pre-0.3 names the seed documents used."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from httpx_sse import aconnect_sse

from tests.support.rpc import text_message

V10 = {"A2A-Version": "1.0"}


def message(text: str, **fields: Any) -> dict[str, Any]:
    m = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    m.update(fields)
    return m


async def rpc(client, method: str, params: Any = None, headers: dict | None = V10, rid: Any = 1) -> dict:
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params if params is not None else {}}
    resp = await client.post("/a2a/jsonrpc", json=body, headers=headers or {})
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["id"] == rid
    return data


async def ok(client, method: str, params: Any = None, **kw: Any) -> Any:
    data = await rpc(client, method, params, **kw)
    assert "error" not in data, data
    return data["result"]


def error_of(data: dict, code: int, reason: str) -> dict:
    err = data["error"]
    assert err["code"] == code, err
    (info,) = err["data"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["domain"] == "a2a-protocol.org"
    assert info["reason"] == reason
    return info


async def test_send_message_shapes(client):
    result = await ok(client, "SendMessage", {"message": message("say:hello")})
    task = result["task"]
    assert set(result) == {"task"}
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["status"]["timestamp"].endswith("Z")
    assert "kind" not in json.dumps(result)
    user = task["history"][0]
    assert user["role"] == "ROLE_USER" and user["parts"] == [{"text": "say:hello"}]
    art = next(a for a in task["artifacts"] if a.get("name") == "assistant-response")
    assert art["parts"] == [{"text": "hello"}]
    assert [t["state"] for t in task["metadata"]["stateTransitions"]] == [
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
        "TASK_STATE_COMPLETED",
    ]


async def test_v10_output_parses_as_the_proto(client):
    from a2a.types import SendMessageResponse, Task
    from google.protobuf.json_format import ParseDict

    result = await ok(client, "SendMessage", {"message": message("tool:Read;stats")})
    ParseDict(result, SendMessageResponse())  # strict: an unknown or misspelt field fails
    got = await ok(client, "GetTask", {"id": result["task"]["id"]})
    ParseDict(got, Task())


async def test_v03_output_validates_against_the_json_schema(client):
    import jsonschema

    from tests.support.server import ROOT

    schema = json.loads((ROOT / "tests" / "support" / "data" / "a2a-v0.3.0.schema.json").read_text())
    task_schema = {**schema, "$ref": "#/definitions/Task"}
    data = await rpc(client, "message/send", {"message": text_message("tool:Read;stats")}, headers={})
    jsonschema.validate(data["result"], task_schema)


@pytest.mark.parametrize(
    ("headers", "query"),
    [({}, ""), ({"A2A-Version": "0.3"}, ""), ({"A2A-Version": ""}, "")],
)
async def test_v10_method_without_v1_version_is_refused(client, headers, query):
    data = await rpc(client, "SendMessage", {"message": message("say:x")}, headers=headers)
    error_of(data, -32009, "VERSION_NOT_SUPPORTED")


@pytest.mark.parametrize("version", ["2.0", "0.2", "banana"])
async def test_unsupported_version_is_refused_for_any_method(client, version):
    data = await rpc(client, "tasks/get", {"id": "x"}, headers={"A2A-Version": version})
    assert data["error"]["code"] == -32009


async def test_version_as_query_parameter_and_any_1x(client):
    resp = await client.post(
        "/a2a/jsonrpc?A2A-Version=1.0",
        json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message("say:q")}},
    )
    assert resp.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    result = await ok(client, "SendMessage", {"message": message("say:q")}, headers={"A2A-Version": "1.1"})
    assert result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_unknown_fields_ignored_required_ones_checked(client):
    params = {"message": {**message("say:x"), "futureField": 1}, "alsoUnknown": {"a": 1}}
    assert (await ok(client, "SendMessage", params))["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    data = await rpc(client, "SendMessage", {"message": {"role": "ROLE_USER", "messageId": "m"}})
    error_of(data, -32602, "INVALID_PARAMS")
    assert "parts" in data["error"]["message"]
    data = await rpc(client, "SendMessage", {"message": message("x", parts=[{"text": "a", "url": "b"}])})
    assert data["error"]["code"] == -32602
    data = await rpc(client, "SendMessage", {"message": message("x", role="ROLE_ROBOT")})
    assert data["error"]["code"] == -32602


async def test_return_immediately_and_history_length(client):
    # A run far longer than the call: the answer can only have come without waiting for it.
    result = await ok(
        client, "SendMessage", {"message": message("sleep:300"), "configuration": {"returnImmediately": True}}
    )
    assert result["task"]["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    await until_state(client, result["task"]["id"], "TASK_STATE_WORKING")
    await ok(client, "CancelTask", {"id": result["task"]["id"]})
    task = (
        await ok(client, "SendMessage", {"message": message("tool:X"), "configuration": {"historyLength": 0}})
    )["task"]
    assert "history" not in task
    full = await ok(client, "GetTask", {"id": task["id"]})
    assert len(full["history"]) == 3
    one = await ok(client, "GetTask", {"id": task["id"], "historyLength": 1})
    assert one["history"] == full["history"][-1:]


async def test_errors_carry_error_info(client):
    info = error_of(await rpc(client, "GetTask", {"id": "nope"}), -32001, "TASK_NOT_FOUND")
    assert info["metadata"] == {"taskId": "nope"}
    done = (await ok(client, "SendMessage", {"message": message("say:x")}))["task"]
    error_of(await rpc(client, "CancelTask", {"id": done["id"]}), -32002, "TASK_NOT_CANCELABLE")
    error_of(await rpc(client, "Explode", {}), -32601, "METHOD_NOT_FOUND")
    for method in (
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "DeleteTaskPushNotificationConfig",
    ):
        error_of(await rpc(client, method, {"taskId": done["id"]}), -32602, "INVALID_PARAMS")
    error_of(
        await rpc(client, "ListTaskPushNotificationConfigs", {"taskId": "nope"}), -32001, "TASK_NOT_FOUND"
    )
    error_of(await rpc(client, "GetExtendedAgentCard"), -32004, "UNSUPPORTED_OPERATION")
    more = await rpc(client, "SendMessage", {"message": message("more", taskId=done["id"])})
    error_of(more, -32004, "UNSUPPORTED_OPERATION")


async def test_parse_error_with_v10_header_has_error_info(client):
    resp = await client.post(
        "/a2a/jsonrpc", content=b"{nope", headers={**V10, "content-type": "application/json"}
    )
    error_of(resp.json(), -32700, "PARSE_ERROR")


async def test_cancel_running(client):
    task = (
        await ok(
            client,
            "SendMessage",
            {"message": message("sleep:300"), "configuration": {"returnImmediately": True}},
        )
    )["task"]
    canceled = await ok(client, "CancelTask", {"id": task["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"


async def sse(
    client, method: str, params: dict, headers: dict | None = None, first: asyncio.Event | None = None
) -> list[tuple[str, dict]]:
    """The stream's (id, result) pairs once it ends; `first` is set at its first event."""
    body = {"jsonrpc": "2.0", "id": "s", "method": method, "params": params}
    out = []
    async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body, headers=headers or V10) as src:
        async for ev in src.aiter_sse():
            if ev.data:
                data = json.loads(ev.data)
                assert data["id"] == "s"
                out.append((ev.id, data["result"]))
                if first is not None:
                    first.set()
    return out


async def until_state(client, task_id: str, state: str) -> dict:
    async with asyncio.timeout(60):
        while (task := await ok(client, "GetTask", {"id": task_id}))["status"]["state"] != state:
            await asyncio.sleep(0.05)
    return task


async def test_streaming_message_shapes(client):
    events = await sse(client, "SendStreamingMessage", {"message": message("tool:Read;chunks:3")})
    assert set(events[0][1]) == {"task"}
    kinds = [next(iter(r)) for _, r in events[1:]]
    assert set(kinds) <= {"statusUpdate", "artifactUpdate"}
    text = json.dumps([r for _, r in events])
    assert '"kind"' not in text and '"final"' not in text
    last = events[-1][1]["statusUpdate"]
    assert last["status"]["state"] == "TASK_STATE_COMPLETED"
    chunks = [r["artifactUpdate"] for _, r in events if "artifactUpdate" in r]
    response = [c for c in chunks if c["artifact"]["artifactId"] == chunks[-1]["artifact"]["artifactId"]]
    assert "append" not in response[0] and all(c.get("append") is True for c in response[1:])
    assert response[-1].get("lastChunk") is True


async def test_subscribe_sends_the_task_first_and_refuses_finished_tasks(client):
    # The task waits on its user until the subscription is open: it cannot finish before it arrives.
    task = (
        await ok(
            client,
            "SendMessage",
            {"message": message("ask:go?;say:x"), "configuration": {"returnImmediately": True}},
        )
    )["task"]
    opened = asyncio.Event()
    subscribed = asyncio.create_task(sse(client, "SubscribeToTask", {"id": task["id"]}, first=opened))
    await asyncio.wait_for(opened.wait(), 60)
    await until_state(client, task["id"], "TASK_STATE_INPUT_REQUIRED")
    await ok(client, "SendMessage", {"message": message("yes", taskId=task["id"])})
    events = await asyncio.wait_for(subscribed, 60)
    assert "task" in events[0][1]
    assert events[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    error_of(await rpc(client, "SubscribeToTask", {"id": task["id"]}), -32004, "UNSUPPORTED_OPERATION")
    error_of(await rpc(client, "SubscribeToTask", {"id": "missing"}), -32001, "TASK_NOT_FOUND")


async def test_list_tasks_pages_filters_and_shapes(client):
    ctx = str(uuid.uuid4())
    ids = []
    for i in range(5):
        t = (await ok(client, "SendMessage", {"message": message(f"say:{i}", contextId=ctx)}))["task"]
        ids.append(t["id"])
    seen, token, pages = [], None, 0
    while True:
        params = {"contextId": ctx, "pageSize": 2}
        if token:
            params["pageToken"] = token
        page = await ok(client, "ListTasks", params)
        assert page["pageSize"] == 2 and page["totalSize"] == 5
        assert all("artifacts" not in t for t in page["tasks"])
        seen += page["tasks"]
        pages += 1
        token = page["nextPageToken"]
        if token == "":
            break
    assert pages == 3
    assert [t["id"] for t in seen] == list(reversed(ids)), "newest status first"
    stamps = [t["status"]["timestamp"] for t in seen]
    assert stamps == sorted(stamps, reverse=True)
    with_art = await ok(client, "ListTasks", {"contextId": ctx, "includeArtifacts": True, "historyLength": 0})
    assert all("artifacts" in t and "history" not in t for t in with_art["tasks"])
    done = await ok(client, "ListTasks", {"contextId": ctx, "status": "TASK_STATE_COMPLETED"})
    assert done["totalSize"] == 5
    none = await ok(client, "ListTasks", {"contextId": ctx, "status": "TASK_STATE_WORKING"})
    assert none == {"tasks": [], "nextPageToken": "", "pageSize": 50, "totalSize": 0}
    later = await ok(client, "ListTasks", {"contextId": ctx, "statusTimestampAfter": stamps[1]})
    assert {t["id"] for t in later["tasks"]} == {seen[0]["id"], seen[1]["id"]}


@pytest.mark.parametrize(
    "params",
    [
        {"pageSize": 150},
        {"pageSize": 0},
        {"historyLength": -1},
        {"status": "TASK_STATE_BOGUS"},
        {"pageToken": "zz"},
    ],
)
async def test_list_tasks_rejects_bad_params(client, params):
    error_of(await rpc(client, "ListTasks", params), -32602, "INVALID_PARAMS")


async def test_content_type_not_supported_on_both_versions(client):
    png = {"raw": "iVBORw0KGgo=", "mediaType": "image/png", "filename": "a.png"}
    data = await rpc(client, "SendMessage", {"message": message("x", parts=[png])})
    error_of(data, -32005, "CONTENT_TYPE_NOT_SUPPORTED")
    v03_part = {"kind": "file", "file": {"bytes": "iVBORw0KGgo=", "mimeType": "image/png"}}
    data = await rpc(client, "message/send", {"message": text_message("x", parts=[v03_part])}, headers={})
    assert data["error"]["code"] == -32005
    plain = {"text": "fine", "mediaType": "text/plain"}
    assert (await ok(client, "SendMessage", {"message": message("x", parts=[plain])}))["task"]


async def test_pre_03_names_and_type_tagged_parts(client):
    legacy = {"messageId": str(uuid.uuid4()), "role": "user", "parts": [{"type": "text", "text": "say:old"}]}
    data = await rpc(client, "tasks/send", {"message": legacy}, headers={})
    task = data["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    assert task["history"][0]["parts"] == [{"kind": "text", "text": "say:old"}]
    legacy["messageId"] = str(uuid.uuid4())
    events = await sse(client, "tasks/sendSubscribe", {"message": legacy}, headers={"X-Unused": "1"})
    assert events[-1][1]["kind"] == "status-update" and events[-1][1]["final"] is True
    data = await rpc(client, "tasks/pushNotification/get", {"id": task["id"]}, headers={})
    assert data["error"]["code"] == -32001


async def test_card_serves_both_versions(client, server):
    card = (await client.get("/.well-known/agent-card.json")).json()
    url = f"{server.base_url}/a2a/jsonrpc"
    assert {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"} in card["supportedInterfaces"]
    assert {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"} in card["supportedInterfaces"]
    assert card["supportedInterfaces"][0]["protocolVersion"] == "1.0"
    assert card["protocolVersion"] == "0.3.0" and card["url"] == url
    assert "extendedAgentCard" not in card["capabilities"]
    from a2a.client.card_resolver import parse_agent_card

    parsed = parse_agent_card(dict(card))
    assert any(i.protocol_version == "1.0" for i in parsed.supported_interfaces)

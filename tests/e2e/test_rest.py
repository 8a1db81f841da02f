"""The HTTP+JSON (REST) bindings on the wire: v1.0 under `/a2a/rest`, v0.3 under `/a2a/rest/v1`, the aliases.

Every route of both versions, the shapes of results and SSE events, error bodies and HTTP statuses
(`google.rpc.Status` with the v1.0.1 mapping for v1.0; `{"code", "type", "message"}` with the a2a-python 0.3
statuses for v0.3), content types, the tenant form, and subscribe by GET and POST.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from httpx_sse import EventSource, ServerSentEvent, aconnect_sse

REST = "/a2a/rest"
V1 = "/a2a/rest/v1"
A2A_JSON = "application/a2a+json"
WAIT_S = 30
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


def v10_message(text: str, **fields: Any) -> dict[str, Any]:
    m = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    m.update(fields)
    return m


def v03_message(text: str, **fields: Any) -> dict[str, Any]:
    """A v0.3 proto Message in ProtoJSON: `content`, not `parts`."""
    m = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "content": [{"text": text}]}
    m.update(fields)
    return m


def negotiated(request: httpx.Request) -> str:
    """The media type a v1.0 REST answer must have: a2a+json when the request named it, else plain JSON."""
    named = request.headers.get("content-type", "").startswith(A2A_JSON)
    return A2A_JSON if named or A2A_JSON in request.headers.get("accept", "") else "application/json"


def assert_status(resp: httpx.Response, http: int, status: str, reason: str) -> dict[str, Any]:
    """A v1.0 error: a google.rpc.Status with an ErrorInfo; returns the `error` object."""
    assert resp.status_code == http, resp.text
    assert resp.headers["content-type"] == negotiated(resp.request)
    body = resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"code", "status", "message", "details"}
    assert (err["code"], err["status"]) == (http, status)
    assert err["message"]
    info = err["details"][0]
    assert (info["@type"], info["reason"], info["domain"]) == (ERROR_INFO, reason, "a2a-protocol.org")
    return err


def assert_v03_error(resp: httpx.Response, http: int, code: int, type_: str) -> dict[str, Any]:
    assert resp.status_code == http, resp.text
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    assert set(body) == {"code", "type", "message"}
    assert (body["code"], body["type"]) == (code, type_)
    assert body["message"]
    return body


async def send_v10(client: httpx.AsyncClient, text: str, path: str = REST, **config: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"message": v10_message(text)}
    if config:
        body["configuration"] = config
    resp = await client.post(f"{path}/message:send", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()["task"]


async def send_v03(client: httpx.AsyncClient, text: str, **config: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"message": v03_message(text)}
    if config:
        body["configuration"] = config
    resp = await client.post(f"{V1}/message:send", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()["task"]


async def read_all(events: AsyncIterator[ServerSentEvent]) -> list[tuple[str, dict[str, Any]]]:
    """The rest of the stream, until the server ends it."""
    out = []
    async with asyncio.timeout(WAIT_S):
        async for ev in events:
            if ev.data:
                out.append((ev.id, json.loads(ev.data)))
    return out


@asynccontextmanager
async def open_sse(client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> AsyncIterator[EventSource]:
    async with aconnect_sse(client, method, url, **kw) as src:
        assert src.response.status_code == 200
        assert src.response.headers["content-type"].startswith("text/event-stream")
        yield src


async def sse(
    client: httpx.AsyncClient, method: str, url: str, **kw: Any
) -> list[tuple[str, dict[str, Any]]]:
    async with open_sse(client, method, url, **kw) as src:
        return await read_all(src.aiter_sse())


async def next_event(events: AsyncIterator[ServerSentEvent]) -> tuple[str, dict[str, Any]]:
    async with asyncio.timeout(WAIT_S):
        ev = await anext(events)
    return ev.id, json.loads(ev.data)


def one_key(obj: dict[str, Any]) -> str:
    assert len(obj) == 1, obj
    return next(iter(obj))


# ---- the card ---------------------------------------------------------------------------------------


async def test_card_advertises_both_rest_interfaces(client, server):
    card = (await client.get("/.well-known/agent-card.json")).json()
    url = f"{server.base_url}/a2a/rest"
    assert {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"} in card[
        "supportedInterfaces"
    ]
    assert {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"} in card[
        "supportedInterfaces"
    ]
    assert {"url": url, "transport": "HTTP+JSON"} in card["additionalInterfaces"]
    assert card["preferredTransport"] == "JSONRPC"


# ---- v1.0 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ctype", [A2A_JSON, "application/json", "application/json; charset=utf-8"])
async def test_v10_send(client, ctype):
    body = json.dumps({"message": v10_message("say:hi")})
    resp = await client.post(f"{REST}/message:send", content=body, headers={"Content-Type": ctype})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == (A2A_JSON if ctype == A2A_JSON else "application/json")
    task = resp.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["status"]["timestamp"].endswith("Z")
    assert task["history"][0]["parts"] == [{"text": "say:hi"}]
    assert task["history"][0]["role"] == "ROLE_USER"
    assert '"kind"' not in resp.text


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, "application/json"),
        ("*/*", "application/json"),
        ("application/json", "application/json"),
        (A2A_JSON, A2A_JSON),
        (f"application/json;q=0.5, {A2A_JSON}", A2A_JSON),
        (f"{A2A_JSON};q=0, application/json", "application/json"),
    ],
)
async def test_v10_media_type_follows_accept(client, accept, expected):
    """a2a+json only for a client that names it (spec 1.0 §11.1: SHOULD); answers and errors alike."""
    headers = {"Accept": accept} if accept else {}
    resp = await client.post(f"{REST}/message:send", json={"message": v10_message("say:x")}, headers=headers)
    assert resp.status_code == 200 and resp.headers["content-type"] == expected
    resp = await client.get(f"{REST}/tasks/missing", headers=headers)
    assert resp.status_code == 404 and resp.headers["content-type"] == expected
    assert resp.json()["error"]["status"] == "NOT_FOUND"


async def test_v10_a_body_sent_as_a2a_json_gets_a2a_json_back(client):
    body = json.dumps({"message": v10_message("say:x")}).encode()
    headers = {"Content-Type": A2A_JSON, "Accept": "application/json, */*"}
    resp = await client.post(f"{REST}/message:send", content=body, headers=headers)
    assert resp.status_code == 200 and resp.headers["content-type"] == A2A_JSON
    bad = json.dumps({"message": {"role": "ROLE_USER"}}).encode()
    resp = await client.post(f"{REST}/message:send", content=bad, headers=headers)
    assert resp.status_code == 400 and resp.headers["content-type"] == A2A_JSON


async def test_v10_send_configuration(client):
    task = await send_v10(client, "sleep:300", returnImmediately=True, historyLength=0)
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert "history" not in task
    resp = await client.post(f"{REST}/tasks/{task['id']}:cancel")
    assert resp.json()["status"]["state"] == "TASK_STATE_CANCELED"


async def test_v10_version_header(client):
    for version in ("1.0", "1.1", None):
        headers = {"A2A-Version": version} if version else {}
        resp = await client.post(
            f"{REST}/message:send", json={"message": v10_message("say:v")}, headers=headers
        )
        assert resp.status_code == 200, (version, resp.text)
    for version in ("0.3", "2.0"):
        resp = await client.post(
            f"{REST}/message:send", json={"message": v10_message("say:v")}, headers={"A2A-Version": version}
        )
        err = assert_status(resp, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED")
        assert err["details"][0]["metadata"] == {"version": version}
    resp = await client.get(f"{REST}/tasks", params={"A2A-Version": "0.3"})
    assert_status(resp, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED")


async def test_v10_stream(client):
    events = await sse(client, "POST", f"{REST}/message:stream", json={"message": v10_message("chunks:3")})
    assert one_key(events[0][1]) == "task"
    assert all(one_key(data) in ("statusUpdate", "artifactUpdate") for _, data in events[1:])
    assert [int(i) for i, _ in events] == list(range(1, len(events) + 1)), "every event carries its seq"
    assert events[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    text = json.dumps([d for _, d in events])
    assert '"jsonrpc"' not in text and '"kind"' not in text and '"final"' not in text
    updates = [d["artifactUpdate"] for _, d in events if "artifactUpdate" in d]
    (aid,) = {
        u["artifact"]["artifactId"] for u in updates if u["artifact"].get("name") == "assistant-response"
    }
    chunks = [
        p["text"] for u in updates if u["artifact"]["artifactId"] == aid for p in u["artifact"]["parts"]
    ]
    assert "".join(chunks) == "chunk-0 chunk-1 chunk-2 "


async def test_v10_stream_errors_come_back_before_the_stream(client):
    resp = await client.post(f"{REST}/message:stream", json={"message": {"role": "ROLE_USER"}})
    assert_status(resp, 400, "INVALID_ARGUMENT", "INVALID_PARAMS")
    resp = await client.post(
        f"{REST}/message:stream", json={"message": v10_message("x")}, headers={"A2A-Version": "0.3"}
    )
    assert_status(resp, 400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED")


async def test_v10_get(client):
    task = await send_v10(client, "ask:Go?")
    answered = await client.post(
        f"{REST}/message:send", json={"message": v10_message("yes", taskId=task["id"])}
    )
    assert answered.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    resp = await client.get(f"{REST}/tasks/{task['id']}")
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    got = resp.json()
    assert got["id"] == task["id"] and len(got["history"]) == 3
    assert [t["state"] for t in got["metadata"]["stateTransitions"]][-1] == "TASK_STATE_COMPLETED"
    got = (await client.get(f"{REST}/tasks/{task['id']}", params={"historyLength": 1})).json()
    assert [m["parts"] for m in got["history"]] == [[{"text": "yes"}]]
    got = (await client.get(f"{REST}/tasks/{task['id']}", params={"historyLength": 0})).json()
    assert "history" not in got

    err = assert_status(await client.get(f"{REST}/tasks/missing"), 404, "NOT_FOUND", "TASK_NOT_FOUND")
    assert err["details"][0]["metadata"] == {"taskId": "missing"}
    for bad in ("-1", "x"):
        resp = await client.get(f"{REST}/tasks/{task['id']}", params={"historyLength": bad})
        assert_status(resp, 400, "INVALID_ARGUMENT", "INVALID_PARAMS")


async def test_v10_list(client):
    first = await send_v10(client, "say:one")
    ctx = first["contextId"]
    body = {"message": v10_message("say:two", contextId=ctx)}
    second = (await client.post(f"{REST}/message:send", json=body)).json()["task"]
    waiting = (
        await client.post(f"{REST}/message:send", json={"message": v10_message("ask:Q?", contextId=ctx)})
    ).json()["task"]

    resp = await client.get(f"{REST}/tasks", params={"contextId": ctx, "pageSize": 2})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    page = resp.json()
    assert set(page) == {"tasks", "nextPageToken", "pageSize", "totalSize"}
    assert [t["id"] for t in page["tasks"]] == [waiting["id"], second["id"]], "newest status first"
    assert (page["pageSize"], page["totalSize"]) == (2, 3) and page["nextPageToken"]
    assert all("artifacts" not in t for t in page["tasks"])
    rest = (
        await client.get(f"{REST}/tasks", params={"contextId": ctx, "pageToken": page["nextPageToken"]})
    ).json()
    assert [t["id"] for t in rest["tasks"]] == [first["id"]] and rest["nextPageToken"] == ""

    for status in ("TASK_STATE_INPUT_REQUIRED", "6"):
        only = (await client.get(f"{REST}/tasks", params={"contextId": ctx, "status": status})).json()
        assert [t["id"] for t in only["tasks"]] == [waiting["id"]]
    full = (
        await client.get(
            f"{REST}/tasks",
            params={
                "contextId": ctx,
                "status": "TASK_STATE_COMPLETED",
                "includeArtifacts": "true",
                "historyLength": 0,
            },
        )
    ).json()
    assert {t["id"] for t in full["tasks"]} == {first["id"], second["id"]}
    assert all(t["artifacts"] and "history" not in t for t in full["tasks"])
    after = (
        await client.get(
            f"{REST}/tasks", params={"contextId": ctx, "statusTimestampAfter": waiting["status"]["timestamp"]}
        )
    ).json()
    assert [t["id"] for t in after["tasks"]] == [waiting["id"]]

    for params in (
        {"pageSize": 150},
        {"status": "TASK_STATE_BOGUS"},
        {"historyLength": -1},
        {"pageToken": "zz"},
    ):
        resp = await client.get(f"{REST}/tasks", params=params)
        assert_status(resp, 400, "INVALID_ARGUMENT", "INVALID_PARAMS")
    await client.post(f"{REST}/message:send", json={"message": v10_message("no", taskId=waiting["id"])})


async def test_v10_cancel(client):
    task = await send_v10(client, "sleep:300", returnImmediately=True)
    # The task of the path wins over an id in the body.
    resp = await client.post(f"{REST}/tasks/{task['id']}:cancel", json={"id": "other"})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/json"
    assert resp.json()["id"] == task["id"]
    assert resp.json()["status"]["state"] == "TASK_STATE_CANCELED"
    resp = await client.post(f"{REST}/tasks/{task['id']}:cancel")
    err = assert_status(resp, 400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE")
    assert err["details"][0]["metadata"] == {"taskId": task["id"]}
    assert_status(await client.post(f"{REST}/tasks/missing:cancel"), 404, "NOT_FOUND", "TASK_NOT_FOUND")


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_v10_subscribe(client, method):
    task = await send_v10(client, "ask:Sub?;chunks:2")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    async with open_sse(client, method, f"{REST}/tasks/{task['id']}:subscribe") as src:
        events = src.aiter_sse()
        seq, first = await next_event(events)
        assert one_key(first) == "task" and first["task"]["id"] == task["id"]
        assert first["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        await client.post(
            f"{REST}/message:send",
            json={
                "message": v10_message("yes", taskId=task["id"]),
                "configuration": {"returnImmediately": True},
            },
        )
        rest = await read_all(events)
    assert all(one_key(d) in ("statusUpdate", "artifactUpdate") for _, d in rest)
    assert rest[0][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    assert rest[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [int(i) for i, _ in rest] == list(range(int(seq) + 1, int(seq) + 1 + len(rest)))


async def test_v10_subscribe_resumes_after_last_event_id(client):
    task = await send_v10(client, "ask:Resume?")
    cursor = 1
    async with open_sse(
        client, "GET", f"{REST}/tasks/{task['id']}:subscribe", headers={"Last-Event-ID": str(cursor)}
    ) as src:
        events = src.aiter_sse()
        seq, first = await next_event(events)
        assert int(seq) == cursor + 1 and one_key(first) == "statusUpdate", (
            "replay from the log, no task first"
        )
        await client.post(f"{REST}/message:send", json={"message": v10_message("ok", taskId=task["id"])})
        rest = await read_all(events)
    assert rest[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_v10_subscribe_to_a_terminal_task_is_unsupported(client, method):
    task = await send_v10(client, "say:done")
    resp = await client.request(method, f"{REST}/tasks/{task['id']}:subscribe")
    err = assert_status(resp, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION")
    assert err["details"][0]["metadata"] == {"taskId": task["id"]}
    resp = await client.request(method, f"{REST}/tasks/missing:subscribe")
    assert_status(resp, 404, "NOT_FOUND", "TASK_NOT_FOUND")


async def test_v10_push_configs_and_extended_card(client):
    task = await send_v10(client, "say:x")
    base = f"{REST}/tasks/{task['id']}/pushNotificationConfigs"
    resp = await client.post(base, json={"url": "http://client.example/hook"})
    assert_status(resp, 400, "INVALID_ARGUMENT", "INVALID_PARAMS")
    assert (await client.get(base)).json() == {"configs": [], "nextPageToken": ""}
    assert_status(await client.get(f"{base}/cfg-1"), 404, "NOT_FOUND", "TASK_NOT_FOUND")
    resp = await client.delete(f"{base}/cfg-1")
    assert resp.status_code == 200 and resp.json() == {}
    body = {
        "message": v10_message("say:x"),
        "configuration": {"taskPushNotificationConfig": {"url": "https://127.0.0.1/hook"}},
    }
    resp = await client.post(f"{REST}/message:send", json=body)
    assert_status(resp, 400, "INVALID_ARGUMENT", "INVALID_PARAMS")
    resp = await client.get(f"{REST}/extendedAgentCard")
    assert_status(resp, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION")


async def test_v10_tenant_form(client):
    tenant = f"{REST}/acme"
    task = await send_v10(client, "say:tenant", path=tenant)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    got = await client.get(f"{tenant}/tasks/{task['id']}", params={"historyLength": 1})
    assert got.status_code == 200 and got.json()["id"] == task["id"]
    page = (await client.get(f"{tenant}/tasks", params={"contextId": task["contextId"]})).json()
    assert [t["id"] for t in page["tasks"]] == [task["id"]]
    events = await sse(client, "POST", f"{tenant}/message:stream", json={"message": v10_message("say:t")})
    assert one_key(events[0][1]) == "task"
    running = await send_v10(client, "sleep:300", path=tenant, returnImmediately=True)
    resp = await client.post(f"{tenant}/tasks/{running['id']}:cancel")
    assert resp.json()["status"]["state"] == "TASK_STATE_CANCELED"
    resp = await client.get(f"{tenant}/tasks/{task['id']}:subscribe")
    assert_status(resp, 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION")
    resp = await client.get(f"{tenant}/tasks/{task['id']}/pushNotificationConfigs")
    assert resp.status_code == 200 and resp.json()["configs"] == []
    assert_status(
        await client.get(f"{tenant}/extendedAgentCard"), 400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION"
    )
    assert_status(await client.get(f"{tenant}/tasks/missing"), 404, "NOT_FOUND", "TASK_NOT_FOUND")


async def test_v10_request_errors(client):
    url = f"{REST}/message:send"
    resp = await client.post(url, content=b'{"message": ', headers={"Content-Type": A2A_JSON})
    assert_status(resp, 400, "INVALID_ARGUMENT", "PARSE_ERROR")
    resp = await client.post(url, content=b"say:hi", headers={"Content-Type": "text/plain"})
    err = assert_status(resp, 415, "INVALID_ARGUMENT", "INVALID_REQUEST")
    assert "Content-Type" in err["message"] and "text/plain" in err["message"]
    resp = await client.post(url, json=[{"message": v10_message("x")}])
    assert_status(resp, 400, "INVALID_ARGUMENT", "INVALID_REQUEST")
    err = assert_status(await client.post(url, json={}), 400, "INVALID_ARGUMENT", "INVALID_PARAMS")
    assert "message" in err["message"]
    resp = await client.post(url, content=b"", headers={"Content-Type": A2A_JSON})
    assert_status(resp, 400, "INVALID_ARGUMENT", "INVALID_PARAMS")
    resp = await client.post(url, json={"message": v10_message("x", role="ROLE_ROBOT")})
    assert_status(resp, 400, "INVALID_ARGUMENT", "INVALID_PARAMS")
    image = v10_message("x", parts=[{"raw": base64.b64encode(b"png").decode(), "mediaType": "image/png"}])
    resp = await client.post(url, json={"message": image})
    err = assert_status(resp, 400, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED")
    assert err["details"][0]["metadata"] == {"mediaType": "image/png"}
    assert (await client.get(url)).status_code == 405
    assert (await client.delete(f"{REST}/tasks/x")).status_code == 405


# ---- v0.3 -------------------------------------------------------------------------------------------


async def test_v03_send_json_names(client):
    """The JSON names, as the official JavaScript client sends them."""
    resp = await client.post(f"{V1}/message:send", json={"message": v03_message("say:hi")})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/json"
    task = one_key(resp.json()) == "task" and resp.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    user = task["history"][0]
    assert user["role"] == "ROLE_USER" and user["content"] == [{"text": "say:hi"}] and "parts" not in user
    assert {a["name"] for a in task["artifacts"]} >= {"assistant-response"}
    assert all("parts" in a for a in task["artifacts"])
    assert [t["state"] for t in task["metadata"]["stateTransitions"]][-1] == "TASK_STATE_COMPLETED"
    assert '"kind"' not in resp.text


async def test_v03_send_proto_names_and_parts(client):
    """The proto field names, as the official Python client sends them (`request`, `message_id`, ...), and
    its file bytes: the base64 text in the proto's bytes, so base64 twice in ProtoJSON."""
    body = {
        "request": {
            "message_id": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "content": [
                {"text": "say:parts"},
                {
                    "file": {
                        "file_with_bytes": base64.b64encode(base64.b64encode(b"hello")).decode(),
                        "mime_type": "text/plain",
                        "name": "a.txt",
                    }
                },
                {"file": {"fileWithUri": "https://example.com/a.txt", "mimeType": "text/plain"}},
                {"data": {"data": {"k": [1, 2]}}, "metadata": {"m": True}},
            ],
        },
        "configuration": {"accepted_output_modes": ["text/plain"], "blocking": True, "history_length": 1},
    }
    resp = await client.post(f"{V1}/message:send", json=body)
    assert resp.status_code == 200, resp.text
    task = resp.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(task["history"]) == 1
    got = (await client.get(f"{V1}/tasks/{task['id']}")).json()
    assert got["history"][0]["content"] == [
        {"text": "say:parts"},
        {"file": {"fileWithBytes": "YUdWc2JHOD0=", "mimeType": "text/plain", "name": "a.txt"}},
        {"file": {"fileWithUri": "https://example.com/a.txt", "mimeType": "text/plain"}},
        {"data": {"data": {"k": [1, 2]}}, "metadata": {"m": True}},
    ]
    # The same task read through v1.0: one domain model behind both codecs.
    v10 = (await client.get(f"{REST}/tasks/{task['id']}")).json()
    assert v10["history"][0]["parts"][1] == {
        "raw": "aGVsbG8=",
        "mediaType": "text/plain",
        "filename": "a.txt",
    }


async def test_v03_blocking_follows_proto3_defaults(client):
    # No configuration: a blocking send. A configuration without `blocking: true`: proto3's false.
    task = await send_v03(client, "say:b")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    task = await send_v03(client, "sleep:300", acceptedOutputModes=["text/plain"])
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    resp = await client.post(f"{V1}/tasks/{task['id']}:cancel")
    assert resp.json()["status"]["state"] == "TASK_STATE_CANCELLED"


async def test_v03_stream(client):
    body = {"message": v03_message("chunks:2")}
    events = await sse(client, "POST", f"{V1}/message:stream", json=body)
    assert one_key(events[0][1]) == "task"
    assert events[0][1]["task"]["history"][0]["content"] == [{"text": "chunks:2"}]
    assert all(one_key(d) in ("statusUpdate", "artifactUpdate") for _, d in events[1:])
    last = events[-1][1]["statusUpdate"]
    assert last["status"]["state"] == "TASK_STATE_COMPLETED" and last["final"] is True
    assert all("final" not in d["statusUpdate"] for _, d in events[1:-1] if "statusUpdate" in d)
    updates = [d["artifactUpdate"] for _, d in events if "artifactUpdate" in d]
    (aid,) = {
        u["artifact"]["artifactId"] for u in updates if u["artifact"].get("name") == "assistant-response"
    }
    chunks = [u for u in updates if u["artifact"]["artifactId"] == aid]
    assert [u.get("append", False) for u in chunks] == [False] + [True] * (len(chunks) - 1)
    assert "".join(p["text"] for u in chunks for p in u["artifact"]["parts"]) == "chunk-0 chunk-1 "
    text = json.dumps([d for _, d in events])
    assert '"jsonrpc"' not in text and '"kind"' not in text and '"parts": [{"kind"' not in text


async def test_v03_get(client):
    task = await send_v03(client, "ask:Go?")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["status"]["message"]["role"] == "ROLE_AGENT"
    assert task["status"]["message"]["content"] == [{"text": "Go?"}]
    resp = await client.get(f"{V1}/tasks/{task['id']}", params={"historyLength": 1})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    assert [m["role"] for m in resp.json()["history"]] == ["ROLE_AGENT"]
    resp = await client.get(f"{V1}/tasks/{task['id']}", params={"historyLength": "x"})
    assert_v03_error(resp, 422, -32602, "InvalidParamsError")
    body = assert_v03_error(await client.get(f"{V1}/tasks/missing"), 404, -32001, "TaskNotFoundError")
    assert body["message"] == "Task missing not found"
    await client.post(f"{V1}/message:send", json={"message": v03_message("no", taskId=task["id"])})


async def test_v03_cancel(client):
    task = await send_v03(client, "sleep:300", blocking=False)
    resp = await client.post(f"{V1}/tasks/{task['id']}:cancel", headers={"Content-Type": "application/json"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"]["state"] == "TASK_STATE_CANCELLED", "two Ls in the v0.3 proto"
    resp = await client.post(f"{V1}/tasks/{task['id']}:cancel")
    assert_v03_error(resp, 409, -32002, "TaskNotCancelableError")
    assert_v03_error(await client.post(f"{V1}/tasks/missing:cancel"), 404, -32001, "TaskNotFoundError")


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_v03_subscribe(client, method):
    task = await send_v03(client, "ask:Sub?;chunks:1")
    async with open_sse(client, method, f"{V1}/tasks/{task['id']}:subscribe") as src:
        events = src.aiter_sse()
        _, first = await next_event(events)
        assert first["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        await client.post(
            f"{V1}/message:send",
            json={"message": v03_message("yes", taskId=task["id"]), "configuration": {"blocking": False}},
        )
        rest = await read_all(events)
    assert all(one_key(d) in ("statusUpdate", "artifactUpdate") for _, d in rest)
    assert rest[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"

    # A finished task: the task, then the end of the stream (the v0.3 proto's TaskSubscription).
    events = await sse(client, method, f"{V1}/tasks/{task['id']}:subscribe")
    assert [one_key(d) for _, d in events] == ["task"]
    assert events[0][1]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    resp = await client.request(method, f"{V1}/tasks/missing:subscribe")
    assert_v03_error(resp, 404, -32001, "TaskNotFoundError")


async def test_v03_push_configs_card_and_list(client, server):
    task = await send_v03(client, "say:x")
    base = f"{V1}/tasks/{task['id']}/pushNotificationConfigs"
    create = {
        "parent": f"tasks/{task['id']}",
        "config_id": "c",
        "config": {"push_notification_config": {"url": "u"}},
    }
    assert_v03_error(await client.post(base, json=create), 422, -32602, "InvalidParamsError")
    assert (await client.get(base)).json() == {"configs": []}
    assert_v03_error(await client.get(f"{base}/c"), 404, -32001, "TaskNotFoundError")
    resp = await client.delete(f"{base}/c")
    assert resp.status_code == 200 and resp.json() == {}
    body = {
        "message": v03_message("say:x"),
        "configuration": {"pushNotification": {"url": "https://10.0.0.1"}},
    }
    resp = await client.post(f"{V1}/message:send", json=body)
    assert_v03_error(resp, 422, -32602, "InvalidParamsError")

    card = (await client.get(f"{V1}/card")).json()
    assert card["name"] == "Scripted Test Agent" and card["protocolVersion"] == "0.3.0"
    assert card["url"] == f"{server.base_url}/a2a/jsonrpc"
    assert "supportedInterfaces" not in card
    assert card["capabilities"] == {"streaming": True, "pushNotifications": True}

    assert_v03_error(await client.get(f"{V1}/tasks"), 501, -32004, "UnsupportedOperationError")


async def test_v03_request_errors(client):
    url = f"{V1}/message:send"
    resp = await client.post(url, content=b"{", headers={"Content-Type": "application/json"})
    assert_v03_error(resp, 400, -32700, "JSONParseError")
    resp = await client.post(url, content=b"hello", headers={"Content-Type": "text/plain"})
    body = assert_v03_error(resp, 415, -32600, "InvalidRequestError")
    assert "text/plain" in body["message"]
    resp = await client.post(url, json={"message": v03_message("x", role="user")})
    assert_v03_error(resp, 422, -32602, "InvalidParamsError")
    resp = await client.post(url, json={"message": v03_message("x", content=[{"text": "a", "data": {}}])})
    assert_v03_error(resp, 422, -32602, "InvalidParamsError")
    resp = await client.post(url, json={"message": v10_message("x")})
    assert_v03_error(resp, 422, -32602, "InvalidParamsError")
    png = {"file": {"fileWithBytes": "cG5n", "mimeType": "image/png"}}
    resp = await client.post(url, json={"message": v03_message("x", content=[png])})
    assert_v03_error(resp, 415, -32005, "ContentTypeNotSupportedError")
    for version in ("1.0", "2.0"):
        resp = await client.post(url, json={"message": v03_message("x")}, headers={"A2A-Version": version})
        assert_v03_error(resp, 400, -32009, "VersionNotSupportedError")
    resp = await client.post(url, json={"message": v03_message("say:x")}, headers={"A2A-Version": "0.3"})
    assert resp.status_code == 200
    assert (await client.get(url)).status_code == 405


# ---- aliases ----------------------------------------------------------------------------------------


async def test_alias_list_tasks(client):
    first = await send_v10(client, "say:a1")
    ctx = first["contextId"]
    second = (
        await client.post(f"{REST}/message:send", json={"message": v10_message("say:a2", contextId=ctx)})
    ).json()["task"]
    resp = await client.get("/a2a/tasks", params={"contextId": ctx, "pageSize": 1})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    page = resp.json()
    assert set(page) == {"tasks", "nextPageToken", "pageSize", "totalSize"}
    (task,) = page["tasks"]
    assert task["id"] == second["id"] and task["kind"] == "task"
    assert task["status"]["state"] == "completed" and task["history"][0]["parts"][0]["kind"] == "text"
    assert "artifacts" not in task
    assert (page["pageSize"], page["totalSize"]) == (1, 2)
    rest = (
        await client.get("/a2a/tasks", params={"contextId": ctx, "pageToken": page["nextPageToken"]})
    ).json()
    assert [t["id"] for t in rest["tasks"]] == [first["id"]] and rest["nextPageToken"] == ""

    for status in ("completed", "TASK_STATE_COMPLETED"):
        params = {"contextId": ctx, "status": status, "includeArtifacts": "true", "historyLength": 0}
        done = (await client.get("/a2a/tasks", params=params)).json()
        assert {t["id"] for t in done["tasks"]} == {first["id"], second["id"]}
        assert all(t["artifacts"] and t["history"] == [] for t in done["tasks"])
    working = (await client.get("/a2a/tasks", params={"contextId": ctx, "status": "working"})).json()
    assert working["tasks"] == [] and working["totalSize"] == 0

    resp = await client.get("/a2a/tasks", params={"pageSize": 0})
    assert_v03_error(resp, 400, -32602, "InvalidParamsError")
    resp = await client.get("/a2a/tasks", params={"status": "bogus"})
    assert_v03_error(resp, 400, -32602, "InvalidParamsError")


async def test_alias_push_notification_config(client):
    task = await send_v10(client, "say:p")
    path = f"/a2a/tasks/{task['id']}/pushNotificationConfig"
    resp = await client.post(path, json={"url": "https://169.254.169.254/latest"})
    assert_v03_error(resp, 400, -32602, "InvalidParamsError")
    assert "169.254.169.254" in resp.json()["message"]
    resp = await client.get(path)
    assert resp.status_code == 200 and resp.json() == []
    assert_v03_error(
        await client.get("/a2a/tasks/missing/pushNotificationConfig"), 404, -32001, "TaskNotFoundError"
    )

"""JSON-RPC 2.0 envelope rules: error codes, ids, batches, notifications, the /a2a alias."""

from __future__ import annotations

import uuid

import pytest

from tests.support.rpc import call, result, text_message


async def post_raw(client, content, content_type="application/json"):
    return await client.post("/a2a/jsonrpc", content=content, headers={"content-type": content_type})


async def test_bad_json_is_parse_error_in_http_200(client):
    resp = await post_raw(client, b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert resp.status_code == 200
    body = resp.json()
    assert body == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": body["error"]["message"]},
    }
    assert "Traceback" not in resp.text


@pytest.mark.parametrize(
    ("payload", "expected_id"),
    [
        ({"id": 7, "method": "tasks/get", "params": {"id": "x"}}, 7),
        ({"jsonrpc": "1.0", "id": "a", "method": "tasks/get"}, "a"),
        ({"jsonrpc": "2.0", "id": 8}, 8),
        ({"jsonrpc": "2.0", "id": 9, "method": 42}, 9),
        ({"jsonrpc": "2.0", "id": 10, "method": "tasks/get", "params": "x"}, 10),
        ({"jsonrpc": "2.0", "id": {"no": 1}, "method": "tasks/get"}, None),
        ({"jsonrpc": "2.0", "id": True, "method": "tasks/get"}, None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "tasks/get"}, None),
        ("just a string", None),
    ],
)
async def test_invalid_envelope_is_invalid_request(client, payload, expected_id):
    resp = await client.post("/a2a/jsonrpc", json=payload)
    assert resp.status_code == 200
    body = resp.json()
    assert body["error"]["code"] == -32600
    assert body["id"] == expected_id
    assert body["error"]["message"]


async def test_unknown_method(client):
    body = await call(client, "tasks/explode", {})
    assert body["error"]["code"] == -32601
    assert "tasks/explode" in body["error"]["message"]


@pytest.mark.parametrize(
    ("method", "params", "mentions"),
    [
        ("message/send", {}, "message"),
        ("message/send", {"message": {"kind": "message", "role": "user", "parts": []}}, "parts"),
        (
            "message/send",
            {"message": {"messageId": "m", "role": "robot", "parts": [{"kind": "text", "text": "x"}]}},
            "role",
        ),
        (
            "message/send",
            {"message": {"messageId": "m", "role": "user", "parts": [{"kind": "text"}]}},
            "text",
        ),
        (
            "message/send",
            {"message": text_message("x"), "configuration": {"historyLength": -1}},
            "historyLength",
        ),
        ("tasks/get", {}, "id"),
        ("tasks/get", {"id": 5}, "id"),
        ("tasks/get", {"id": "t", "historyLength": "many"}, "historyLength"),
        ("tasks/cancel", {"idx": "t"}, "id"),
        ("tasks/resubscribe", {}, "id"),
        ("message/stream", {"message": {"messageId": "m"}}, "parts"),
        ("tasks/get", [1, 2], "params"),
    ],
)
async def test_bad_params_say_which_field(client, method, params, mentions):
    body = await call(client, method, params)
    assert body["error"]["code"] == -32602, body
    assert mentions in body["error"]["message"]


async def test_batch_answers_each_request_and_skips_notifications(client):
    mid = str(uuid.uuid4())
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "tasks/get", "params": {"id": "missing"}},
        {
            "jsonrpc": "2.0",
            "method": "message/send",
            "params": {"message": text_message("say:n", messageId=mid)},
        },
        {"jsonrpc": "2.0", "id": "b", "method": "nope"},
        {
            "jsonrpc": "2.0",
            "id": "c",
            "method": "message/send",
            "params": {"message": text_message("say:hi")},
        },
        17,
    ]
    resp = await client.post("/a2a/jsonrpc", json=batch)
    assert resp.status_code == 200
    by_id = {r["id"]: r for r in resp.json()}
    assert len(resp.json()) == 4
    assert by_id["a"]["error"]["code"] == -32001
    assert by_id["b"]["error"]["code"] == -32601
    assert by_id["c"]["result"]["status"]["state"] == "completed"
    assert by_id[None]["error"]["code"] == -32600


async def test_empty_batch_is_invalid(client):
    resp = await client.post("/a2a/jsonrpc", json=[])
    assert resp.json()["error"]["code"] == -32600


async def test_streaming_method_cannot_be_batched(client):
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": text_message("x")}}
    ]
    resp = await client.post("/a2a/jsonrpc", json=batch)
    assert resp.json()[0]["error"]["code"] == -32600


async def test_notification_runs_but_gets_no_response(client):
    mid = str(uuid.uuid4())
    note = {
        "jsonrpc": "2.0",
        "method": "message/send",
        "params": {"message": text_message("say:quiet", messageId=mid)},
    }
    resp = await client.post("/a2a/jsonrpc", json=note)
    assert resp.status_code == 204
    assert resp.content == b""
    # The notification's message was stored: sending it again (with an id) returns that task.
    task = await result(client, "message/send", {"message": text_message("say:quiet", messageId=mid)})
    assert task["history"][0]["messageId"] == mid
    assert task["artifacts"][-1]["parts"][0]["text"] == "quiet"


async def test_batch_of_notifications_only_is_empty(client):
    batch = [{"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "x"}}] * 2
    resp = await client.post("/a2a/jsonrpc", json=batch)
    assert resp.status_code == 204


async def test_alias_path_and_string_ids(client):
    resp = await client.post(
        "/a2a",
        json={
            "jsonrpc": "2.0",
            "id": "req-1",
            "method": "message/send",
            "params": {"message": text_message("say:x")},
        },
    )
    body = resp.json()
    assert body["id"] == "req-1"
    assert body["result"]["status"]["state"] == "completed"


async def test_null_id_is_answered_with_null(client):
    resp = await client.post(
        "/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": None, "method": "tasks/get", "params": {"id": "x"}}
    )
    body = resp.json()
    assert body["id"] is None and body["error"]["code"] == -32001


async def test_unsupported_content_type_is_refused_clearly(client):
    resp = await post_raw(client, b"<xml/>", "application/xml")
    assert resp.status_code == 415
    assert "Content-Type" in resp.json()["error"]["message"]

"""The request shapes the seed documents and clients write, sent verbatim to a real server (issue #37).

Five bodies were refused before: `tasks/get` with `taskId` or `task_id`, a legacy `tasks/send` with `id`,
`sessionId` and no `messageId`, parts written `{"type": "text", "content": "hi"}`,
`agent/authenticatedExtendedCard`, and an answer to a question that carries only the `contextId` (it
started a new task while the question waited). Each now works, on both databases; the same shapes on the
other methods, versions and the REST bindings where they have them; names that disagree are -32602.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.support.auth import key_of
from tests.support.rpc import send, sse_data, text_message

V10 = {"A2A-Version": "1.0"}


async def post(
    client: httpx.AsyncClient, method: str, params: Any, headers: dict[str, str] | None = None
) -> Any:
    """One JSON-RPC request with these params exactly; the response object (a stream's one event)."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        body["params"] = params
    resp = await client.post("/a2a/jsonrpc", json=body, headers=headers or {})
    assert resp.status_code == 200, resp.text
    if resp.headers["content-type"].startswith("text/event-stream"):
        return sse_data(resp.text)[-1]
    return resp.json()


def invalid(data: dict[str, Any], *words: str) -> str:
    """The message of a -32602 answer, which names each of `words`."""
    assert data["error"]["code"] == -32602, data
    message = data["error"]["message"]
    assert all(w in message for w in words), message
    return message


def response_text(task: dict[str, Any]) -> str:
    art = next(a for a in task["artifacts"] if a.get("name") == "assistant-response")
    return "".join(p["text"] for p in art["parts"])


async def test_tasks_get_takes_taskId_and_task_id(client):
    task = await send(client, "say:hi")
    for params in ({"taskId": task["id"]}, {"task_id": task["id"]}):
        got = await post(client, "tasks/get", params)
        assert got["result"]["id"] == task["id"] and got["result"]["status"]["state"] == "completed", got
    got = await post(client, "tasks/get", {"taskId": task["id"], "id": task["id"], "historyLength": 0})
    assert got["result"]["id"] == task["id"] and got["result"]["history"] == []
    for params in ({"taskId": task["id"]}, {"task_id": task["id"]}):
        got = await post(client, "GetTask", params, V10)
        assert got["result"]["id"] == task["id"], got


async def test_every_method_with_a_task_id_param_takes_the_aliases(client):
    """tasks/cancel, resubscribe and the push-config methods of v0.3, and CancelTask and SubscribeToTask of
    v1.0: the alias is read as the task id (a finished task: not cancelable, nothing to subscribe to)."""
    task = await send(client, "say:hi")
    for method, headers, code in (("tasks/cancel", {}, -32002), ("CancelTask", V10, -32002)):
        for alias in ("taskId", "task_id"):
            got = await post(client, method, {alias: task["id"]}, headers)
            assert got["error"]["code"] == code and task["id"] in got["error"]["message"], got
    got = await post(client, "SubscribeToTask", {"taskId": task["id"]}, V10)
    assert got["error"]["code"] == -32004 and task["id"] in got["error"]["message"], got
    got = await post(client, "tasks/resubscribe", {"task_id": task["id"]})
    assert got["result"]["id"] == task["id"] and got["result"]["kind"] == "task", got
    got = await post(client, "tasks/pushNotificationConfig/list", {"taskId": task["id"]})
    assert got["result"] == [], got
    for method in ("tasks/pushNotificationConfig/get", "tasks/pushNotificationConfig/delete"):
        got = await post(client, method, {"task_id": task["id"], "pushNotificationConfigId": "none"})
        assert got.get("result") is None and got.get("error", {}).get("code") in (None, -32001), got


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("tasks/get", {}),
        ("tasks/cancel", {}),
        ("tasks/resubscribe", {}),
        ("GetTask", V10),
        ("CancelTask", V10),
    ],
)
async def test_aliases_that_name_different_tasks_are_refused(client, method, headers):
    task = await send(client, "say:hi")
    other = str(uuid.uuid4())
    for params in (
        {"id": task["id"], "taskId": other},
        {"id": task["id"], "task_id": other},
        {"taskId": task["id"], "task_id": other},
    ):
        invalid(await post(client, method, params, headers), "same task", "different values")
    after = await post(client, "tasks/get", {"id": task["id"]})
    assert after["result"]["status"]["state"] == "completed", "a refused cancel canceled"


async def test_legacy_tasks_send_names_its_task_and_session(client):
    """`id` names the new task, `sessionId` is its context, the message needs no messageId; the same `id`
    later continues that task (here: answers its question)."""
    task_id, session = f"legacy-{uuid.uuid4().hex[:12]}", f"session-{uuid.uuid4().hex[:8]}"
    body = {
        "id": task_id,
        "sessionId": session,
        "message": {"role": "user", "parts": [{"type": "text", "text": "ask:Deploy now?"}]},
    }
    got = await post(client, "tasks/send", body)
    task = got["result"]
    assert (task["id"], task["contextId"], task["status"]["state"]) == (task_id, session, "input-required"), (
        got
    )
    first = task["history"][0]
    assert uuid.UUID(first["messageId"]) and first["role"] == "user" and first["kind"] == "message"
    answer = {
        "id": task_id,
        "sessionId": session,
        "message": {"role": "user", "parts": [{"type": "text", "text": "yes"}]},
    }
    done = (await post(client, "tasks/send", answer))["result"]
    assert (done["id"], done["status"]["state"]) == (task_id, "completed")
    assert response_text(done) == "answer:yes"
    got = await post(client, "tasks/send", answer)
    assert got["error"]["code"] == -32004 and task_id in got["error"]["message"], "a finished task took more"
    streamed = await post(
        client,
        "tasks/sendSubscribe",
        {
            "id": f"{task_id}-2",
            "sessionId": session,
            "message": {"parts": [{"type": "text", "text": "say:x"}]},
        },
    )
    assert streamed["result"]["taskId"] == f"{task_id}-2" and streamed["result"]["final"] is True, streamed


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"id": "a/b"}, ("id", "letters, digits")),
        ({"id": "x" * 65}, ("id",)),
        ({"id": 5}, ("id",)),
        ({"id": "t-1", "message": {"taskId": "t-2"}}, ("id and message.taskId differ",)),
        ({"sessionId": "s-1", "message": {"contextId": "s-2"}}, ("sessionId and message.contextId differ",)),
        ({"sessionId": ""}, ("sessionId",)),
    ],
    ids=["slash", "too long", "not a string", "two task ids", "two contexts", "empty session"],
)
async def test_legacy_tasks_send_refuses_what_cannot_name_a_task(client, params, words):
    message = {"parts": [{"type": "text", "text": "say:x"}], **params.get("message", {})}
    invalid(await post(client, "tasks/send", {**params, "message": message}), *words)


async def test_a_text_part_written_with_type_and_content(client):
    """`{"type": "text", "content": "hi"}`, no kind, role or messageId: a text part of a user's message, on
    JSON-RPC of both versions and both REST bindings."""
    part = {"type": "text", "content": "say:hi"}
    got = await post(client, "message/send", {"message": {"parts": [part]}})
    task = got["result"]
    assert task["status"]["state"] == "completed", got
    (first,) = task["history"][:1]
    assert first["parts"] == [{"kind": "text", "text": "say:hi"}] and first["role"] == "user"
    assert uuid.UUID(first["messageId"])
    got = await post(client, "SendMessage", {"message": {"parts": [part]}}, V10)
    first = got["result"]["task"]["history"][0]
    assert (
        first["parts"] == [{"text": "say:hi"}]
        and first["role"] == "ROLE_USER"
        and uuid.UUID(first["messageId"])
    )
    resp = await client.post("/a2a/rest/message:send", json={"message": {"parts": [part]}}, headers=V10)
    assert resp.status_code == 200, resp.text
    assert resp.json()["task"]["history"][0]["parts"] == [{"text": "say:hi"}]
    resp = await client.post("/a2a/rest/v1/message:send", json={"message": {"content": [part]}})
    assert resp.status_code == 200, resp.text
    first = resp.json()["task"]["history"][0]
    assert first["content"] == [{"text": "say:hi"}] and first["role"] == "ROLE_USER"


async def test_a_retry_without_messageId_under_one_idempotency_key_is_the_same_request(client):
    """The server makes each copy's messageId anew; the key's fingerprint leaves it out, so the copy gets the
    first copy's task instead of a refusal for a different body."""
    for via in ("jsonrpc", "rest"):
        key = {"Idempotency-Key": f"shapes-{uuid.uuid4()}"}
        tasks = []
        for _ in range(2):
            if via == "jsonrpc":
                message = {"parts": [{"type": "text", "content": "say:once"}]}
                tasks.append((await post(client, "message/send", {"message": message}, key))["result"])
            else:
                body = {"message": {"parts": [{"text": "say:once"}]}}
                resp = await client.post("/a2a/rest/message:send", json=body, headers={**V10, **key})
                assert resp.status_code == 200, resp.text
                tasks.append(resp.json()["task"])
        assert tasks[0]["id"] == tasks[1]["id"], (via, tasks)


@pytest.mark.parametrize(
    ("method", "message", "headers"),
    [
        ("message/send", {"parts": [{"type": "file", "content": "hi"}]}, {}),
        ("message/send", {"parts": [{"type": "text", "content": 5}]}, {}),
        ("message/send", {"role": "robot", "parts": [{"type": "text", "content": "hi"}]}, {}),
        ("message/send", {"messageId": "", "parts": [{"type": "text", "content": "hi"}]}, {}),
        ("message/send", {"parts": []}, {}),
        ("SendMessage", {"parts": [{"type": "data", "content": "hi"}]}, V10),
        ("SendMessage", {"role": "ROLE_ROBOT", "parts": [{"content": "hi"}]}, V10),
    ],
    ids=[
        "file content",
        "number content",
        "unknown role",
        "empty messageId",
        "no parts",
        "data content",
        "v10 role",
    ],
)
async def test_what_the_documented_shapes_do_not_cover_is_still_refused(client, method, message, headers):
    invalid(await post(client, method, {"message": message}, headers), "message")


async def test_agent_authenticated_extended_card(auth_server):
    """The pre-0.3 name answers as `agent/getAuthenticatedExtendedCard` does; without a credential, 401."""
    async with httpx.AsyncClient(base_url=auth_server.base_url, timeout=30) as c:
        old = await post(c, "agent/authenticatedExtendedCard", None, key_of("bob"))
        new = await post(c, "agent/getAuthenticatedExtendedCard", None, key_of("bob"))
        assert old == new and "admin" in {s["id"] for s in old["result"]["skills"]}, old
        anonymous = await c.post(
            "/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": "agent/authenticatedExtendedCard"}
        )
        assert anonymous.status_code == 401


async def test_agent_authenticated_extended_card_when_none_is_configured(client):
    for method in ("agent/authenticatedExtendedCard", "agent/getAuthenticatedExtendedCard"):
        assert (await post(client, method, {}))["error"]["code"] == -32007


async def test_legacy_id_of_another_principals_task_is_refused_and_untouched(auth_server):
    async with httpx.AsyncClient(base_url=auth_server.base_url, timeout=30) as c:
        task_id = f"mine-{uuid.uuid4().hex[:12]}"
        ask = {"id": task_id, "message": {"parts": [{"type": "text", "text": "ask:Ship it?"}]}}
        got = await post(c, "tasks/send", ask, key_of("alice"))
        assert got["result"]["status"]["state"] == "input-required", got
        answer = {"id": task_id, "message": {"parts": [{"type": "text", "text": "no"}]}}
        invalid(await post(c, "tasks/send", answer, key_of("bob")), task_id, "taken")
        got = await post(c, "tasks/get", {"taskId": task_id}, key_of("bob"))
        assert got["error"]["code"] == -32001
        got = await post(c, "tasks/get", {"taskId": task_id}, key_of("alice"))
        assert got["result"]["status"]["state"] == "input-required" and len(got["result"]["history"]) == 2
        await post(c, "tasks/cancel", {"taskId": task_id}, key_of("alice"))


async def test_an_answer_naming_only_the_context_completes_the_waiting_task(client):
    """The approval answered as a seed document shows it: the contextId alone, no taskId."""
    task = await send(client, "ask:Apply the patch?")
    assert task["status"]["state"] == "input-required"
    answer = {"contextId": task["contextId"], "parts": [{"type": "text", "content": "yes"}]}
    done = (await post(client, "message/send", {"message": answer}))["result"]
    assert (done["id"], done["status"]["state"]) == (task["id"], "completed"), done
    assert response_text(done) == "answer:yes"
    listed = await client.get("/a2a/rest/tasks", params={"contextId": task["contextId"]}, headers=V10)
    assert [t["id"] for t in listed.json()["tasks"]] == [task["id"]], "the answer started a task"
    again = await post(
        client, "message/send", {"message": text_message("say:next", contextId=task["contextId"])}
    )
    assert again["result"]["id"] != task["id"] and again["result"]["status"]["state"] == "completed"


async def test_an_answer_naming_only_the_context_on_v10_and_both_rest_bindings(client):
    for via in ("jsonrpc", "rest", "rest v0.3"):
        task = await send(client, "ask:Merge?")
        if via == "jsonrpc":
            message = {"contextId": task["contextId"], "parts": [{"text": "ok"}]}
            done = (await post(client, "SendMessage", {"message": message}, V10))["result"]["task"]
        else:
            path, parts = (
                ("/a2a/rest/message:send", "parts")
                if via == "rest"
                else ("/a2a/rest/v1/message:send", "content")
            )
            message = {"contextId": task["contextId"], parts: [{"text": "ok"}]}
            resp = await client.post(path, json={"message": message}, headers=V10 if via == "rest" else {})
            assert resp.status_code == 200, resp.text
            done = resp.json()["task"]
        assert (done["id"], done["status"]["state"]) == (task["id"], "TASK_STATE_COMPLETED"), (via, done)

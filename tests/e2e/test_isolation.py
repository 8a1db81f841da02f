"""Per-owner isolation on a real server: bob can reach none of alice's tasks through any method or route.

Every attempt gets the answer an unknown id gets (TaskNotFound, same message but for the id, so existence
does not leak), and the database is exactly as before. Contexts are per principal: bob naming alice's
contextId has a context of his own under it; a messageId alice used is bob's to use too; ListTasks shows each
their own. Push-config routes are checked the same
way: TaskNotFound once push is supported, PushNotificationNotSupported until then.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tests.e2e.test_rest import v03_message, v10_message
from tests.support.auth import db_state, key_of
from tests.support.rpc import sse_data, text_message

V10 = {"A2A-Version": "1.0"}
Attempt = Callable[[httpx.AsyncClient, dict[str, str]], Awaitable[httpx.Response]]


def rpc(method: str, params: Any, v10: bool = False) -> Attempt:
    async def go(c: httpx.AsyncClient, ids: dict[str, str]) -> httpx.Response:
        body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": fill(params, ids)}
        return await c.post("/a2a/jsonrpc", json=body, headers=V10 if v10 else {})

    return go


def rest(method: str, path: str, body: Any = None) -> Attempt:
    async def go(c: httpx.AsyncClient, ids: dict[str, str]) -> httpx.Response:
        return await c.request(method, fill(path, ids), json=fill(body, ids))

    return go


def fill(value: Any, ids: dict[str, str]) -> Any:
    """`{task}`-style placeholders replaced by ids, anywhere in a JSON value; fresh messageIds."""
    if isinstance(value, str):
        return value.format(**ids, mid=uuid.uuid4().hex)
    if isinstance(value, dict):
        return {k: fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, ids) for v in value]
    return value


V03_FOLLOW_UP = {"message": {**text_message("hi"), "messageId": "{mid}", "taskId": "{task}"}}
V10_FOLLOW_UP = {"message": {**v10_message("hi"), "messageId": "{mid}", "taskId": "{task}"}}
V03REST_FOLLOW_UP = {"message": {**v03_message("hi"), "messageId": "{mid}", "taskId": "{task}"}}
PUSH = {"url": "https://hooks.example.com/a2a"}

# name → attempt; each is made against a task of alice's (`task`) and against an unknown id.
TASK_ATTEMPTS: dict[str, Attempt] = {
    "v03 tasks/get": rpc("tasks/get", {"id": "{task}"}),
    "v03 tasks/cancel": rpc("tasks/cancel", {"id": "{task}"}),
    "v03 tasks/resubscribe": rpc("tasks/resubscribe", {"id": "{task}"}),
    "v03 message/send taskId": rpc("message/send", V03_FOLLOW_UP),
    "v03 message/stream taskId": rpc("message/stream", V03_FOLLOW_UP),
    "v10 GetTask": rpc("GetTask", {"id": "{task}"}, v10=True),
    "v10 CancelTask": rpc("CancelTask", {"id": "{task}"}, v10=True),
    "v10 SubscribeToTask": rpc("SubscribeToTask", {"id": "{task}"}, v10=True),
    "v10 SendMessage taskId": rpc("SendMessage", V10_FOLLOW_UP, v10=True),
    "v10 SendStreamingMessage taskId": rpc("SendStreamingMessage", V10_FOLLOW_UP, v10=True),
    "REST GET task": rest("GET", "/a2a/rest/tasks/{task}"),
    "REST tenant GET task": rest("GET", "/a2a/rest/acme/tasks/{task}"),
    "REST cancel": rest("POST", "/a2a/rest/tasks/{task}:cancel"),
    "REST subscribe GET": rest("GET", "/a2a/rest/tasks/{task}:subscribe"),
    "REST subscribe POST": rest("POST", "/a2a/rest/tasks/{task}:subscribe"),
    "REST send taskId": rest("POST", "/a2a/rest/message:send", V10_FOLLOW_UP),
    "REST stream taskId": rest("POST", "/a2a/rest/message:stream", V10_FOLLOW_UP),
    "v03 REST GET task": rest("GET", "/a2a/rest/v1/tasks/{task}"),
    "v03 REST cancel": rest("POST", "/a2a/rest/v1/tasks/{task}:cancel"),
    "v03 REST subscribe": rest("GET", "/a2a/rest/v1/tasks/{task}:subscribe"),
    "v03 REST send taskId": rest("POST", "/a2a/rest/v1/message:send", V03REST_FOLLOW_UP),
    "v03 REST stream taskId": rest("POST", "/a2a/rest/v1/message:stream", V03REST_FOLLOW_UP),
    "alias GET task": rest("GET", "/a2a/tasks/{task}"),
}
PUSH_ATTEMPTS: dict[str, Attempt] = {
    "v03 push set": rpc(
        "tasks/pushNotificationConfig/set", {"taskId": "{task}", "pushNotificationConfig": PUSH}
    ),
    "v03 push get": rpc("tasks/pushNotificationConfig/get", {"id": "{task}"}),
    "v03 push list": rpc("tasks/pushNotificationConfig/list", {"id": "{task}"}),
    "v03 push delete": rpc(
        "tasks/pushNotificationConfig/delete", {"id": "{task}", "pushNotificationConfigId": "c"}
    ),
    "v10 push create": rpc(
        "CreateTaskPushNotificationConfig", {"taskId": "{task}", "config": PUSH, "url": PUSH["url"]}, v10=True
    ),
    "v10 push get": rpc("GetTaskPushNotificationConfig", {"taskId": "{task}", "id": "c"}, v10=True),
    "v10 push list": rpc("ListTaskPushNotificationConfigs", {"taskId": "{task}"}, v10=True),
    "v10 push delete": rpc("DeleteTaskPushNotificationConfig", {"taskId": "{task}", "id": "c"}, v10=True),
    "REST push create": rest("POST", "/a2a/rest/tasks/{task}/pushNotificationConfigs", PUSH),
    "REST push list": rest("GET", "/a2a/rest/tasks/{task}/pushNotificationConfigs"),
    "REST push get": rest("GET", "/a2a/rest/tasks/{task}/pushNotificationConfigs/c"),
    "REST push delete": rest("DELETE", "/a2a/rest/tasks/{task}/pushNotificationConfigs/c"),
    "v03 REST push list": rest("GET", "/a2a/rest/v1/tasks/{task}/pushNotificationConfigs"),
}


def outcome(resp: httpx.Response, task_id: str) -> tuple[Any, ...]:
    """What the caller learns: HTTP status, error code or reason, and the message with the id masked.

    A v0.3 streaming method answers its early error as an event stream of that one response, no more.
    """
    if "text/event-stream" in resp.headers.get("content-type", ""):
        (body,) = sse_data(resp.text)
        assert set(body) == {"jsonrpc", "id", "error"}, f"a stream was opened: {resp.text}"
    else:
        body = resp.json()
    err = body.get("error", body) if isinstance(body, dict) else body
    assert isinstance(err, dict) and "message" in err, body
    code = err.get("code")
    reason = err["details"][0]["reason"] if "details" in err else None
    return resp.status_code, code, reason, err["message"].replace(task_id, "<id>")


NOT_FOUND = {-32001, 404}


@pytest.fixture(scope="module")
async def alice_and_bob(auth_server):
    async with (
        httpx.AsyncClient(base_url=auth_server.base_url, headers=key_of("alice"), timeout=15) as alice,
        httpx.AsyncClient(base_url=auth_server.base_url, headers=key_of("bob"), timeout=15) as bob,
    ):
        yield alice, bob


async def _send(c: httpx.AsyncClient, text: str, blocking: bool = True, **fields: Any) -> dict[str, Any]:
    params = {"message": text_message(text, **fields), "configuration": {"blocking": blocking}}
    body = (
        await c.post(
            "/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}
        )
    ).json()
    assert "result" in body, body
    return body["result"]


@pytest.fixture(scope="module")
async def alices_tasks(alice_and_bob) -> dict[str, dict[str, Any]]:
    """Three of alice's tasks: waiting for input, running (a long sleep), finished."""
    alice, _ = alice_and_bob
    tasks = {
        "waiting": await _send(alice, "ask:proceed?"),
        "running": await _send(alice, "sleep:600", blocking=False),
        "done": await _send(alice, "say:x"),
    }
    assert tasks["waiting"]["status"]["state"] == "input-required"
    assert tasks["done"]["status"]["state"] == "completed"
    yield tasks
    await alice.post(
        "/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": "tasks/cancel", "params": {"id": tasks["running"]["id"]}},
    )


@pytest.mark.parametrize("name", sorted(TASK_ATTEMPTS) + sorted(PUSH_ATTEMPTS))
async def test_bob_cannot_reach_alices_tasks(auth_server, alice_and_bob, alices_tasks, name):
    alice, bob = alice_and_bob
    attempt = TASK_ATTEMPTS.get(name) or PUSH_ATTEMPTS[name]
    card = (await bob.get("/.well-known/agent-card.json")).json()
    push_off = name in PUSH_ATTEMPTS and not card["capabilities"]["pushNotifications"]
    before = await db_state(auth_server.database_url)
    for which, task in alices_tasks.items():
        foreign = outcome(await attempt(bob, {"task": task["id"]}), task["id"])
        unknown_id = f"no-such-{uuid.uuid4().hex}"
        unknown = outcome(await attempt(bob, {"task": unknown_id}), unknown_id)
        assert foreign == unknown, f"{which}: someone else's task must look exactly like a missing one"
        if push_off:
            assert foreign[1] == -32003 or foreign[2] == "PUSH_NOTIFICATION_NOT_SUPPORTED", foreign
        else:
            assert foreign[1] in NOT_FOUND or foreign[2] == "TASK_NOT_FOUND", foreign
    assert await db_state(auth_server.database_url) == before
    for task in alices_tasks.values():
        mine = (await alice.get(f"/a2a/rest/tasks/{task['id']}")).json()
        assert mine["status"]["state"] != "TASK_STATE_CANCELED"


async def test_list_shows_only_ones_own(alice_and_bob, alices_tasks):
    alice, bob = alice_and_bob
    mine = {t["id"] for t in alices_tasks.values()}
    context = alices_tasks["done"]["contextId"]
    for path in ("/a2a/rest/tasks", "/a2a/tasks", f"/a2a/rest/tasks?contextId={context}"):
        bobs = (await bob.get(path)).json()["tasks"]
        assert not mine & {t["id"] for t in bobs}, path
        alices = (await alice.get(path)).json()["tasks"]
        assert all(t["id"] not in mine or t["contextId"] for t in alices)
    listed = (await alice.get("/a2a/rest/tasks?pageSize=100")).json()
    assert mine <= {t["id"] for t in listed["tasks"]}
    rpc_list = await bob.post(
        "/a2a/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"contextId": context}},
        headers=V10,
    )
    assert rpc_list.json()["result"]["tasks"] == [] and rpc_list.json()["result"]["totalSize"] == 0


async def test_a_context_id_is_per_principal(alice_and_bob, alices_tasks):
    """Bob naming alice's contextId gets a context of his own under that id: the send succeeds exactly as
    with an unused id (no existence oracle), and neither sees anything of the other's context."""
    alice, bob = alice_and_bob
    context = alices_tasks["done"]["contextId"]
    hers = {t["id"] for t in alices_tasks.values() if t["contextId"] == context}
    fresh = await _send(bob, "say:fresh", contextId=f"bob-{uuid.uuid4().hex}")
    joined = await _send(bob, "say:mine", contextId=context)
    assert joined["contextId"] == context
    assert joined["status"]["state"] == fresh["status"]["state"] == "completed"
    assert [m["parts"][0]["text"] for m in joined["history"]][:1] == ["say:mine"]
    rest = await bob.post(
        "/a2a/rest/message:send", json={"message": v10_message("say:rest", contextId=context)}
    )
    assert rest.status_code == 200, rest.text
    bobs = (await bob.get(f"/a2a/rest/tasks?contextId={context}")).json()
    assert {t["id"] for t in bobs["tasks"]} == {joined["id"], rest.json()["task"]["id"]}
    assert bobs["totalSize"] == 2
    alices = (await alice.get(f"/a2a/rest/tasks?contextId={context}")).json()
    assert {t["id"] for t in alices["tasks"]} == hers and alices["totalSize"] == len(hers)
    again = await _send(alice, "say:more", contextId=context)
    assert again["contextId"] == context and again["id"] not in {t["id"] for t in bobs["tasks"]}


async def test_two_principals_racing_on_one_new_context_both_succeed(alice_and_bob):
    alice, bob = alice_and_bob
    context = f"race-{uuid.uuid4().hex}"

    async def four(c: httpx.AsyncClient) -> list[dict[str, Any]]:
        # One after another: a context has one open task at a time (docs/protocol.md).
        return [await _send(c, "say:go", contextId=context) for _ in range(4)]

    results = [r for rs in await asyncio.gather(four(alice), four(bob)) for r in rs]
    assert all(r["contextId"] == context and r["status"]["state"] == "completed" for r in results)
    for i, c in enumerate((alice, bob)):
        listed = (await c.get(f"/a2a/rest/tasks?contextId={context}")).json()
        assert {t["id"] for t in listed["tasks"]} == {r["id"] for r in results[4 * i : 4 * i + 4]}
        assert listed["totalSize"] == 4


async def test_a_message_id_and_an_idempotency_key_are_per_principal(alice_and_bob):
    """Retries are recognised per owner: bob sending alice's messageId under alice's Idempotency-Key gets a
    task of his own (not hers, and not a "different body" refusal); alice's retry gets hers."""
    alice, bob = alice_and_bob
    mid, key = uuid.uuid4().hex, {"Idempotency-Key": uuid.uuid4().hex}

    async def send(c: httpx.AsyncClient, text: str) -> dict[str, Any]:
        params = {"message": text_message(text, messageId=mid)}
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}
        reply = (await c.post("/a2a/jsonrpc", json=body, headers=key)).json()
        assert "result" in reply, reply
        return reply["result"]

    a = await send(alice, "say:a")
    b = await send(bob, "say:b")
    assert a["id"] != b["id"]
    assert b["history"][0]["parts"][0]["text"] == "say:b"
    assert (await send(alice, "say:a"))["id"] == a["id"], "alice's retry under her key is her task"


@pytest.mark.cluster
async def test_forwarded_cancel_carries_the_owner(cluster_factory):
    """Across replicas: bob's cancel of alice's running task is TaskNotFound on every replica (nothing is
    forwarded to the holder), and alice's own cancel through a replica that does not hold it succeeds."""
    from tests.support.auth import api_keys_env

    cluster = await cluster_factory(replicas=2, **api_keys_env())
    async with (
        httpx.AsyncClient(base_url=cluster.urls[0], headers=key_of("alice"), timeout=15) as alice,
    ):
        task = await _send(alice, "sleep:600", blocking=False)
    for url in cluster.urls:
        async with httpx.AsyncClient(base_url=url, headers=key_of("bob"), timeout=15) as bob:
            resp = await bob.post(f"/a2a/rest/tasks/{task['id']}:cancel")
            assert resp.status_code == 404, resp.text
    for url in cluster.urls:
        async with httpx.AsyncClient(base_url=url, headers=key_of("alice"), timeout=15) as alice:
            got = (await alice.get(f"/a2a/rest/tasks/{task['id']}")).json()
            assert got["status"]["state"] == "TASK_STATE_WORKING"
    async with httpx.AsyncClient(base_url=cluster.urls[1], headers=key_of("alice"), timeout=15) as alice:
        resp = await alice.post(f"/a2a/rest/tasks/{task['id']}:cancel")
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"]["state"] == "TASK_STATE_CANCELED"

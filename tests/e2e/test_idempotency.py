"""messageId reuse and the Idempotency-Key header, on both databases and every binding that sends.

- A retry of a new message (same messageId, parts, taskId/contextId as sent) while its task is `submitted`
  or `working` attaches to that task; any other reuse of a messageId is a new message; a follow-up is never
  applied twice.
- `Idempotency-Key`: the same key and request give the task its first use made, as it stands, for
  IDEMPOTENCY_TTL_S, across restarts and replicas; the same key with another request is refused (-32602 over
  JSON-RPC, HTTP 422 over REST).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import InvalidParamsError
from httpx_sse import aconnect_sse
from sqlalchemy import select

from app.store.db import create_engine
from app.store.models import IdempotencyKeyRow
from tests.conftest import BACKENDS, make_server
from tests.e2e.test_rest import REST, V1, v03_message, v10_message
from tests.interop.test_interop_sdk import send_for_task, user_message
from tests.support.rpc import call, result, send, text_message
from tests.support.server import ServerProcess

WAIT_S = 30
NOT_BLOCKING = {"blocking": False}
BINDINGS = ["jsonrpc-0.3", "jsonrpc-1.0", "rest-1.0", "rest-0.3"]


def jsonrpc(method: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method}


def new_key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def stream_items(client: httpx.AsyncClient, path: str, body: dict, **kw: Any) -> list[dict[str, Any]]:
    async with aconnect_sse(client, "POST", path, json=body, **kw) as src:
        return [json.loads(sse.data) async for sse in src.aiter_sse()]


# ---- messageId reuse ----------------------------------------------------------------------------


async def test_retry_of_a_running_message_attaches_and_any_other_reuse_is_new(client):
    msg = text_message("sleep:600")
    first = await result(client, "message/send", {"message": msg, "configuration": NOT_BLOCKING})
    again = await result(client, "message/send", {"message": msg, "configuration": NOT_BLOCKING})
    assert again["id"] == first["id"], "the same message while its task runs is a retry"
    other_parts = {**msg, "parts": [{"kind": "text", "text": "sleep:601"}]}
    others = [await result(client, "message/send", {"message": other_parts, "configuration": NOT_BLOCKING})]
    assert others[0]["id"] != first["id"], "other parts: a new message"
    # The same messageId sent into the running task's context is a new message, not a retry: refused as
    # a second open task of that context (docs/protocol.md "One open task per context").
    other_context = {**msg, "contextId": first["contextId"]}
    refused = await call(client, "message/send", {"message": other_context, "configuration": NOT_BLOCKING})
    assert refused["error"]["code"] == -32602 and refused["error"]["data"]["taskId"] == first["id"], refused

    # A streamed retry follows the running task: its snapshot first, then its end.
    body = {"jsonrpc": "2.0", "id": 7, "method": "message/stream", "params": {"message": msg}}
    async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body) as src:
        events = src.aiter_sse()
        async with asyncio.timeout(WAIT_S):
            head = json.loads((await anext(events)).data)["result"]
            assert head["kind"] == "task" and head["id"] == first["id"]
            await result(client, "tasks/cancel", {"id": first["id"]})
            tail = [json.loads(sse.data)["result"] async for sse in events]
    assert tail[-1]["status"]["state"] == "canceled"

    later = await result(client, "message/send", {"message": msg, "configuration": NOT_BLOCKING})
    assert later["id"] != first["id"], "its first task has ended: the same messageId is a new message"
    for task in (later, *others):
        await result(client, "tasks/cancel", {"id": task["id"]})


async def test_concurrent_copies_of_a_blocking_send_run_once(client):
    # A copy attaches while its task runs (submitted, working); once the task asks, the same first message is
    # a new one. Fresh-clone run T (two runs beside a CPU hog) had the second copy conflict with the first's
    # retry key and look it up only after the task asked (its key cleared): a new task. The run now works for
    # a while first, so the copies sent together meet it running on any machine.
    msg = text_message("sleep:10;ask:Go?;chunks:3")
    a, b = await asyncio.gather(*(result(client, "message/send", {"message": msg}) for _ in range(2)))
    assert a["id"] == b["id"]
    assert a["status"]["state"] == b["status"]["state"] == "input-required", "the retry waited for the task"
    assert [m["role"] for m in a["history"]].count("user") == 1
    answer = text_message("yes", taskId=a["id"])
    done = await result(client, "message/send", {"message": answer})
    assert done["status"]["state"] == "completed"


async def test_a_burst_of_copies_of_an_instant_message_never_errors(client):
    """Copies of a message whose task ends at once keep conflicting with each other's retry key and then
    finding it finished: every copy still gets a task (attached, or a new message), never an error."""
    msg = text_message("hi")
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": msg}}
    answers = await asyncio.gather(*(client.post("/a2a/jsonrpc", json=body) for _ in range(48)))
    assert all(a.status_code == 200 for a in answers)
    errors = [a.json()["error"] for a in answers if "error" in a.json()]
    assert errors == []
    assert all(a.json()["result"]["status"]["state"] == "completed" for a in answers)


async def test_a_retried_follow_up_attaches_while_the_task_runs(client):
    task = await send(client, "ask:Go?;sleep:600")
    answer = text_message("go", taskId=task["id"])
    taken = await result(client, "message/send", {"message": answer, "configuration": NOT_BLOCKING})
    assert taken["status"]["state"] == "working"
    again = await result(client, "message/send", {"message": answer, "configuration": NOT_BLOCKING})
    assert again["id"] == task["id"] and again["status"]["state"] == "working"
    assert again["history"] == taken["history"], "the same follow-up is not applied again"
    await result(client, "tasks/cancel", {"id": task["id"]})


async def test_a_reused_follow_up_id_is_a_new_answer_when_the_task_waits_again(client):
    """Hard-coded messageIds: the task asks again, and the same id (even with the same text) answers it."""
    task = await send(client, "ask:A?;ask:B?;ask:C?")
    mid = str(uuid.uuid4())
    replies = []
    for text in ("y", "y", "n"):
        answer = text_message(text, taskId=task["id"], messageId=mid)
        replies.append(await result(client, "message/send", {"message": answer}))
    assert [r["status"]["state"] for r in replies] == ["input-required", "input-required", "completed"]
    answers = [m["parts"][0]["text"] for m in replies[-1]["history"] if m.get("messageId") == mid]
    assert answers == ["y", "y", "n"]


# ---- Idempotency-Key ------------------------------------------------------------------------------


def key_request(binding: str, text: str, mid: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    """(path, body, headers) of a blocking send in `binding`; each call is a new JSON-RPC request id."""
    rid = str(uuid.uuid4())
    if binding == "jsonrpc-0.3":
        params = {"message": text_message(text, messageId=mid)}
        return "/a2a/jsonrpc", {"jsonrpc": "2.0", "id": rid, "method": "message/send", "params": params}, {}
    if binding == "jsonrpc-1.0":
        params = {"message": v10_message(text, messageId=mid)}
        body = {"jsonrpc": "2.0", "id": rid, "method": "SendMessage", "params": params}
        return "/a2a/jsonrpc", body, {"A2A-Version": "1.0"}
    if binding == "rest-1.0":
        return f"{REST}/message:send", {"message": v10_message(text, messageId=mid)}, {}
    return f"{V1}/message:send", {"message": v03_message(text, messageId=mid)}, {}


def task_of(binding: str, resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    body = resp.json()
    if binding.startswith("jsonrpc"):
        assert "result" in body, body
        body = body["result"]
    return body.get("task", body)


def refusal(binding: str, resp: httpx.Response) -> str:
    """The message of an invalid-params refusal: -32602 over JSON-RPC, HTTP 422 over REST."""
    if binding.startswith("jsonrpc"):
        assert resp.status_code == 200, resp.text
        err = resp.json()["error"]
        assert err["code"] == -32602, err
        return err["message"]
    assert resp.status_code == 422, resp.text
    body = resp.json()
    return body["error"]["message"] if "error" in body else body["message"]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_idempotency_key_gives_the_same_task_and_refuses_another_body(client, binding):
    key, mid = new_key(), str(uuid.uuid4())
    path, body, headers = key_request(binding, "chunks:2", mid)
    first = task_of(binding, await client.post(path, json=body, headers={**headers, **key}))
    assert first["status"]["state"] in ("completed", "TASK_STATE_COMPLETED")

    path, body, headers = key_request(binding, "chunks:2", mid)
    again = task_of(binding, await client.post(path, json=body, headers={**headers, **key}))
    assert again == first, "the same key and request: that task as it stands, not run again"
    unkeyed = task_of(binding, await client.post(path, json=body, headers=headers))
    assert unkeyed["id"] != first["id"], "without the key, a finished task's messageId is a new message"

    path, body, headers = key_request(binding, "chunks:3", mid)
    refused = await client.post(path, json=body, headers={**headers, **key})
    assert "already used with a different request body" in refusal(binding, refused)


async def test_idempotency_key_on_a_follow_up_holds_after_the_task_ends(client):
    """Without the key, the same answer to a finished task is refused; under it, the task comes back."""
    key, task = new_key(), await send(client, "ask:Go?")
    body = {**jsonrpc("message/send"), "params": {"message": text_message("go", taskId=task["id"])}}
    done = (await client.post("/a2a/jsonrpc", json=body, headers=key)).json()["result"]
    assert done["status"]["state"] == "completed"
    again = (await client.post("/a2a/jsonrpc", json=body, headers=key)).json()
    assert again["result"] == done
    unkeyed = (await client.post("/a2a/jsonrpc", json=body)).json()
    assert unkeyed["error"]["code"] == -32004, "a finished task takes no follow-up"


async def test_concurrent_first_uses_of_a_key_run_one_request(client):
    """Two different requests under one new key at once: the database lets one store the key; the other
    is refused, whichever came first, and made no task."""
    key, context = new_key(), str(uuid.uuid4())

    async def send_one(text: str) -> dict[str, Any]:
        params = {"message": text_message(text, contextId=context)}
        return (
            await client.post("/a2a/jsonrpc", json={**jsonrpc("message/send"), "params": params}, headers=key)
        ).json()

    replies = await asyncio.gather(send_one("say:a"), send_one("say:b"))
    assert sorted("result" in r for r in replies) == [False, True], replies
    assert next(r for r in replies if "error" in r)["error"]["code"] == -32602
    listed = await client.get("/a2a/tasks", params={"contextId": context})
    assert [t["id"] for t in listed.json()["tasks"]] == [
        next(r for r in replies if "result" in r)["result"]["id"]
    ]


async def test_idempotency_key_on_a_stream(client):
    key, msg = new_key(), v10_message("chunks:2")
    events = await stream_items(client, f"{REST}/message:stream", {"message": msg}, headers=key)
    task_id = events[0]["task"]["id"]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    again = await stream_items(client, f"{REST}/message:stream", {"message": msg}, headers=key)
    assert [e["task"]["id"] for e in again] == [task_id], "the finished task as it stands, then the end"
    assert again[0]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # A plain send under the key with the same request gets the same task; another request is refused.
    same = await client.post(f"{REST}/message:send", json={"message": msg}, headers=key)
    assert task_of("rest-1.0", same)["id"] == task_id
    other = await client.post(
        f"{REST}/message:stream", json={"message": {**msg, "parts": [{"text": "x"}]}}, headers=key
    )
    assert "different request body" in refusal("rest-1.0", other)


@pytest.mark.parametrize("protocol", ["1.0", "0.3"])
async def test_sdk_client_retries_under_an_idempotency_key(server: ServerProcess, protocol: str):
    """The official client sends the header through its HTTP client; a retry gets the first task back."""
    async with httpx.AsyncClient(timeout=WAIT_S, headers=new_key()) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=False))
        if protocol == "1.0":
            sdk = await factory.create_from_url(server.base_url)
        else:
            card = await A2ACardResolver(http, server.base_url).get_agent_card()
            v03 = [i for i in card.supported_interfaces if i.protocol_version.startswith("0.3")]
            del card.supported_interfaces[:]
            card.supported_interfaces.extend(v03)
            sdk = factory.create(card)
        try:
            msg = user_message("chunks:2")
            first = await send_for_task(sdk, msg)
            again = await send_for_task(sdk, msg)
            assert again.id == first.id
            assert len(again.history) == len(first.history)
            with pytest.raises(InvalidParamsError, match="different request body"):
                await send_for_task(sdk, user_message("chunks:3"))
        finally:
            await sdk.close()


async def keyed_send(client: httpx.AsyncClient, text: str, key: str, mid: str) -> dict[str, Any]:
    params = {"message": text_message(text, messageId=mid)}
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}
    return (await client.post("/a2a/jsonrpc", json=body, headers={"Idempotency-Key": key})).json()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_keys_survive_a_restart_then_expire_and_are_cleaned_up(backend, tmp_path):
    srv = await make_server(backend, tmp_path)
    engine = create_engine(srv.database_url)

    async def stored_keys() -> set[str]:
        async with engine.connect() as conn:
            return set((await conn.execute(select(IdempotencyKeyRow.key))).scalars())

    k1, mid = f'"{uuid.uuid4()}"', str(uuid.uuid4())  # the draft's quoted form; the same key bare below
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=WAIT_S) as client:
            first = (await keyed_send(client, "chunks:2", k1, mid))["result"]
        srv.kill()
        srv.env["IDEMPOTENCY_TTL_S"] = "1"
        srv.start()
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=WAIT_S) as client:
            assert (await keyed_send(client, "chunks:2", k1.strip('"'), mid))["result"] == first
            refused = (await keyed_send(client, "chunks:9", k1, mid))["error"]
            assert refused["code"] == -32602 and "different request body" in refused["message"]

            # Under a 1 s TTL: expired keys are deleted while keys are in use, and an expired key is free.
            k2, k3 = str(uuid.uuid4()), str(uuid.uuid4())
            t2 = (await keyed_send(client, "say:two", k2, mid))["result"]
            await keyed_send(client, "say:three", k3, mid)
            async with asyncio.timeout(WAIT_S):
                while k3 in await stored_keys():
                    await keyed_send(client, "say:other", str(uuid.uuid4()), mid)
                    await asyncio.sleep(0.1)
            t = (await keyed_send(client, "say:two", k2, mid))["result"]
            assert t["id"] != t2["id"], "k2 expired before k3: the same request under it is new again"
            assert t["status"]["state"] == "completed"
        keys = await stored_keys()
        assert k1.strip('"') in keys, "stored under the old TTL, it has not expired"
        assert k2 in keys, "the reused key is stored anew"
    finally:
        await engine.dispose()
        srv.stop()


async def test_keys_retries_and_follow_ups_hold_across_replicas(cluster_factory):
    cluster = await cluster_factory(replicas=2)
    one, two = (httpx.AsyncClient(base_url=url, timeout=WAIT_S) for url in cluster.urls)
    async with one, two:
        key, mid = str(uuid.uuid4()), str(uuid.uuid4())
        first = (await keyed_send(one, "chunks:2", key, mid))["result"]
        assert (await keyed_send(two, "chunks:2", key, mid))["result"] == first
        assert (await keyed_send(two, "chunks:3", key, mid))["error"]["code"] == -32602

        running = text_message("sleep:600")
        a = await result(one, "message/send", {"message": running, "configuration": NOT_BLOCKING})
        b = await result(two, "message/send", {"message": running, "configuration": NOT_BLOCKING})
        assert b["id"] == a["id"], "a retry through another replica attaches to the running task"
        await result(two, "tasks/cancel", {"id": a["id"]})

        waiting = await send(one, "ask:Go?;sleep:600")
        answer = {"message": text_message("go", taskId=waiting["id"]), "configuration": NOT_BLOCKING}
        taken = await result(two, "message/send", answer)
        assert taken["status"]["state"] == "working"
        again = await result(one, "message/send", answer)
        assert again["history"] == taken["history"], "applied once, whichever replica it reached"
        await result(one, "tasks/cancel", {"id": waiting["id"]})


async def test_keyed_copies_of_an_answer_that_ends_the_task_all_get_it_on_any_replica(cluster_factory):
    """Copies of one keyed answer sent at once through the holder and another replica, while the answer
    ends the task at once: every copy gets the task, none is told the task has finished. The key is stored
    with the answer (on the holder, also for a forwarded one), so a copy that reaches the task after it
    ended finds it."""
    cluster = await cluster_factory(replicas=2)
    one, two = (httpx.AsyncClient(base_url=url, timeout=WAIT_S) for url in cluster.urls)
    async with one, two:
        for _ in range(3):
            waiting = await send(one, "ask:Go?")
            key, mid = new_key(), str(uuid.uuid4())
            params = {"message": text_message("go", taskId=waiting["id"], messageId=mid)}
            body = {**jsonrpc("message/send"), "params": params}
            replies = await asyncio.gather(
                *(c.post("/a2a/jsonrpc", json=body, headers=key) for c in (one, two) * 6)
            )
            answers = [r.json() for r in replies]
            assert [a.get("error") for a in answers if "error" in a] == []
            assert {a["result"]["id"] for a in answers} == {waiting["id"]}
            done = await result(one, "tasks/get", {"id": waiting["id"]})
            assert done["status"]["state"] == "completed"
            assert [m["messageId"] for m in done["history"] if m["role"] == "user"].count(mid) == 1

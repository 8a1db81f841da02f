"""SSE over a real socket: message/stream and tasks/resubscribe, read by a real SSE client."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from app.api.bindings.sse import FAREWELL
from tests.conftest import make_server
from tests.support.rpc import result, send, sse_data, text_message


async def collect(
    client,
    method: str,
    params: Any,
    rid: Any = 1,
    headers: dict | None = None,
    until=None,
    opened: asyncio.Event | None = None,
):
    """Read the whole SSE stream; returns (response, [(sse id, json data)]). `opened` is set at its first
    event."""
    body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    events: list[tuple[str, dict]] = []
    async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body, headers=headers or {}) as src:
        async for sse in src.aiter_sse():
            data = json.loads(sse.data)
            assert data["id"] == rid and data["jsonrpc"] == "2.0"
            events.append((sse.id, data["result"]))
            if opened is not None:
                opened.set()
            if until is not None and until(data["result"]):
                break
        return src.response, events


async def answer_when_asked(client, task_id: str, text: str = "go") -> None:
    """Answer the task once it waits on its user (`ask:`), without waiting for what follows."""
    async with asyncio.timeout(60):
        while (await result(client, "tasks/get", {"id": task_id}))["status"]["state"] != "input-required":
            await asyncio.sleep(0.02)
    answer = {"message": text_message(text, taskId=task_id), "configuration": {"blocking": False}}
    await result(client, "message/send", answer)


async def test_stream_events_in_order_with_kinds_and_ids(client):
    resp, events = await collect(
        client, "message/stream", {"message": text_message("tool:Read;chunks:3")}, rid=41
    )
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["cache-control"] == "no-cache"
    assert resp.headers["x-accel-buffering"] == "no"
    kinds = [e["kind"] for _, e in events]
    assert kinds[0] == "task" and events[0][1]["status"]["state"] == "submitted"
    assert all(k in {"status-update", "artifact-update"} for k in kinds[1:])
    seqs = [int(i) for i, _ in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "SSE ids are consecutive sequence numbers"
    status = [e for _, e in events if e["kind"] == "status-update"]
    assert [s["status"]["state"] for s in status] == ["working", "working", "working", "completed"]
    assert [s["final"] for s in status] == [False, False, False, True]
    assert status[1]["status"]["message"]["parts"][0]["text"] == "Using tool: Read"
    tool_out = status[2]["status"]["message"]["parts"][0]["text"]
    assert len(tool_out) == 200
    chunks = [
        e
        for _, e in events
        if e["kind"] == "artifact-update"
        and e["artifact"]["artifactId"] == events[-2][1]["artifact"]["artifactId"]
    ]
    # The last text chunk carries lastChunk when it arrives with the agent's done; else a closing chunk does.
    assert len(chunks) in (3, 4)
    assert [c["append"] for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert [c["lastChunk"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[0]["artifact"]["name"] == "assistant-response"
    assert "".join(p["text"] for c in chunks for p in c["artifact"]["parts"]) == "chunk-0 chunk-1 chunk-2 "
    assert all(e["taskId"] == events[0][1]["id"] for _, e in events[1:])


# A send's stream on each HTTP binding and version: (path, headers, body of a message with this text).
SEND_STREAMS = {
    "v03-jsonrpc": ("/a2a/jsonrpc", {}, lambda m: rpc_body("message/stream", {"message": m})),
    "v10-jsonrpc": (
        "/a2a/jsonrpc",
        {"A2A-Version": "1.0"},
        lambda m: rpc_body("SendStreamingMessage", {"message": v10(m)}),
    ),
    "v10-rest": ("/a2a/rest/message:stream", {"A2A-Version": "1.0"}, lambda m: {"message": v10(m)}),
    "v03-rest": ("/a2a/rest/v1/message:stream", {}, lambda m: {"message": v03_rest(m)}),
}


def rpc_body(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


def v10(m: dict[str, Any]) -> dict[str, Any]:
    return {**{k: v for k, v in m.items() if k != "kind"}, "role": "ROLE_USER"}


def v03_rest(m: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in v10(m).items() if k != "parts"}
    return {**out, "content": m["parts"]}


def unwrap(data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(kind, body) of one streamed item on any binding: v0.3 JSON-RPC `kind`, else the oneof's key."""
    data = data.get("result", data)
    if "kind" in data:
        return {"status-update": "statusUpdate", "artifact-update": "artifactUpdate"}.get(
            data["kind"], data["kind"]
        ), data
    (key, body), *_ = data.items()
    return key, body


def state(body: dict[str, Any]) -> str:
    """A state in any binding's spelling, as v1.0's enum name."""
    raw = body["status"]["state"]
    return raw if raw.startswith("TASK_STATE_") else "TASK_STATE_" + raw.upper().replace("-", "_")


async def read_stream(client, path: str, headers: dict, body: dict) -> list[tuple[str, dict[str, Any]]]:
    """Every item of the stream until the server ends it (bounded: a stream left open fails here)."""
    items: list[tuple[str, dict[str, Any]]] = []
    async with asyncio.timeout(30):
        async with aconnect_sse(client, "POST", path, json=body, headers=headers) as src:
            assert src.response.status_code == 200, await src.response.aread()
            async for sse in src.aiter_sse():
                items.append(unwrap(json.loads(sse.data)))
    return items


@pytest.mark.parametrize("binding", list(SEND_STREAMS))
async def test_a_sends_stream_ends_at_the_question_and_the_answers_at_the_end(client, binding: str):
    """The turn ends where the agent asks: the send's stream closes after the input-required update
    (v0.3: `final: true`), which every framework client waits for; the answer, sent as a stream too,
    follows the same task from `working` to its end."""
    path, headers, body = SEND_STREAMS[binding]
    asked = await read_stream(client, path, headers, body(text_message("say:first;ask:Which colour?")))
    assert asked[0][0] == "task"
    task = asked[0][1]
    kind, last = asked[-1]
    assert kind == "statusUpdate" and state(last) == "TASK_STATE_INPUT_REQUIRED", asked
    question = last["status"]["message"]
    assert [p["text"] for p in question.get("parts", question.get("content", []))] == ["Which colour?"]
    if binding.startswith("v03"):
        assert last["final"] is True
        updates = [b for k, b in asked[1:-1] if k == "statusUpdate"]
        assert all(not b.get("final", False) for b in updates)
    else:
        assert "final" not in last
    answer = text_message("blue", taskId=task["id"], contextId=task["contextId"])
    answered = await read_stream(client, path, headers, body(answer))
    assert answered[0][0] == "task" and answered[0][1]["id"] == task["id"]
    assert state(answered[0][1]) == "TASK_STATE_WORKING"
    kind, end = answered[-1]
    assert kind == "statusUpdate" and state(end) == "TASK_STATE_COMPLETED"
    texts = [
        p.get("text")
        for k, b in answered
        if k == "artifactUpdate"
        for p in b["artifact"].get("parts", b["artifact"].get("content", []))
    ]
    assert "answer:blue" in texts


async def test_a_subscriber_follows_the_task_through_its_question(client):
    """`tasks/resubscribe` is not a turn: it follows the task past input-required (not `final` there)
    to its end."""
    asked = await send(client, "ask:OK?")
    assert asked["status"]["state"] == "input-required"
    body = rpc_body("tasks/resubscribe", {"id": asked["id"]})
    seen: list[dict] = []
    async with asyncio.timeout(30):
        async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body) as src:
            it = src.aiter_sse()
            first = json.loads((await anext(it)).data)["result"]
            assert first["kind"] == "task" and first["status"]["state"] == "input-required"
            await result(
                client,
                "message/send",
                {"message": text_message("ok", taskId=asked["id"]), "configuration": {"blocking": False}},
            )
            async for sse in it:
                seen.append(json.loads(sse.data)["result"])
    status = [e for e in seen if e["kind"] == "status-update"]
    assert [(e["status"]["state"], e["final"]) for e in status] == [("working", False), ("completed", True)]
    texts = [p.get("text") for e in seen if e["kind"] == "artifact-update" for p in e["artifact"]["parts"]]
    assert "answer:ok" in texts


async def test_send_stream_until_terminal_keeps_the_stream_open_through_the_question(tmp_path):
    """SEND_STREAM_UNTIL=terminal (the behaviour before): the send's stream stays open at input-required
    (not `final`) and ends when the task does."""
    srv = await make_server("sqlite", tmp_path, SEND_STREAM_UNTIL="terminal")
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
            body = rpc_body("message/stream", {"message": text_message("ask:OK?")})
            seen: list[dict] = []
            async with asyncio.timeout(30):
                async with aconnect_sse(c, "POST", "/a2a/jsonrpc", json=body) as src:
                    it = src.aiter_sse()
                    async for sse in it:
                        ev = json.loads(sse.data)["result"]
                        seen.append(ev)
                        if ev["kind"] == "status-update" and ev["status"]["state"] == "input-required":
                            assert ev["final"] is False
                            break
                    answer = text_message("ok", taskId=seen[0]["id"])
                    await result(c, "message/send", {"message": answer, "configuration": {"blocking": False}})
                    async for sse in it:
                        seen.append(json.loads(sse.data)["result"])
        last = seen[-1]
        assert last["kind"] == "status-update" and last["status"]["state"] == "completed" and last["final"]
    finally:
        srv.stop()


async def test_failed_run_ends_stream_with_error_text(client):
    _, events = await collect(client, "message/stream", {"message": text_message("fail:no disk")})
    last = events[-1][1]
    assert last["status"]["state"] == "failed" and last["final"] is True
    assert last["status"]["message"]["parts"][0]["text"] == "no disk"


async def test_a_stopping_server_ends_each_sse_stream_with_a_farewell(tmp_path) -> None:
    """SIGTERM with streams open on both bindings: each stream ends at once with the comment asking for a
    resubscribe with Last-Event-ID and `retry: 500` (not cut by the server's shutdown timeout), and the
    server exits."""
    # Keep-alives far apart: nothing but the shutdown itself may wake the idle streams.
    srv = await make_server("sqlite", tmp_path, SSE_KEEPALIVE_S="60")
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as c:
            asked = await send(c, "ask:Wait?")
            rpc = {"jsonrpc": "2.0", "id": 1, "method": "tasks/resubscribe", "params": {"id": asked["id"]}}
            async with (
                c.stream("POST", "/a2a/jsonrpc", json=rpc) as one,
                c.stream(
                    "GET", f"/a2a/rest/tasks/{asked['id']}:subscribe", headers={"A2A-Version": "1.0"}
                ) as two,
            ):
                bodies = [one.aiter_text(), two.aiter_text()]
                firsts = [await anext(b) for b in bodies]
                assert all("data: " in f for f in firsts), firsts
                srv.proc.terminate()  # type: ignore[union-attr]
                rests = [[t async for t in b] for b in bodies]
            srv.proc.wait(timeout=30)  # type: ignore[union-attr]
    finally:
        srv.stop()
    for first, rest in zip(firsts, rests, strict=True):
        text = first + "".join(rest)
        assert text.endswith(f": {FAREWELL}\r\nretry: 500\r\n\r\n"), text[-300:]


async def test_keepalive_comments_while_idle(client):
    """A task that stays silent far longer than the test: the stream carries a keep-alive comment (read
    as it comes, within a deadline), then the task is canceled."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {"message": text_message("sleep:300")},
    }
    task_id = None
    async with client.stream("POST", "/a2a/jsonrpc", json=body) as resp, asyncio.timeout(60):
        async for line in resp.aiter_lines():
            if line.startswith("data:") and task_id is None:
                task_id = json.loads(line[5:])["result"]["id"]
            if line.startswith(":"):
                break
    assert task_id is not None, "the task's snapshot came first"
    await result(client, "tasks/cancel", {"id": task_id})


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        ("message/stream", {"message": {"messageId": "x"}}, -32602),
        ("message/stream", "not an object", -32600),
        ("tasks/resubscribe", {"id": "missing"}, -32001),
        ("tasks/resubscribe", {}, -32602),
    ],
)
async def test_v03_stream_errors_before_the_first_event_are_one_event(client, method, params, code):
    """v0.3 §3.3.1: a streaming method answers text/event-stream; an early error is its one event, then
    the stream ends."""
    body = {"jsonrpc": "2.0", "id": "s1", "method": method, "params": params}
    resp = await client.post("/a2a/jsonrpc", json=body, headers={"Accept": "text/event-stream"})
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    (event,) = sse_data(resp.text)
    assert event["id"] == "s1" and event["error"]["code"] == code and "result" not in event


async def test_v10_stream_errors_before_the_first_event_are_plain_responses(client):
    """v1.0 answers them as a2a-python 1.x does: an ordinary JSON-RPC response."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": "missing"}}
    resp = await client.post("/a2a/jsonrpc", json=body, headers={"A2A-Version": "1.0"})
    assert resp.headers["content-type"] == "application/json"
    assert resp.json()["error"]["code"] == -32001


async def test_resubscribe_to_running_task_gets_the_rest(client):
    # The task waits on its user until the subscription has its snapshot: it is running when it comes.
    task = await send(client, "ask:go?;chunks:2", blocking=False)
    opened = asyncio.Event()
    subscribed = asyncio.create_task(
        collect(client, "tasks/resubscribe", {"id": task["id"]}, rid="r", opened=opened)
    )
    await asyncio.wait_for(opened.wait(), 60)
    await answer_when_asked(client, task["id"])
    _, events = await asyncio.wait_for(subscribed, 60)
    assert events[0][1]["kind"] == "task" and events[0][1]["status"]["state"] != "completed"
    assert events[-1][1]["status"]["state"] == "completed"
    seqs = [int(i) for i, _ in events]
    assert seqs == sorted(set(seqs))


async def test_resubscribe_to_terminal_task_sends_it_once(client):
    task = await send(client, "say:x")
    _, events = await collect(client, "tasks/resubscribe", {"id": task["id"]})
    assert len(events) == 1
    assert events[0][1] == task


async def test_resubscribe_with_last_event_id_resumes_exactly(client):
    _, full = await collect(client, "message/stream", {"message": text_message("chunks:4")})
    task_id = full[0][1]["id"]
    cut = int(full[3][0])
    _, rest = await collect(client, "tasks/resubscribe", {"id": task_id}, headers={"Last-Event-ID": str(cut)})
    assert [int(i) for i, _ in rest] == [int(i) for i, _ in full if int(i) > cut]
    assert [e for _, e in rest] == [e for i, e in full if int(i) > cut]
    _, by_meta = await collect(client, "tasks/resubscribe", {"id": task_id, "metadata": {"lastEventId": cut}})
    assert by_meta == rest
    _, all_events = await collect(
        client, "tasks/resubscribe", {"id": task_id}, headers={"Last-Event-ID": "0"}
    )
    assert int(all_events[0][0]) == 1
    assert all_events[-1][1]["status"]["state"] == "completed"


async def test_resubscribe_live_with_cursor_while_running(client):
    body = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "message/stream",
        "params": {"message": text_message("say:a;ask:go?;say:b")},
    }
    first: list[tuple[str, dict]] = []
    async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body) as src:
        async for sse in src.aiter_sse():
            first.append((sse.id, json.loads(sse.data)["result"]))
            if first[-1][1]["kind"] == "artifact-update":
                break  # the client "drops" here, mid-task
    task_id = first[0][1]["id"]
    cursor = first[-1][0]
    # The task waits on its user until the resubscription is open: it resumes live, not from a finished log.
    opened = asyncio.Event()
    resumed = asyncio.create_task(
        collect(
            client, "tasks/resubscribe", {"id": task_id}, headers={"Last-Event-ID": cursor}, opened=opened
        )
    )
    await asyncio.wait_for(opened.wait(), 60)
    await answer_when_asked(client, task_id)
    _, rest = await asyncio.wait_for(resumed, 60)
    seqs = [int(i) for i, _ in first] + [int(i) for i, _ in rest]
    assert seqs == list(range(1, len(seqs) + 1)), "no event lost or repeated across the reconnect"
    assert rest[-1][1]["status"]["state"] == "completed"


async def test_many_concurrent_streams_get_identical_events(client):
    # The task waits on its user until all five streams are open: they follow it live.
    task = await send(client, "ask:go?;chunks:20", blocking=False)
    opened = [asyncio.Event() for _ in range(5)]
    streams_ = [
        asyncio.create_task(
            collect(client, "tasks/resubscribe", {"id": task["id"]}, headers={"Last-Event-ID": "0"}, opened=o)
        )
        for o in opened
    ]
    await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened)), 60)
    await answer_when_asked(client, task["id"])
    results = await asyncio.wait_for(asyncio.gather(*streams_), 60)
    streams = [[e for _, e in ev] for _, ev in results]
    assert all(s == streams[0] for s in streams)
    assert streams[0][-1]["status"]["state"] == "completed"

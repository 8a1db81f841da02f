"""Reads whose cost does not grow with the data, and that still answer exactly: totalSize across pages and
filters, a finished task's artifacts stored folded, history limits applied in the database, and resumes of
a long task from any cursor. On both databases (the `server` fixture)."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from sqlalchemy import text

from app.store.db import create_engine
from tests.e2e.test_streaming import collect
from tests.support.rpc import call, result, send, text_message

V10 = {"A2A-Version": "1.0"}


async def _list(client, **query: Any) -> dict[str, Any]:
    resp = await client.get("/a2a/rest/tasks", params={k: v for k, v in query.items() if v is not None})
    assert resp.status_code == 200, resp.text
    return resp.json()


async def _walk(client, page_size: int, between=None, **query: Any) -> tuple[list[str], list[int]]:
    """Every page of a listing: the ids in order and each page's totalSize; `between` runs after page 1."""
    ids: list[str] = []
    totals: list[int] = []
    token = None
    while True:
        page = await _list(client, pageSize=page_size, pageToken=token, **query)
        ids += [t["id"] for t in page["tasks"]]
        totals.append(page["totalSize"])
        token = page["nextPageToken"]
        if len(totals) == 1 and between is not None:
            await between()
        if not token:
            return ids, totals


async def _send_in(client, context: str, text_: str = "say:x") -> dict[str, Any]:
    return await result(client, "message/send", {"message": text_message(text_, contextId=context)})


async def _count(server, where: str = "") -> int:
    engine = create_engine(server.database_url)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(text(f"SELECT count(*) FROM tasks {where}"))).scalar_one()
    finally:
        await engine.dispose()


async def test_total_size_across_pages_and_filters(client, server):
    context = f"ctx-{uuid.uuid4().hex}"
    made = [(await _send_in(client, context))["id"] for _ in range(7)]
    made.append((await _send_in(client, context, "fail:no"))["id"])

    ids, totals = await _walk(client, 3, contextId=context)
    assert ids == list(reversed(made)) and totals == [8, 8, 8]

    everything, totals = await _walk(client, 100)
    assert totals == [await _count(server)] * len(totals) and set(made) <= set(everything)

    failed, totals = await _walk(client, 100, status="TASK_STATE_FAILED")
    assert made[-1] in failed and totals == [len(failed)] * len(totals)

    async def more() -> None:
        for _ in range(2):
            await _send_in(client, context)

    # Tasks created between pages: the counted totals (owner, context) are current on every page; the
    # state-filtered one is the count taken on its first page, carried by the token.
    ids, totals = await _walk(client, 3, between=more, contextId=context)
    assert totals == [8, 10, 10] and ids == list(reversed(made)), "new tasks come before the pages' keyset"
    before = (await _list(client, pageSize=1))["totalSize"]
    ids, totals = await _walk(client, 4, between=more, contextId=context, status="TASK_STATE_COMPLETED")
    assert totals == [9] * len(totals) and len(ids) == 9
    assert (await _list(client, pageSize=1))["totalSize"] == before + 2
    assert (await _list(client, contextId=context, status="TASK_STATE_COMPLETED"))["totalSize"] == 11

    v10 = (
        await client.post(
            "/a2a/jsonrpc",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "ListTasks",
                "params": {"contextId": context, "pageSize": 5},
            },
            headers=V10,
        )
    ).json()["result"]
    assert v10["totalSize"] == 12 and len(v10["tasks"]) == 5


async def test_a_finished_tasks_artifacts_are_stored_folded_and_read_the_same(client, server):
    _, events = await collect(
        client, "message/stream", {"message": text_message("tool:Read;chunks:40;stats")}
    )
    task_id = events[0][1]["id"]
    streamed = [e for _, e in events if e["kind"] == "artifact-update"]
    assert len(streamed) > 40, "the stream delivers every chunk"
    got = await result(client, "tasks/get", {"id": task_id})
    assert got["status"]["state"] == "completed"
    engine = create_engine(server.database_url)
    try:
        async with engine.begin() as conn:
            rows = (
                await conn.execute(
                    text("SELECT seq, append FROM artifacts WHERE task_id = :t ORDER BY seq"), {"t": task_id}
                )
            ).all()
            assert [r.seq for r in rows] == list(range(1, len(got["artifacts"]) + 1))
            assert not any(r.append for r in rows)
            # The same task as stored before tasks were folded at their end: one row per chunk, from the log.
            await conn.execute(text("DELETE FROM artifacts WHERE task_id = :t"), {"t": task_id})
            for seq, kind, body in (
                await conn.execute(
                    text("SELECT seq, kind, body FROM events WHERE task_id = :t ORDER BY seq"), {"t": task_id}
                )
            ).all():
                body = body if isinstance(body, dict) else orjson.loads(body)
                if kind == "artifact":
                    await conn.execute(
                        text(
                            "INSERT INTO artifacts (task_id, seq, artifact_id, append, body) "
                            "VALUES (:t, :s, :a, :p, :b)"
                        ),
                        {
                            "t": task_id,
                            "s": seq,
                            "a": body["artifact"]["artifactId"],
                            "p": body["append"],
                            "b": orjson.dumps(body["artifact"]).decode(),
                        },
                    )
    finally:
        await engine.dispose()
    assert await result(client, "tasks/get", {"id": task_id}) == got
    _, again = await collect(client, "tasks/resubscribe", {"id": task_id}, headers={"Last-Event-ID": "0"})
    assert [e for _, e in again if e["kind"] == "artifact-update"] == streamed


async def test_history_limits(client):
    task = await send(client, "ask:one;ask:two;ask:three")
    for answer in ("a", "b", "c"):
        msg = text_message(answer, taskId=task["id"], contextId=task["contextId"])
        task = await result(client, "message/send", {"message": msg})
    full = (await result(client, "tasks/get", {"id": task["id"]}))["history"]
    assert len(full) >= 7 and full[0]["parts"][0]["text"] == "ask:one;ask:two;ask:three"
    for n in range(len(full) + 2):
        got = await result(client, "tasks/get", {"id": task["id"], "historyLength": n})
        assert got.get("history", []) == (full[-n:] if n else []), n
        rest = (await client.get(f"/a2a/rest/tasks/{task['id']}", params={"historyLength": n})).json()
        assert len(rest.get("history", [])) == min(n, len(full))
    page = await _list(client, contextId=task["contextId"], historyLength=2)
    assert [m["messageId"] for m in page["tasks"][0]["history"]] == [m["messageId"] for m in full[-2:]]
    two = await send(
        client,
        "say:other",
    )
    ctx = task["contextId"]
    await result(client, "message/send", {"message": text_message("say:sibling", contextId=ctx)})
    page = await _list(client, contextId=ctx, historyLength=1)
    assert len(page["tasks"]) == 2 and all(len(t["history"]) == 1 for t in page["tasks"])
    assert two["id"] not in {t["id"] for t in page["tasks"]}


async def test_resubscribe_from_any_cursor_of_a_long_task(client):
    _, streamed = await collect(client, "message/stream", {"message": text_message("chunks:120")})
    task_id = streamed[0][1]["id"]
    _, full = await collect(client, "tasks/resubscribe", {"id": task_id}, headers={"Last-Event-ID": "0"})
    log = [(int(i), e) for i, e in full]
    last = log[-1][0]
    assert [s for s, _ in log] == list(range(1, last + 1)) and last > 120
    assert [e for _, e in log[-len(streamed) + 1 :]] == [e for _, e in streamed[1:]]
    for cursor in [1, *range(2, last, 9), last - 2, last - 1, last]:
        headers = {"Last-Event-ID": str(cursor)}
        _, rest = await collect(client, "tasks/resubscribe", {"id": task_id}, headers=headers)
        assert [(int(i), e) for i, e in rest] == log[cursor:], cursor
    missing = await call(
        client, "tasks/resubscribe", {"id": f"no-{uuid.uuid4().hex}", "metadata": {"lastEventId": 3}}
    )
    assert missing["error"]["code"] == -32001

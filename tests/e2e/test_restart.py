"""A restart loses nothing: tasks, history, artifacts and events survive `kill -9`.

Tasks that were running when the process died end `failed` with a reason; queued tasks run after the
restart; a task waiting for input can still be answered.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from httpx_sse import aconnect_sse

from tests.conftest import BACKENDS, make_server
from tests.support.rpc import result, send, text_message


async def events_from_start(client, task_id: str) -> list[tuple[str, dict]]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/resubscribe", "params": {"id": task_id}}
    out = []
    async with aconnect_sse(client, "POST", "/a2a/jsonrpc", json=body, headers={"Last-Event-ID": "0"}) as src:
        async for sse in src.aiter_sse():
            out.append((sse.id, json.loads(sse.data)["result"]))
    return out


async def wait_state(client, task_id: str, state: str) -> dict:
    async with asyncio.timeout(60):
        while True:
            task = await result(client, "tasks/get", {"id": task_id})
            if task["status"]["state"] == state:
                return task
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_kill_and_restart_loses_nothing(backend, tmp_path):
    srv = await make_server(backend, tmp_path, MAX_CONCURRENT_TASKS="2")
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            done = await send(client, "tool:Read;chunks:3;stats")
            done_events = await events_from_start(client, done["id"])
            waiting = await send(client, "ask:Continue?")
            running = await send(client, "sleep:600", blocking=False)
            await wait_state(client, running["id"], "working")
            queued = await send(client, "say:queued", blocking=False)
            assert (await result(client, "tasks/get", {"id": queued["id"]}))["status"]["state"] == "submitted"

        srv.kill()
        srv.start()

        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            assert await result(client, "tasks/get", {"id": done["id"]}) == done
            assert await events_from_start(client, done["id"]) == done_events

            lost = await result(client, "tasks/get", {"id": running["id"]})
            assert lost["status"]["state"] == "failed"
            assert "restarted" in lost["status"]["message"]["parts"][0]["text"]

            ran = await wait_state(client, queued["id"], "completed")
            assert "queued" in json.dumps(ran["artifacts"])

            still = await result(client, "tasks/get", {"id": waiting["id"]})
            assert still["status"]["state"] == "input-required"
            answered = await result(
                client, "message/send", {"message": text_message("yes", taskId=waiting["id"])}
            )
            assert answered["status"]["state"] == "completed"
            assert [m["role"] for m in answered["history"]] == ["user", "agent", "user"]
    finally:
        srv.stop()


LOAD_CLIENTS = 16
ANSWERED_BEFORE_KILL = 300


@pytest.mark.parametrize("backend", BACKENDS)
async def test_kill_under_load_loses_no_answered_send(backend, tmp_path):
    """`kill -9` in the middle of a load of blocking sends (16 at a time, to the echo agent, whose task and
    answer commit together): every send answered before the kill is stored after the restart exactly as it
    was answered. On SQLite, `make run`'s default, a commit is in the WAL file when it returns (WAL with
    synchronous=NORMAL: durable across a crash of the process, not across a power loss)."""
    srv = await make_server(backend, tmp_path, AGENT_ADAPTER="echo")
    answered: dict[str, dict] = {}
    killed = asyncio.Event()

    async def client_loop(i: int) -> None:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=60) as client:
            n = 0
            while not killed.is_set():
                n += 1
                try:
                    task = await send(client, f"load {i} {n}")
                except httpx.HTTPError:
                    assert killed.is_set(), "a send failed before the kill"
                    return
                assert task["status"]["state"] == "completed", task
                answered[task["id"]] = task

    loops = [asyncio.create_task(client_loop(i)) for i in range(LOAD_CLIENTS)]
    try:
        async with asyncio.timeout(300):
            while len(answered) < ANSWERED_BEFORE_KILL:
                assert not any(t.done() for t in loops), [t.exception() for t in loops if t.done()]
                await asyncio.sleep(0.01)
        killed.set()
        srv.kill()
        await asyncio.gather(*loops)
        srv.start()
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            for task_id, task in answered.items():
                assert await result(client, "tasks/get", {"id": task_id}) == task
    finally:
        killed.set()
        await asyncio.gather(*loops, return_exceptions=True)
        srv.stop()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_graceful_shutdown_ends_running_tasks_with_a_reason(backend, tmp_path):
    srv = await make_server(backend, tmp_path)
    try:
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            running = await send(client, "sleep:600", blocking=False)
            await wait_state(client, running["id"], "working")
            waiting = await send(client, "ask:Later?")
        srv.stop(must_be_graceful=True)
        srv.start()
        async with httpx.AsyncClient(base_url=srv.base_url, timeout=30) as client:
            ended = await result(client, "tasks/get", {"id": running["id"]})
            assert ended["status"]["state"] == "failed"
            assert "shut down" in ended["status"]["message"]["parts"][0]["text"]
            still = await result(client, "tasks/get", {"id": waiting["id"]})
            assert still["status"]["state"] == "input-required"
    finally:
        srv.stop()

"""Scale-out under failure, on real PostgreSQL, Redis, nginx and replica processes.

Every wait is on a condition (an event arriving, a state reached, a process gone), never a guessed sleep.
A failure that must hit a task mid-run holds the task on its user (`ask:`) until the failure is done, then
answers it; no test counts on a `sleep:` step outlasting the failure.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from app.tasks.service import CANCELED_BY_CLIENT
from tests.conftest import _fresh_pg_database
from tests.support.cluster import Cluster
from tests.support.rpc import text_message

FAST_QUEUE = {"QUEUE_POLL_S": "0.5"}
FAST_LEASES = {"LEASE_TTL_S": "3", **FAST_QUEUE}
"""Only for the tests about a killed replica's leases, which are voided two TTLs after its last renewal."""


async def rpc(base: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base, timeout=60) as c:
        body = (
            await c.post("/a2a/jsonrpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        ).json()
    assert "error" not in body, body
    return body["result"]


async def start_task(base: str, script: str) -> dict[str, Any]:
    return await rpc(
        base, "message/send", {"message": text_message(script), "configuration": {"blocking": False}}
    )


async def wait_for(base: str, task_id: str, states: set[str], within: float = 60) -> dict[str, Any]:
    async with asyncio.timeout(within):
        while True:
            task = await rpc(base, "tasks/get", {"id": task_id})
            if task["status"]["state"] in states:
                return task
            await asyncio.sleep(0.05)


class Reader:
    """An SSE client that keeps (seq, result) pairs and can reconnect with Last-Event-ID."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.events: list[tuple[int, dict[str, Any]]] = []
        self.got_event = asyncio.Event()

    @property
    def last_seq(self) -> int | None:
        return self.events[-1][0] if self.events else None

    def done(self) -> bool:
        return bool(self.events) and self.events[-1][1].get("final") is True

    async def read(self, base: str) -> bool:
        """Read one connection until it closes; True if it closed cleanly."""
        headers = {} if self.last_seq is None else {"Last-Event-ID": str(self.last_seq)}
        body = {"jsonrpc": "2.0", "id": 7, "method": "tasks/resubscribe", "params": {"id": self.task_id}}
        try:
            async with httpx.AsyncClient(base_url=base, timeout=60) as c:
                async with aconnect_sse(c, "POST", "/a2a/jsonrpc", json=body, headers=headers) as src:
                    async for sse in src.aiter_sse():
                        if not sse.data:
                            continue
                        data = json.loads(sse.data)
                        assert data["id"] == 7 and "result" in data, data
                        self.events.append((int(sse.id), data["result"]))
                        self.got_event.set()
        except (httpx.HTTPError, OSError):
            return False
        return True

    async def follow(self, bases: list[str], within: float = 60) -> None:
        """Read until the final event, reconnecting (through the next base) whenever a connection drops."""
        async with asyncio.timeout(within):
            i = 0
            while not self.done():
                await self.read(bases[i % len(bases)])
                i += 1

    def assert_complete(self) -> None:
        """Every event exactly once, in order, after the opening snapshot, ending with a final status."""
        seqs = [seq for seq, _ in self.events]
        body = self.events[1:]
        assert self.events[0][1]["kind"] == "task"
        assert [s for s, _ in body] == list(range(seqs[0] + 1, seqs[0] + 1 + len(body))), seqs
        assert all(e["kind"] in ("status-update", "artifact-update") for _, e in body)
        assert self.done()


async def answer(base: str, task_id: str, text: str = "go") -> dict[str, Any]:
    """Answer the task once it waits on its user (`ask:`), through `base`."""
    await wait_for(base, task_id, {"input-required"})
    return await rpc(base, "message/send", {"message": text_message(text, taskId=task_id)})


def chunk_texts(reader: Reader) -> list[str]:
    """The response text parts as the client saw them: the snapshot's, then every chunk after it."""
    snapshot = reader.events[0][1]
    texts = [
        p["text"]
        for a in snapshot["artifacts"]
        if a.get("name") == "assistant-response"
        for p in a["parts"]
        if "text" in p
    ]
    for _, e in reader.events[1:]:
        if e["kind"] == "artifact-update" and e["artifact"].get("name") in ("assistant-response", None):
            texts += [p["text"] for p in e["artifact"]["parts"] if "text" in p]
    return [t for t in texts if t]


async def test_stream_on_one_replica_while_the_task_runs_on_another(cluster_factory):
    cl = await cluster_factory(3)
    # The task waits on its user until the stream on the other replica is open: it is followed live.
    task = await start_task(cl.urls[0], "chunks:20;ask:go?;chunks:5")
    reader = Reader(task["id"])
    streaming = asyncio.create_task(reader.follow([cl.urls[1]]))
    await asyncio.wait_for(reader.got_event.wait(), 60)
    await answer(cl.urls[0], task["id"])
    await streaming
    reader.assert_complete()
    assert reader.events[-1][1]["status"]["state"] == "completed"
    assert chunk_texts(reader)[-5:] == [f"chunk-{i} " for i in range(5)]
    final = await rpc(cl.urls[2], "tasks/get", {"id": task["id"]})
    assert final["status"]["state"] == "completed"


async def test_killed_stream_replica_client_resumes_through_nginx_exactly_once(cluster_factory):
    cl = await cluster_factory(3)
    # The task waits on its user until the stream's replica is killed: the kill is always mid-stream.
    task = await start_task(cl.urls[0], "chunks:3;ask:go?;chunks:4;chunks:3")
    reader = Reader(task["id"])
    first = asyncio.create_task(reader.read(cl.urls[1]))
    await asyncio.wait_for(reader.got_event.wait(), 60)
    await asyncio.to_thread(cl.kill, 1)
    assert await first is False, "the stream was cut by the kill"
    assert not reader.done()
    await answer(cl.urls[0], task["id"])
    await reader.follow([cl.nginx_url])
    reader.assert_complete()
    assert reader.events[-1][1]["status"]["state"] == "completed"
    texts = chunk_texts(reader)
    assert texts == [f"chunk-{i} " for i in range(3)] + ["answer:go"] + [f"chunk-{i} " for i in range(4)] + [
        f"chunk-{i} " for i in range(3)
    ]


async def test_killed_runner_replica_fails_its_task_once_its_lease_is_void(cluster_factory):
    """A lease expires a TTL after the last renewal and is void a TTL after a reaper marked it: the task
    ends failed by another replica's reaper (its reason names the lease and the dead holder; nothing else
    could end it: its agent died with its replica)."""
    cl = await cluster_factory(3, **FAST_LEASES)
    task = await start_task(cl.urls[0], "say:started;sleep:600")
    await wait_for(cl.urls[1], task["id"], {"working"})
    reader = Reader(task["id"])
    streaming = asyncio.create_task(reader.follow([cl.urls[2], cl.nginx_url], within=120))
    await asyncio.wait_for(reader.got_event.wait(), 60)
    await asyncio.to_thread(cl.kill, 0)
    await streaming
    reader.assert_complete()
    last = reader.events[-1][1]
    assert last["status"]["state"] == "failed"
    reason = last["status"]["message"]["parts"][0]["text"]
    assert "a2a-1" in reason and "lease" in reason
    assert (await rpc(cl.nginx_url, "tasks/get", {"id": task["id"]}))["status"]["state"] == "failed"


async def test_queued_tasks_of_a_killed_replica_run_elsewhere(cluster_factory):
    cl = await cluster_factory(2, MAX_CONCURRENT_TASKS="1", **FAST_LEASES)
    blockers = [await start_task(cl.urls[i], "sleep:600") for i in range(2)]
    for b in blockers:
        await wait_for(cl.urls[0], b["id"], {"working"})
    queued = [await start_task(cl.urls[0], f"say:q{i}") for i in range(3)]
    for q in queued:
        assert (await rpc(cl.urls[0], "tasks/get", {"id": q["id"]}))["status"]["state"] == "submitted"
    await asyncio.to_thread(cl.kill, 0)
    # Free the survivor's only slot: the queue drains there.
    await rpc(cl.urls[1], "tasks/cancel", {"id": blockers[1]["id"]})
    for q in queued:
        done = await wait_for(cl.urls[1], q["id"], {"completed"}, within=60)
        assert done["status"]["state"] == "completed"
    lost = await wait_for(cl.urls[1], blockers[0]["id"], {"failed"})
    assert "lease" in lost["status"]["message"]["parts"][0]["text"]


async def test_redis_restart_mid_stream_loses_nothing(own_services, tmp_path):
    # Its own Redis: the shared one serves the other tests and is never restarted.
    db = await _fresh_pg_database(own_services.pg_url)
    cl = Cluster(db, own_services.redis_url, tmp_path / "cluster", 2)
    await asyncio.to_thread(cl.start)
    try:
        # The task waits on its user through the restart: what follows it is written after Redis is back.
        task = await start_task(cl.urls[0], "chunks:5;ask:go?;chunks:5;chunks:5")
        reader = Reader(task["id"])
        streaming = asyncio.create_task(reader.follow([cl.urls[1]]))
        await asyncio.wait_for(reader.got_event.wait(), 60)
        await asyncio.to_thread(own_services.restart_redis)
        await asyncio.to_thread(cl.wait_all_ready)
        assert not reader.done()
        await answer(cl.urls[0], task["id"])
        await streaming
    finally:
        await asyncio.to_thread(cl.stop)
    reader.assert_complete()
    assert reader.events[-1][1]["status"]["state"] == "completed"
    chunks = [f"chunk-{i} " for i in range(5)]
    assert chunk_texts(reader) == chunks + ["answer:go"] + chunks * 2


async def test_cancel_reaches_the_agent_on_another_replica(cluster_factory):
    """Forwarded to the holder over the bus, not taken over: a client's cancel is only ever forwarded (it
    fails if the holder does not answer), the holder writes the client's reason, and its run is stopped by
    the cancel, not by losing the task."""
    cl = await cluster_factory(3)
    task = await start_task(cl.urls[0], "sleep:600;say:too-late")
    await wait_for(cl.urls[0], task["id"], {"working"})
    canceled = await rpc(cl.urls[1], "tasks/cancel", {"id": task["id"]})
    assert canceled["status"]["state"] == "canceled"
    assert canceled["status"]["message"]["parts"][0]["text"] == CANCELED_BY_CLIENT
    again = await rpc(cl.urls[2], "tasks/get", {"id": task["id"]})
    assert again["status"]["state"] == "canceled"
    async with httpx.AsyncClient(base_url=cl.urls[0], timeout=30) as c, asyncio.timeout(60):
        while (await c.get("/healthz")).json()["runningAgents"]:
            await asyncio.sleep(0.05)
    assert "too-late" not in json.dumps(again["artifacts"])
    assert "Traceback" not in cl.log(0)
    assert "taken over" not in cl.log(0), cl.log(0)[-3000:]


async def test_answer_reaches_the_agent_waiting_on_another_replica(cluster_factory):
    cl = await cluster_factory(3)
    asked = await rpc(cl.urls[0], "message/send", {"message": text_message("ask:Deploy?;say:after")})
    assert asked["status"]["state"] == "input-required"
    done = await rpc(cl.urls[2], "message/send", {"message": text_message("ship it", taskId=asked["id"])})
    assert done["status"]["state"] == "completed"
    texts = [p.get("text") for a in done["artifacts"] for p in a["parts"]]
    assert "answer:ship it" in texts and "after" in texts
    assert [m["role"] for m in done["history"]][:3] == ["user", "agent", "user"]


async def test_many_tasks_with_a_small_concurrency_limit_all_complete(cluster_factory):
    cl = await cluster_factory(3, MAX_CONCURRENT_TASKS="2", **FAST_QUEUE)
    sends = [start_task(cl.nginx_url, f"sleep:0.2;say:t{i}") for i in range(30)]
    tasks = await asyncio.gather(*sends)
    finals = await asyncio.gather(*(wait_for(cl.nginx_url, t["id"], {"completed"}, within=90) for t in tasks))
    assert all(f["status"]["state"] == "completed" for f in finals)
    for i, f in enumerate(finals):
        assert f"t{i}" in json.dumps(f["artifacts"])


async def test_graceful_shutdown_sends_stream_clients_elsewhere(cluster_factory):
    cl = await cluster_factory(3)
    # The task waits on its user until the stream's replica has shut down: always mid-stream.
    task = await start_task(cl.urls[0], "chunks:2;ask:go?;chunks:2")
    reader = Reader(task["id"])
    first = asyncio.create_task(reader.read(cl.urls[1]))
    await asyncio.wait_for(reader.got_event.wait(), 60)
    await asyncio.to_thread(cl.terminate, 1, True)
    assert await first is True, "the stream ended cleanly, not cut"
    assert not reader.done()
    await answer(cl.urls[0], task["id"])
    await reader.follow([cl.nginx_url])
    reader.assert_complete()
    assert reader.events[-1][1]["status"]["state"] == "completed"


async def test_graceful_shutdown_of_the_runner_ends_its_task_with_a_reason(cluster_factory):
    replica = 0
    cl = await cluster_factory(2)
    task = await start_task(cl.urls[replica], "sleep:600")
    await wait_for(cl.urls[1], task["id"], {"working"})
    await asyncio.to_thread(cl.terminate, replica, True)
    ended = await rpc(cl.urls[1], "tasks/get", {"id": task["id"]})
    assert ended["status"]["state"] == "failed"
    assert "shut down" in ended["status"]["message"]["parts"][0]["text"]

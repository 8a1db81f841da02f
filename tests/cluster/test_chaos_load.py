"""Chaos under streaming load: a replica killed, Redis restarted, PostgreSQL restarted and down for 30 s.

One cluster (3 replicas behind nginx, the scripted agent streaming for tens of seconds) on a PostgreSQL and a
Redis of this test alone (tests/support/own_services.py: the shared ones are never stopped). Each fault hits a
wave of tasks mid-stream, each task followed by an SSE client that resumes with `Last-Event-ID` whenever its
connection drops. After each wave every task must be terminal and each client must have seen exactly the
task's event log after its snapshot: no gap, no duplicate. The figures are printed.

Every wait is on a condition; the only sleeps are the fault itself (PostgreSQL kept down for 30 s) and a
client's pause between reconnects.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from httpx_sse import aconnect_sse

from tests.conftest import _fresh_pg_database
from tests.interop.test_interop_grpc import error_info
from tests.support.cluster import Cluster
from tests.support.own_services import OwnServices
from tests.support.rpc import text_message
from tests.support.sse import ENDED, V10, v10_as_v03

TASKS_PER_WAVE = 9
PG_DOWN_S = 30.0
BURST = 3000
"""Chunks one task emits at once while PostgreSQL is down: more than a run buffers, so its agent is paused
by back-pressure until the database is back, and none of them may be lost."""


def streaming_script(seconds: float) -> str:
    """Two chunks every quarter second for about `seconds`."""
    return ";".join(["chunks:2", "sleep:0.25"] * int(seconds * 4))


@dataclass
class Client:
    """An SSE client of one task that reconnects (resuming by Last-Event-ID) until the final event.

    Over v0.3 JSON-RPC (`tasks/resubscribe`) or, with `version="1.0"`, v1.0 (`SubscribeToTask`, its
    results kept in the v0.3 shape by `v10_as_v03`). A v1.0 subscribe to a task that has ended meanwhile is
    refused (-32004: nothing left to subscribe to); the client then stops with `refused` set."""

    task_id: str
    version: str = "0.3"
    events: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    connections: int = 0
    streaming: asyncio.Event = field(default_factory=asyncio.Event)
    refused: bool = False

    def done(self) -> bool:
        """The final event seen (or a snapshot of a task that had already ended)."""
        if not self.events:
            return False
        last = self.events[-1][1]
        return last.get("final") is True or (last["kind"] == "task" and last["status"]["state"] in ENDED)

    async def _read(self, base: str) -> None:
        v10 = self.version == "1.0"
        last = self.events[-1][0] if self.events else None
        headers = {} if last is None else {"Last-Event-ID": str(last)}
        method = "tasks/resubscribe"
        if v10:
            headers.update(V10)
            method = "SubscribeToTask"
        body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"id": self.task_id}}
        async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(30, read=60)) as c:
            async with aconnect_sse(c, "POST", "/a2a/jsonrpc", json=body, headers=headers) as src:
                if src.response.headers.get("content-type", "").startswith("text/event-stream"):
                    self.connections += 1
                elif v10 and src.response.status_code == 200:
                    await src.response.aread()
                    if src.response.json().get("error", {}).get("code") == -32004:
                        self.refused = True
                        return
                async for sse in src.aiter_sse():
                    if not sse.data:
                        continue
                    data = json.loads(sse.data)
                    assert data["id"] == 7 and "result" in data, data
                    result = v10_as_v03(data["result"]) if v10 else data["result"]
                    self.events.append((int(sse.id), result))
                    self.streaming.set()

    async def follow(self, base: str) -> None:
        while not self.done() and not self.refused:
            try:
                await self._read(base)
            except (httpx.HTTPError, OSError):
                await asyncio.sleep(0.2)

    def seqs_after_snapshot(self) -> tuple[int, list[int]]:
        assert self.events and self.events[0][1]["kind"] == "task", self.events[:1]
        return self.events[0][0], [s for s, _ in self.events[1:]]


@dataclass
class Figures:
    tasks: int = 0
    completed: int = 0
    failed: int = 0
    stuck: int = 0
    lost: int = 0
    duplicated: int = 0
    reconnects: int = 0

    def add(self, other: Figures) -> None:
        for name in vars(self):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def line(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in vars(self).items())


async def rpc(
    base: str,
    method: str,
    params: dict[str, Any],
    within: float = 120,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A call that is retried while it fails (a replica gone, the database away), until `within`."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with asyncio.timeout(within), httpx.AsyncClient(base_url=base, timeout=30) as c:
        while True:
            try:
                resp = await c.post("/a2a/jsonrpc", json=body, headers=headers)
                if resp.status_code == 200 and "result" in resp.json():
                    return resp.json()["result"]
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)


async def event_log(pg_dsn: str, task_id: str) -> list[int]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch("SELECT seq FROM events WHERE task_id = $1 ORDER BY seq", task_id)
    finally:
        await conn.close()
    return [r["seq"] for r in rows]


async def run_wave(
    cl: Cluster,
    pg_dsn: str,
    name: str,
    scripts: list[str],
    fault: Callable[[], Awaitable[None]],
) -> tuple[Figures, dict[str, dict[str, Any]], list[Client]]:
    """Start the tasks, follow each through nginx, apply `fault` once all stream, then check each client's
    events against the task's event log."""
    clients: list[Client] = []
    following: list[asyncio.Task[None]] = []
    for script in scripts:
        send = {"message": text_message(script), "configuration": {"blocking": False}}
        task = await rpc(cl.nginx_url, "message/send", send)
        clients.append(Client(task["id"]))
        following.append(asyncio.create_task(clients[-1].follow(cl.nginx_url)))
    async with asyncio.timeout(60):
        await asyncio.gather(*(c.streaming.wait() for c in clients))
    early = [c.task_id for c in clients if c.events[0][1]["status"]["state"] in ENDED]
    assert not early, f"tasks ended before the fault: {early}"
    await fault()
    done, pending = await asyncio.wait(following, timeout=240)
    for t in pending:
        t.cancel()
    for t in done:
        t.result()
    figures = Figures(tasks=len(clients))
    finals: dict[str, dict[str, Any]] = {}
    for c in clients:
        final = await rpc(cl.nginx_url, "tasks/get", {"id": c.task_id, "historyLength": 0})
        finals[c.task_id] = final
        state = final["status"]["state"]
        if state == "completed":
            figures.completed += 1
        elif state == "failed":
            figures.failed += 1
        else:
            figures.stuck += 1
        log = await event_log(pg_dsn, c.task_id)
        assert log == list(range(1, len(log) + 1)), f"the event log of {c.task_id} has a hole: {log}"
        snapshot, seen = c.seqs_after_snapshot()
        expected = [s for s in log if s > snapshot]
        figures.lost += len(set(expected) - set(seen))
        figures.duplicated += len(seen) - len(set(seen))
        figures.reconnects += max(c.connections - 1, 0)
        if c.done():
            assert c.events[-1][1]["status"]["state"] == state
    print(f"\nchaos {name}: {figures.line()}")
    return figures, finals, clients


def reason(task: dict[str, Any]) -> str:
    return " ".join(p.get("text", "") for p in (task["status"].get("message") or {}).get("parts", []))


async def test_streams_survive_replica_redis_and_database_faults(own_services: OwnServices, tmp_path: Path):
    services = own_services
    db_url = await _fresh_pg_database(services.pg_url)
    pg_dsn = db_url.replace("postgresql+asyncpg://", "postgresql://")
    cl = Cluster(
        db_url,
        services.redis_url,
        tmp_path / "cluster",
        3,
        # The default-like 15 s: after the 30 s outage every live holder must renew within one TTL of a
        # reaper's mark while three replicas reconnect under the burst; wave 1 restarts its killed replica
        # under its own name, which recovers its tasks at once (no reaping needed).
        LEASE_TTL_S="15",
        QUEUE_POLL_S="0.5",
        DB_OUTAGE_GRACE_S="120",
        grpc=True,
    )
    await asyncio.to_thread(cl.start)
    total = Figures()
    try:
        # 1. kill -9 of a replica; it comes back under the same name.
        async def kill() -> None:
            await asyncio.to_thread(cl.kill, 0)
            await asyncio.to_thread(cl.start_replica, 0)

        figs, finals, _ = await run_wave(cl, pg_dsn, "kill -9", [streaming_script(10)] * TASKS_PER_WAVE, kill)
        total.add(figs)
        for task in finals.values():
            if task["status"]["state"] == "failed":
                assert "a2a-1" in reason(task) or "restarted" in reason(task), reason(task)

        # 2. Redis restarted (empty).
        async def redis_restart() -> None:
            await asyncio.to_thread(services.restart_redis)
            await asyncio.to_thread(cl.wait_all_ready)

        figs, _, _ = await run_wave(
            cl, pg_dsn, "redis restart", [streaming_script(8)] * TASKS_PER_WAVE, redis_restart
        )
        total.add(figs)
        assert figs.failed == 0

        # 3. PostgreSQL fast restart.
        async def pg_restart() -> None:
            await asyncio.to_thread(services.stop_pg)
            await asyncio.to_thread(services.start_pg)
            await asyncio.to_thread(cl.wait_all_ready)

        figs, _, clients = await run_wave(
            cl, pg_dsn, "postgres restart", [streaming_script(8)] * TASKS_PER_WAVE, pg_restart
        )
        total.add(figs)
        assert figs.failed == 0
        assert all(c.connections == 1 for c in clients), "a stream was cut by the database restart"

        # 4. PostgreSQL down for 30 s: unready, clean errors, streams held open, then everything goes on.
        async def pg_down() -> None:
            await asyncio.to_thread(services.stop_pg)
            await check_outage_answers(cl)
            await asyncio.sleep(PG_DOWN_S)
            await asyncio.to_thread(services.start_pg)
            await asyncio.to_thread(cl.wait_all_ready)

        scripts = [streaming_script(12)] * (TASKS_PER_WAVE - 1) + [
            f"say:burst;sleep:4;chunks:{BURST};say:end"
        ]
        figs, finals, clients = await run_wave(cl, pg_dsn, "postgres down 30 s", scripts, pg_down)
        total.add(figs)
        assert figs.failed == 0
        assert all(c.connections == 1 for c in clients), "a stream was cut by the database outage"
        burst = clients[-1]
        texts = [
            p["text"]
            for _, e in burst.events[1:]
            if e["kind"] == "artifact-update"
            for p in e["artifact"]["parts"]
        ]
        assert [t for t in texts if t.startswith("chunk-")] == [f"chunk-{i} " for i in range(BURST)]
    finally:
        print(f"\nchaos total: {total.line()}")
        await asyncio.to_thread(cl.stop)
    assert (total.stuck, total.lost, total.duplicated) == (0, 0, 0)
    for i in range(3):
        log = cl.log(i)
        assert "Task exception was never retrieved" not in log


async def check_outage_answers(cl: Cluster) -> None:
    """While the database is down: /readyz 503, /healthz 200, and a call gets a clean error naming the cause
    (JSON-RPC -32603 in HTTP 503 with Retry-After; REST 503 with Retry-After; gRPC UNAVAILABLE with the
    ErrorInfo reason UNAVAILABLE), not a hang."""
    async with httpx.AsyncClient(base_url=cl.urls[1], timeout=30) as c:
        async with asyncio.timeout(30):
            while (await c.get("/readyz")).status_code != 503:
                await asyncio.sleep(0.1)
        ready = await c.get("/readyz")
        assert "database" in ready.json()["reason"]
        assert (await c.get("/healthz")).status_code == 200
        body = {"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"id": "no-such-task"}}
        resp = await c.post("/a2a/jsonrpc", json=body)
        assert resp.status_code == 503, resp.text
        assert int(resp.headers["retry-after"]) > 0
        err = resp.json()["error"]
        assert err["code"] == -32603 and "database" in err["message"].lower(), err
        rest = await c.get("/a2a/tasks/no-such-task")
        assert rest.status_code == 503 and int(rest.headers["retry-after"]) > 0, rest.text
        assert "database" in rest.text.lower()
        v10 = {"A2A-Version": "1.0"}
        body = {"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {"id": "no-such-task"}}
        resp = await c.post("/a2a/jsonrpc", json=body, headers=v10)
        assert resp.status_code == 503 and int(resp.headers["retry-after"]) > 0, resp.text
        err = resp.json()["error"]
        assert err["code"] == -32603 and err["data"][0]["reason"] == "UNAVAILABLE", err
        rest = await c.get("/a2a/rest/tasks/no-such-task", headers=v10)
        assert rest.status_code == 503 and int(rest.headers["retry-after"]) > 0, rest.text
        assert rest.json()["error"]["status"] == "UNAVAILABLE", rest.text
    async with grpc.aio.insecure_channel(f"127.0.0.1:{cl.replicas[1].grpc_port}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as away:
            await a2a_pb2_grpc.A2AServiceStub(ch).GetTask(
                a2a_pb2.GetTaskRequest(id="no-such-task"), timeout=30
            )
    assert away.value.code() == grpc.StatusCode.UNAVAILABLE, away.value
    assert "database" in away.value.details().lower()
    info = error_info(away.value)
    assert info.reason == "UNAVAILABLE" and int(info.metadata["retryAfter"]) > 0

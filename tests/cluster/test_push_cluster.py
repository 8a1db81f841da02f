"""Push delivery across replicas: a webhook registered on one replica gets the events another one writes,
and a replica killed in the middle of a delivery loses nothing (another takes its claim over).

Real PostgreSQL, Redis and replica processes, and a real receiver on loopback; every wait is on a condition.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx

from tests.e2e.test_push import PUSH_ENV
from tests.support.receiver import Receiver
from tests.support.rpc import text_message

CLUSTER_ENV = {**PUSH_ENV, "PUSH_CLAIM_TTL_S": "6", "QUEUE_POLL_S": "0.5"}
"""A dead replica's claim is taken over a TTL after its last renewal; a live one's renewals (every TTL/3) may
come late on a busy machine without more harm than a duplicate delivery. The task's lease is the default:
it has ended before the kill."""


async def rpc(base: str, method: str, params: dict[str, Any], v10: bool = False) -> Any:
    headers = {"A2A-Version": "1.0"} if v10 else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with httpx.AsyncClient(base_url=base, timeout=60) as c:
        out = (await c.post("/a2a/jsonrpc", json=body, headers=headers)).json()
    assert "error" not in out, out
    return out["result"]


async def claimed_by(database_url: str) -> str | None:
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        return await conn.fetchval("SELECT claimed_by FROM push_configs WHERE claimed_by IS NOT NULL LIMIT 1")
    finally:
        await conn.close()


def states(rec: Receiver, path: str) -> list[str]:
    """The states notified, each once, in the order they first arrived (delivery is at least once)."""
    seen: list[str] = []
    for call in rec.at(path):
        state = call.body["statusUpdate"]["status"]["state"] if "statusUpdate" in call.body else None
        if state and state not in seen:
            seen.append(state)
    return seen


async def test_replica_killed_mid_delivery_loses_nothing(cluster_factory):
    rec = Receiver()
    try:
        cluster = await cluster_factory(replicas=2, **CLUSTER_ENV)
        a, b = cluster.urls
        task = await rpc(a, "message/send", {"message": text_message("ask:Go?;say:after")})
        assert task["status"]["state"] == "input-required"

        # Registered on B while A holds the task: A learns of it and notifies from then on.
        rec.hold()
        path = "/hook/cluster"
        hook = {"taskId": task["id"], "id": "k", "url": rec.url(path), "token": "t"}
        await rpc(b, "CreateTaskPushNotificationConfig", hook, v10=True)
        answered = await rpc(b, "message/send", {"message": text_message("yes", taskId=task["id"])})
        assert answered["id"] == task["id"]

        async with asyncio.timeout(60):
            while (holder := await claimed_by(cluster.database_url)) is None:
                await asyncio.sleep(0.05)
        victim = next(r.index for r in cluster.replicas if r.replica_id == holder)
        cluster.kill(victim)
        survivor = cluster.urls[1 - victim]
        rec.release()

        await rec.wait_for(lambda: "TASK_STATE_COMPLETED" in states(rec, path), timeout=60)
        assert states(rec, path) == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
        artifacts = [c.body for c in rec.at(path) if "artifactUpdate" in c.body]
        assert any("after" in str(x) for x in artifacts)
        assert all(c.headers["authorization"] == "Bearer t" for c in rec.at(path))
        async with httpx.AsyncClient(base_url=survivor, timeout=30) as c:
            health = (await c.get("/healthz")).json()
        assert health["push"]["delivered"] >= 1, "the survivor delivered what the dead replica held"
    finally:
        rec.close()

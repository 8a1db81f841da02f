"""Checkpoints across a remote worker: a real server process (SQLite) runs the role `default` (echo); the
role `keeper` (the checkpoint test agent, `tests.support.agents.checkpointer`) runs only in real `a2a-server
worker` processes, whose runs keep their checkpoints through `TaskContext.checkpoints` over the worker
endpoints.

A run on the worker saves a checkpoint and reads it back; it is in the server's database under the task's
owner (alice), with the worker as its holder, within the server's CHECKPOINT_MAX_MB. A worker stopped with
SIGTERM drains its working run (the agent's drain hook saves a last checkpoint) and hands the task back
(`POST /workers/v1/tasks/{id}/requeue`): a second worker claims it, its run is told it goes on (attempt 2,
from the first worker) and finds the drained checkpoint, and the task completes. The drain outlasts the
lease's TTL: the stopping worker keeps its leases renewed until it has handed the task back. A worker killed
with SIGKILL has its task handed on by the server's reaper, and the next worker goes on from its last
checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from app.api.edge.auth import hash_key
from app.store.run_checkpoints import RunCheckpoints
from tests.conftest import make_server
from tests.support.auth import api_keys_env, key_of
from tests.support.rpc import text_message
from tests.support.secrets import remember
from tests.support.server import ServerProcess
from tests.support.worker import WorkerProcess, until_listed

AGENTS = {
    "default": {"adapter": "echo"},
    "keeper": {"adapter": "tests.support.agents.checkpointer:CheckpointAgent", "card": {"name": "Keeper"}},
}
WORKER_KEY = "keeper-" + os.urandom(8).hex()
remember(WORKER_KEY)
DEADLINE_S = 90
POLL_S = 0.1
CAP_MB = 1.0
DRAIN_S = 14
"""How long the drained agent takes to stop and save: beyond the lease's two TTLs."""


@pytest.fixture(scope="module")
async def server(tmp_path_factory: Any) -> AsyncIterator[ServerProcess]:
    srv = await make_server(
        "sqlite",
        tmp_path_factory.mktemp("worker-checkpoints") / "server",
        **api_keys_env(
            AGENTS=json.dumps(AGENTS),
            AGENT_ROLES="default",
            WORKER_KEYS=json.dumps({hash_key(WORKER_KEY): "box"}),
            DISCOVERY_HEARTBEAT_S="1",
            DISCOVERY_MAX_AGE_S="10",
            # A handed-on task waits for the second worker, however slowly it starts on a busy machine.
            ROLE_WAIT_S="120",
            # A worker's lease is void about twice LEASE_TTL_S after its last renewal: the drain below takes
            # longer, so the task goes on from the drained checkpoint only if the worker renews meanwhile.
            LEASE_TTL_S="5",
            CHECKPOINT_MAX_MB=str(CAP_MB),
        ),
    )
    yield srv
    srv.stop()


def keeper(srv: ServerProcess, tmp: Path, instance: str) -> WorkerProcess:
    """A worker of the role `keeper` (started: `until_listed` says when it serves)."""
    w = WorkerProcess(
        srv.base_url, tmp / f"{instance}.log", instance, key=WORKER_KEY, agents=AGENTS, role="keeper", slots=2
    )
    w.start()
    return w


async def rpc(c: httpx.AsyncClient, method: str, params: Any) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    resp = await c.post("/agents/keeper/a2a/jsonrpc", json=body, headers=key_of("alice"))
    assert resp.status_code == 200 and "result" in resp.json(), resp.text
    return resp.json()["result"]


async def send(c: httpx.AsyncClient, plan: dict[str, Any]) -> str:
    params = {"message": text_message(json.dumps(plan)), "configuration": {"blocking": False}}
    return str((await rpc(c, "message/send", params))["id"])


async def until(c: httpx.AsyncClient, task_id: str, done: Any) -> dict[str, Any]:
    """The task once `done(task)` holds."""
    async with asyncio.timeout(DEADLINE_S):
        while not done(task := await rpc(c, "tasks/get", {"id": task_id})):
            await asyncio.sleep(POLL_S)
    return task


def ended(task: dict[str, Any]) -> bool:
    return task["status"]["state"] in ("completed", "failed", "canceled", "rejected")


def holding(task: dict[str, Any]) -> bool:
    """The run saved its first checkpoint and waits (`hold`)."""
    return (task["status"].get("message") or {}).get("parts") == [{"kind": "text", "text": "holding"}]


def final(task: dict[str, Any]) -> dict[str, Any]:
    assert task["status"]["state"] == "completed", task["status"]
    return dict(json.loads(task["status"]["message"]["parts"][0]["text"]))


async def stored(srv: ServerProcess, task_id: str, owner: str) -> tuple[bytes, dict[str, Any], str] | None:
    """The task's checkpoint as the server's database holds it for `owner`."""
    engine = create_async_engine(srv.database_url)
    try:
        found = await RunCheckpoints(engine, int(CAP_MB * 1024 * 1024)).load(task_id, owner)
    finally:
        await engine.dispose()
    return None if found is None else (found.data, found.manifest, found.holder)


async def test_a_workers_run_saves_its_checkpoint_under_the_tasks_owner(
    server: ServerProcess, tmp_path: Path
):
    w1 = keeper(server, tmp_path, "w1")
    try:
        await until_listed(server.base_url, "keeper", True, headers=key_of("alice"))
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as c:
            task_id = await send(c, {"save": "first state"})
            out = final(await until(c, task_id, ended))
    finally:
        w1.stop()
    manifest = {"step": "first", "text": "first state"}
    assert out == {
        "data": "first state",
        "manifest": manifest,
        "holder": "worker:box:w1",
        "maxBytes": int(CAP_MB * 1024 * 1024),
    }, f"the run read back what it saved; worker log:\n{w1.log()[-3000:]}"
    assert await stored(server, task_id, "alice") == (b"first state", manifest, "worker:box:w1")
    assert await stored(server, task_id, "box") is None, "never under the worker's principal"


async def test_a_drained_worker_hands_its_task_to_the_next(server: ServerProcess, tmp_path: Path):
    w1 = keeper(server, tmp_path, "w1")
    w2: WorkerProcess | None = None
    try:
        await until_listed(server.base_url, "keeper", True, headers=key_of("alice"))
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as c:
            task_id = await send(c, {"save": "before", "hold": True, "drainS": DRAIN_S})
            await until(c, task_id, lambda t: holding(t) or ended(t))
            w2 = keeper(server, tmp_path, "w2")
            w1.stop()  # SIGTERM: the run is drained and its task handed back
            task = await until(c, task_id, ended)
            out = final(task)
    finally:
        w1.stop()
        if w2 is not None:
            w2.stop()
    logs = f"w1:\n{w1.log()[-3000:]}\nw2:\n{w2.log()[-3000:] if w2 else ''}"
    assert out == {
        "data": "drained",
        "manifest": {"step": "drain"},
        "holder": "worker:box:w1",
        "resumed": {"attempt": 2, "previous": "worker box:w1"},
    }, logs
    assert [a["attempt"] for a in task["metadata"]["attempts"]] == [2]
    texts = [p.get("text", "") for m in task.get("history", []) for p in m["parts"]]
    assert any("Worker box:w1 shut down" in t for t in texts), texts
    assert any(t.startswith("Worker box:w2 goes on") for t in texts), texts


async def test_a_killed_workers_task_goes_on_from_its_last_checkpoint(server: ServerProcess, tmp_path: Path):
    """`kill -9` after the first checkpoint: the server's reaper hands the task on (the worker's lease void),
    and a second worker goes on from what the first saved."""
    w1 = keeper(server, tmp_path, "k1")
    w2: WorkerProcess | None = None
    try:
        await until_listed(server.base_url, "keeper", True, headers=key_of("alice"))
        async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as c:
            task_id = await send(c, {"save": "saved before the crash", "hold": True})
            await until(c, task_id, lambda t: holding(t) or ended(t))
            w2 = keeper(server, tmp_path, "k2")
            w1.kill()
            task = await until(c, task_id, ended)
    finally:
        w1.stop()
        if w2 is not None:
            w2.stop()
    logs = f"k1:\n{w1.log()[-3000:]}\nk2:\n{w2.log()[-3000:] if w2 else ''}"
    assert final(task) == {
        "data": "saved before the crash",
        "manifest": {"step": "first", "text": "saved before the crash"},
        "holder": "worker:box:k1",
        "resumed": {"attempt": 2, "previous": "worker box:k1"},
    }, logs
    texts = [p.get("text", "") for m in task.get("history", []) for p in m["parts"]]
    assert any("Worker box:k1 running this task stopped renewing its lease" in t for t in texts), texts
    assert any(t.startswith("Worker box:k2 goes on") for t in texts), texts

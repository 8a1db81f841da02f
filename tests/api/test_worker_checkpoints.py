"""A remote worker's checkpoints over the worker endpoints, the app in process (its lifespan run, httpx over
ASGI) on SQLite: the role `coder` runs at no replica here, the test claims its tasks as workers do.

`PUT`/`GET /workers/v1/tasks/{id}/checkpoint` round-trip the archive and its manifest, stored under the
task's owner with the worker as its holder; only the worker instance holding the running task reaches it
(another instance, another principal's worker, an ended or unknown task: 409, nothing read or changed); an
archive over CHECKPOINT_MAX_MB is 413 and stores nothing, declared or streamed; a body that is not a
checkpoint is 400; none is 404; a corrupt stored one is a clear 422. The worker's own `RemoteCheckpoints`
says the same as `CheckpointError`. `POST /workers/v1/tasks/{id}/requeue` hands a working task with a
checkpoint back to the queue, where another worker claims it to go on (`TaskContext.resumed`'s marker).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.agents.checkpoints import CheckpointError
from app.api.edge.auth import hash_key
from app.main import create_app
from app.protocol.attempts import resume_of
from app.protocol.events import status_update
from app.protocol.model import TaskState
from app.runner.remote import Server
from app.runner.remote_checkpoints import RemoteCheckpoints
from app.settings import Settings
from app.store.run_checkpoints import RunCheckpoints
from app.store.tables import task_checkpoints
from app.tasks.worker_wire import CHECKPOINT_TYPE, checkpoint_from_wire, checkpoint_to_wire, events_to_wire
from tests.conftest import migrated_database_url
from tests.support.auth import KEYS, key_of
from tests.support.rpc import send_request
from tests.support.secrets import remember

BOX = "wk-box-" + os.urandom(8).hex()
OTHER = "wk-other-" + os.urandom(8).hex()
remember(BOX, OTHER)
CAP_MB = 0.002
CAP = int(CAP_MB * 1024 * 1024)
"""The server's CHECKPOINT_MAX_MB here, in bytes (2,097): above MAX_BODY_BYTES, which it passes."""
MANIFEST = {"adapter": "claude-code", "session": "s-1", "workspace": "/w/ctx", "files": ["a", "b"]}


@dataclass
class Replica:
    app: FastAPI
    client: httpx.AsyncClient
    engine: AsyncEngine


@pytest.fixture(scope="module")
async def replica(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Replica]:
    url = await migrated_database_url("sqlite", tmp_path_factory.mktemp("worker-checkpoints"))
    settings = Settings(
        _env_file=None,
        database_url=url,
        redis_url=None,
        grpc_port=0,
        auth_mode="required",
        api_keys={hash_key(key): name for name, key in KEYS.items()},
        worker_keys={hash_key(BOX): "box", hash_key(OTHER): "other"},
        agents={"default": {"adapter": "echo"}, "coder": {"adapter": "scripted"}},
        agent_roles="default",
        role_wait_s=600,
        checkpoint_max_mb=CAP_MB,
        max_body_bytes=1024,
        resume_attempts=2,
    )
    app = create_app(settings)
    engine = create_async_engine(url)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replica") as c:
            yield Replica(app, c, engine)
    await engine.dispose()


def ask(instance: str = "i1") -> dict[str, str]:
    return {"role": "coder", "instance": instance}


def worker(key: str = BOX) -> dict[str, str]:
    return {"X-API-Key": key}


async def claimed(c: httpx.AsyncClient, instance: str = "i1") -> dict[str, Any]:
    """A new task of alice's, claimed by the worker `box:<instance>`: the claim's entry."""
    body = send_request("work", {"blocking": False})
    task = (await c.post("/agents/coder/a2a/jsonrpc", json=body, headers=key_of("alice"))).json()["result"]
    got = await c.post("/workers/v1/claim", json={**ask(instance), "limit": 1}, headers=worker())
    assert got.status_code == 200, got.text
    tasks = got.json()["tasks"]
    assert [t["task"]["id"] for t in tasks] == [task["id"]]
    return tasks[0]


async def working(c: httpx.AsyncClient, entry: dict[str, Any], instance: str = "i1", **extra: Any) -> int:
    """The worker records its run's first status (or the one given); the task's last event number."""
    t = entry["task"]
    state = extra.get("state", TaskState.WORKING)
    event = status_update(t["id"], t["contextId"], state, extra.get("text"))
    body = {**ask(instance), "after": extra.get("after", entry["lastSeq"]), "events": events_to_wire([event])}
    resp = await c.post(f"/workers/v1/tasks/{t['id']}/events", json=body, headers=worker())
    assert resp.status_code == 200, resp.text
    return int(resp.json()["lastSeq"])


async def put(
    c: httpx.AsyncClient, task_id: str, data: bytes, instance: str = "i1", key: str = BOX, **kw: Any
) -> httpx.Response:
    body = kw.pop("content", None)
    return await c.put(
        f"/workers/v1/tasks/{task_id}/checkpoint",
        params=ask(instance),
        content=checkpoint_to_wire(data, MANIFEST) if body is None else body,
        headers={**worker(key), "Content-Type": CHECKPOINT_TYPE},
        **kw,
    )


async def get(c: httpx.AsyncClient, task_id: str, instance: str = "i1", key: str = BOX) -> httpx.Response:
    return await c.get(f"/workers/v1/tasks/{task_id}/checkpoint", params=ask(instance), headers=worker(key))


def error(resp: httpx.Response, status: int, code: str) -> str:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["code"] == code and err["message"], resp.text
    return str(err["message"])


async def test_a_checkpoint_round_trips_stored_under_the_owner(replica: Replica) -> None:
    c = replica.client
    task_id = (await claimed(c))["task"]["id"]
    data = os.urandom(1500)  # over MAX_BODY_BYTES (1,024), within CHECKPOINT_MAX_MB
    assert (await put(c, task_id, data)).status_code == 204
    again = os.urandom(1600)
    assert (await put(c, task_id, again)).status_code == 204, "a later save replaces it"
    resp = await get(c, task_id)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == CHECKPOINT_TYPE
    assert checkpoint_from_wire(resp.content) == (MANIFEST, again)
    assert resp.headers["x-a2a-checkpoint-holder"] == "worker:box:i1"
    assert datetime.fromisoformat(resp.headers["x-a2a-checkpoint-taken-at"]).tzinfo is not None
    store = RunCheckpoints(replica.engine, CAP)
    mine = await store.load(task_id, "alice")
    assert mine is not None and (mine.data, mine.manifest, mine.holder) == (again, MANIFEST, "worker:box:i1")
    assert await store.load(task_id, "box") is None, "never stored under the worker's principal"
    assert await store.load(task_id, "bob") is None


async def test_only_the_holding_instance_reaches_it(replica: Replica) -> None:
    c = replica.client
    entry = await claimed(c)
    task_id = entry["task"]["id"]
    assert (await put(c, task_id, b"mine")).status_code == 204
    for instance, key in (("i2", BOX), ("i1", OTHER)):
        error(await put(c, task_id, b"theirs", instance, key), 409, "not_held")
        message = error(await get(c, task_id, instance, key), 409, "not_held")
        assert "mine" not in message and "alice" not in message
    resp = await get(c, task_id)
    assert checkpoint_from_wire(resp.content)[1] == b"mine", "nothing was changed by the others"
    for task in ("no-such-task", task_id):
        if task == task_id:  # the run ends: its checkpoint is out of the worker's reach
            await working(c, entry)
            await working(c, entry, state=TaskState.COMPLETED, after=entry["lastSeq"] + 1)
        error(await put(c, task, b"late"), 409, "not_held")
        error(await get(c, task), 409, "not_held")


async def test_too_large_malformed_and_none(replica: Replica) -> None:
    c = replica.client
    task_id = (await claimed(c))["task"]["id"]
    error(await get(c, task_id), 404, "no_checkpoint")
    over = os.urandom(CAP + 1)
    assert "CHECKPOINT_MAX_MB" in error(await put(c, task_id, over), 413, "too_large")

    async def streamed() -> AsyncIterator[bytes]:  # no Content-Length: read only up to the bound
        body = checkpoint_to_wire(os.urandom(4096), MANIFEST)
        for at in range(0, len(body), 512):
            yield body[at : at + 512]
        yield os.urandom(2 * 1024 * 1024)

    chunked = await put(c, task_id, b"", content=streamed())  # refused by the edge's bound, in its shape
    assert chunked.status_code == 413 and "exceeds" in chunked.json()["error"]["message"], chunked.text
    elsewhere = await c.post(  # only the checkpoint upload may pass MAX_BODY_BYTES
        f"/workers/v1/tasks/{task_id}/events",
        content=json.dumps({**ask(), "after": 1, "events": [], "pad": "x" * 1500}),
        headers={**worker(), "Content-Type": "application/json"},
    )
    assert elsewhere.status_code == 413, elsewhere.text
    for bad in (b"no newline at all", b"[1, 2]\nx", b"{not json\nx"):
        assert "Invalid checkpoint" in error(await put(c, task_id, b"", content=bad), 400, "invalid")
    error(await get(c, task_id), 404, "no_checkpoint")
    assert await RunCheckpoints(replica.engine, CAP).load(task_id, "alice") is None


async def test_a_corrupt_checkpoint_is_a_clear_error(replica: Replica) -> None:
    c = replica.client
    task_id = (await claimed(c))["task"]["id"]
    assert (await put(c, task_id, b"whole archive")).status_code == 204
    async with replica.engine.begin() as conn:
        await conn.execute(
            update(task_checkpoints)
            .where(task_checkpoints.c.task_id == task_id)
            .values(data=b"whole archivX")
        )
    assert "corrupt" in error(await get(c, task_id), 422, "unusable")


def remote(replica: Replica, task_id: str, instance: str = "i1", max_bytes: int = CAP) -> RemoteCheckpoints:
    transport = httpx.ASGITransport(app=replica.app)
    server = Server("http://replica", worker(), "coder", instance, transport=transport)
    return RemoteCheckpoints(server, task_id, max_bytes)


async def test_the_workers_remote_checkpoints(replica: Replica) -> None:
    c = replica.client
    task_id = (await claimed(c))["task"]["id"]
    mine = remote(replica, task_id)
    assert await mine.load() is None
    await mine.save(b"archive", {"session": "s-2"})
    got = await mine.load()
    assert got is not None and (got.data, got.manifest, got.holder) == (
        b"archive",
        {"session": "s-2"},
        "worker:box:i1",
    )
    with pytest.raises(CheckpointError, match="CHECKPOINT_MAX_MB"):
        await mine.save(os.urandom(CAP + 1), {})
    with pytest.raises(CheckpointError, match="CHECKPOINT_MAX_MB"):  # a worker allowing more than the server
        await remote(replica, task_id, max_bytes=10 * CAP).save(os.urandom(CAP + 1), {})
    with pytest.raises(CheckpointError, match="not running at this worker"):
        await remote(replica, task_id, "i2").save(b"x", {})
    with pytest.raises(CheckpointError, match="not running at this worker"):
        await remote(replica, task_id, "i2").load()
    assert (await mine.load()) == got, "the refused saves changed nothing"


async def test_requeue_hands_a_working_task_on(replica: Replica) -> None:
    c = replica.client
    entry = await claimed(c)
    task_id = entry["task"]["id"]
    path = f"/workers/v1/tasks/{task_id}/requeue"
    why = "Worker box:i1 shut down while this task was running."
    error(await c.post(path, json={**ask(), "reason": why}, headers=worker()), 409, "lost")  # not working yet
    await working(c, entry)
    none = await c.post(path, json={**ask(), "reason": why}, headers=worker())
    assert none.status_code == 200 and none.json()["handedOn"] is False, "no checkpoint: the worker fails it"
    assert (await put(c, task_id, b"state")).status_code == 204
    error(await c.post(path, json={**ask("i2"), "reason": why}, headers=worker()), 409, "lost")
    error(await c.post(path, json={**ask(), "reason": ""}, headers=worker()), 400, "invalid")
    done = await c.post(path, json={**ask(), "reason": why}, headers=worker())
    assert done.status_code == 200 and done.json() == {"handedOn": True}, done.text
    error(await get(c, task_id), 409, "not_held")
    got = await c.post("/workers/v1/claim", json={**ask("i2"), "limit": 1}, headers=worker())
    [next_run] = got.json()["tasks"]
    assert next_run["task"]["id"] == task_id
    assert next_run["task"]["status"]["state"] == TaskState.WORKING.value
    resume = resume_of(next_run["task"]["history"][-1].get("metadata"))
    assert resume is not None and (resume["attempt"], resume["previous"]) == (2, "worker box:i1"), next_run
    assert why in resume["reason"]
    resp = await get(c, task_id, "i2")
    assert checkpoint_from_wire(resp.content)[1] == b"state", "the next holder reads what the first saved"
    rpc = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task_id}}
    task = (await c.post("/agents/coder/a2a/jsonrpc", json=rpc, headers=key_of("alice"))).json()["result"]
    assert [a["attempt"] for a in task["metadata"]["attempts"]] == [2]
    assert json.dumps(task).count(why) >= 1

"""Remote workers: a role served only by `a2a-server worker` processes that connect out over HTTP.

Two replicas behind nginx on PostgreSQL and Redis, one running the role `reviewer`, the other the role
`implementer`; the role `triager` runs only in a worker connected through nginx with a worker key. Tasks sent
through nginx run only where their role runs. Tasks sent to the triager run in the worker (streamed,
multi-turn, canceled); killing the worker mid-task ends its task with a reason naming it; killing the
replica the worker talks to loses and doubles no event; the worker key opens only the worker endpoints and
an A2A key does not open them.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import httpx
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from httpx_sse import aconnect_sse

from app.api.edge.auth import hash_key
from tests.cluster.test_chaos_load import ENDED, event_log
from tests.conftest import migrated_pg_database
from tests.support import worker as workers
from tests.support.auth import KEYS, api_keys_env, key_of
from tests.support.cluster import Cluster, Replica
from tests.support.secrets import remember
from tests.support.worker import WorkerProcess

WORKER_KEY = "worker-" + os.urandom(8).hex()
remember(WORKER_KEY)
AGENTS = {
    "reviewer": {"adapter": "scripted"},
    "implementer": {"adapter": "scripted", "card": {"name": "Implementer"}},
    "triager": {"adapter": "scripted", "card": {"name": "Triager"}},
}
POOLS = ("reviewer", "implementer")
"""The role each replica runs, by index."""


class Pools(Cluster):
    """Each replica runs one role's agents (`AGENT_ROLES`), all of them serve every role."""

    def replica_env(self, replica: Replica) -> dict[str, str]:
        return {**super().replica_env(replica), "AGENT_ROLES": POOLS[replica.index]}


TRIAGER = "/agents/triager"
WAIT_S = 90


@pytest.fixture
async def team(tmp_path: Path) -> AsyncIterator[tuple[Cluster, WorkerProcess, str]]:
    pg, redis = os.environ.get("TEST_POSTGRES_URL"), os.environ.get("TEST_REDIS_URL")
    if not pg or not redis:
        pytest.skip("TEST_POSTGRES_URL and TEST_REDIS_URL are not set: `make test` starts both")
    db = await migrated_pg_database(pg)
    env = api_keys_env(
        AGENTS=json.dumps(AGENTS),
        WORKER_KEYS=json.dumps({hash_key(WORKER_KEY): "dev-vm"}),
        # Long enough that a worker's renewal through nginx on a busy machine is never late; the killed
        # worker's task is still reaped well within WAIT_S.
        LEASE_TTL_S="10",
        QUEUE_POLL_S="0.5",
        DISCOVERY_HEARTBEAT_S="1",
        # A live worker stays listed through a busy machine's stalls (ten heartbeats); a killed one leaves
        # the listing within it, which the test that kills it waits for.
        DISCOVERY_MAX_AGE_S="10",
        ROLE_WAIT_S="2",
    )
    cl = Pools(db, redis, tmp_path / "cluster", 2, grpc=True, migrated=True, **env)
    await asyncio.to_thread(cl.start)
    worker = WorkerProcess(
        cl.nginx_url,
        tmp_path / "worker.log",
        "vm1",
        key=WORKER_KEY,
        agents={"triager": AGENTS["triager"]},
        role="triager",
    )
    worker.start()
    try:
        # Ready means listed: a send before the worker's first announcement would wait ROLE_WAIT_S for an
        # instance and fail on a machine where the worker's start-up takes longer than that.
        try:
            await until_listed(cl.nginx_url, "triager", True)
        except TimeoutError:
            pytest.fail(f"the worker was never listed in GET /agents; its log ends:\n{worker.log()[-4000:]}")
        yield cl, worker, db.replace("postgresql+asyncpg://", "postgresql://")
    finally:
        worker.stop()
        await asyncio.to_thread(cl.stop)


async def rpc(base: str, method: str, params: dict[str, Any], who: str = "alice") -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        async with asyncio.timeout(WAIT_S):
            while True:
                try:
                    resp = await c.post(f"{TRIAGER}/a2a/jsonrpc", json=body, headers=key_of(who))
                    if resp.status_code == 200 and "result" in resp.json():
                        return resp.json()["result"]
                    if resp.status_code == 200:
                        raise AssertionError(resp.json())
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)


def msg(text: str, **extra: Any) -> dict[str, Any]:
    mid = f"m-{os.urandom(4).hex()}"
    return {
        "kind": "message",
        "messageId": mid,
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
        **extra,
    }


async def until(base: str, task_id: str, states: set[str]) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        while (task := await rpc(base, "tasks/get", {"id": task_id}))["status"]["state"] not in states:
            await asyncio.sleep(0.1)
    return task


async def follow(base: str, task_id: str) -> tuple[int, list[int]]:
    """Alice follows the task by SSE to its end, resuming by Last-Event-ID; the snapshot's event number
    and the numbers of the events after it."""
    events: list[tuple[int, dict[str, Any]]] = []
    body = {"jsonrpc": "2.0", "id": 7, "method": "tasks/resubscribe", "params": {"id": task_id}}
    async with asyncio.timeout(WAIT_S), httpx.AsyncClient(timeout=httpx.Timeout(30, read=60)) as c:
        while not events or not (
            events[-1][1].get("final") or events[-1][1].get("status", {}).get("state") in ENDED
        ):
            headers = {**key_of("alice"), **({"Last-Event-ID": str(events[-1][0])} if events else {})}
            try:
                async with aconnect_sse(c, "POST", f"{base}/a2a/jsonrpc", json=body, headers=headers) as src:
                    assert src.response.status_code == 200, src.response.status_code
                    async for sse in src.aiter_sse():
                        if sse.data:
                            events.append((int(sse.id), json.loads(sse.data)["result"]))
            except httpx.HTTPError:
                await asyncio.sleep(0.2)
    return events[0][0], [seq for seq, _ in events[1:]]


def texts(task: dict[str, Any]) -> list[str]:
    return [p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"] if "text" in p]


async def running(cl: Cluster) -> int:
    total = 0
    async with httpx.AsyncClient(timeout=10) as c:
        for url in cl.urls:
            total += (await c.get(f"{url}/healthz")).json()["runningAgents"]
    return total


async def test_the_worker_runs_its_roles_tasks_streams_answers_and_cancels(
    team: tuple[Cluster, WorkerProcess, str],
):
    cl, worker, pg = team
    base = cl.nginx_url
    done = await rpc(base, "message/send", {"message": msg("say:hello;chunks:5;tool:Read")})
    assert done["status"]["state"] == "completed", done["status"]
    assert "chunk-4 " in "".join(texts(done))
    assert await running(cl) == 0, "no replica ran the triager's agent"
    assert "worker:dev-vm:vm1 serving role triager" in worker.log()

    # Streamed to a client that resumes through nginx: exactly the task's event log.
    task = await rpc(
        base,
        "message/send",
        {"message": msg(";".join(["chunks:2", "sleep:0.1"] * 15)), "configuration": {"blocking": False}},
    )
    snapshot, seen = await follow(base + TRIAGER, task["id"])
    log = await event_log(pg, task["id"])
    assert seen == [s for s in log if s > snapshot]

    # Multi-turn: the answer, sent to a replica, reaches the waiting run in the worker.
    asked = await rpc(base, "message/send", {"message": msg("ask:go on?;say:after")})
    assert asked["status"]["state"] == "input-required"
    answered = await rpc(base, "message/send", {"message": msg("yes", taskId=asked["id"])})
    assert answered["status"]["state"] == "completed", answered["status"]
    assert texts(answered)[-2:] == ["answer:yes", "after"]

    # Cancel, while the worker streams (its events and the cancel race for the same event numbers): the task
    # ends canceled and the worker stops its agent at once.
    chatty = ";".join(["chunks:1", "sleep:0.02"] * 1500)
    long = await rpc(base, "message/send", {"message": msg(chatty), "configuration": {"blocking": False}})
    await until(base, long["id"], {"working"})
    canceled = await rpc(base, "tasks/cancel", {"id": long["id"]})
    assert canceled["status"]["state"] == "canceled"
    async with asyncio.timeout(WAIT_S):
        while f"task {long['id']} was ended or taken over" not in worker.log():
            await asyncio.sleep(0.1)


async def test_the_workers_usage_is_recorded_priced_and_summed(team: tuple[Cluster, WorkerProcess, str]):
    """A worker's run reports usage on its events (priced by the worker's own price table, the built-in
    one here); the replica that takes them records the rows and sums the task's metadata as for its own,
    and a task's budget ends it at the report that passes it."""
    cl, _, pg = team
    base = cl.nginx_url
    asked = await rpc(
        base, "message/send", {"message": msg("usage:gpt-5:1000:100;tool:Read;ask:go?;usage:m:1:1:0.5")}
    )
    assert asked["status"]["state"] == "input-required"
    done = await rpc(base, "message/send", {"message": msg("yes", taskId=asked["id"])})
    assert done["status"]["state"] == "completed", done["status"]
    usage = done["metadata"]["usage"]
    assert (usage["reports"], usage["inputTokens"], usage["outputTokens"], usage["toolCalls"]) == (
        2,
        1001,
        101,
        1,
    )
    assert usage["models"]["gpt-5"]["costSource"] == "price-table"
    assert usage["costUsd"] == pytest.approx((1000 * 1.25 + 100 * 10) / 1_000_000 + 0.5)
    conn = await asyncpg.connect(pg)
    try:
        rows = await conn.fetch(
            "SELECT model, role, owner, input_tokens FROM task_usage WHERE task_id=$1 ORDER BY seq",
            done["id"],
        )
    finally:
        await conn.close()
    assert [tuple(r) for r in rows] == [("gpt-5", "triager", "alice", 1000), ("m", "triager", "alice", 1)]
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        by_role = (await c.get("/usage", params={"by": "role"}, headers=key_of("alice"))).json()
    assert {g["role"]: g["inputTokens"] for g in by_role["groups"]}["triager"] >= 1001

    # A budget holds for the worker's runs: the report that passes it ends the task.
    spend = ";".join(["usage:m:1:1:0.02"] * 3 + ["sleep:60"])
    spent = await rpc(base, "message/send", {"message": msg(spend, metadata={"budgetUsd": 0.05})})
    assert spent["status"]["state"] == "failed", spent["status"]
    assert "spent $0.06 against its budget of $0.05" in spent["status"]["message"]["parts"][0]["text"]
    assert spent["metadata"]["usage"]["reports"] == 3


async def test_a_killed_worker_ends_its_task_with_a_reason_naming_it(
    team: tuple[Cluster, WorkerProcess, str],
):
    cl, worker, _ = team
    base = cl.nginx_url
    task = await rpc(
        base, "message/send", {"message": msg("say:start;sleep:60"), "configuration": {"blocking": False}}
    )
    await until(base, task["id"], {"working"})
    worker.kill()
    failed = await until(base, task["id"], {"failed", "completed", "canceled"})
    reason = " ".join(p.get("text", "") for p in failed["status"]["message"]["parts"])
    assert failed["status"]["state"] == "failed"
    assert reason.startswith("Worker dev-vm:vm1 running this task stopped renewing its lease"), reason


async def test_a_replica_killed_under_the_worker_loses_and_doubles_nothing(
    team: tuple[Cluster, WorkerProcess, str],
):
    cl, _, pg = team
    base = cl.nginx_url
    script = ";".join(["chunks:3", "sleep:0.1"] * 40)
    task = await rpc(base, "message/send", {"message": msg(script), "configuration": {"blocking": False}})
    await until(base, task["id"], {"working"})
    await asyncio.sleep(1)  # mid-stream: the worker is handing events over through both replicas
    await asyncio.to_thread(cl.kill, 0)
    done = await until(base, task["id"], {"completed", "failed"})
    assert done["status"]["state"] == "completed", done["status"]
    chunks = [t for t in texts(done) if t.startswith("chunk-")]
    assert "".join(chunks).count("chunk-2 ") == 40, "every chunk once"
    log = await event_log(pg, task["id"])
    assert log == list(range(1, len(log) + 1))
    conn = await asyncpg.connect(pg)
    try:
        kinds = [
            r["kind"]
            for r in await conn.fetch("SELECT kind FROM events WHERE task_id=$1 ORDER BY seq", task["id"])
        ]
    finally:
        await conn.close()
    assert kinds.count("artifact") >= 120


async def test_a_worker_key_opens_only_the_worker_endpoints(team: tuple[Cluster, WorkerProcess, str]):
    cl, _, _ = team
    worker_h = {"X-API-Key": WORKER_KEY}
    async with httpx.AsyncClient(base_url=cl.nginx_url, timeout=30) as c:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}
        for path in ("/a2a/jsonrpc", f"{TRIAGER}/a2a/jsonrpc"):
            assert (await c.post(path, json=body, headers=worker_h)).status_code == 403
        assert (
            await c.get("/a2a/rest/tasks/x", headers={**worker_h, "A2A-Version": "1.0"})
        ).status_code == 403
        who = {"role": "triager", "instance": "probe"}
        assert (await c.get("/workers/v1/whoami", params=who, headers=worker_h)).status_code == 200
        assert (await c.get("/workers/v1/whoami", params=who, headers=key_of("alice"))).status_code == 403
        assert (await c.get("/workers/v1/whoami", params=who)).status_code == 401
        claim = {"role": "triager", "instance": "probe", "limit": 1}
        assert (
            await c.post("/workers/v1/claim", json=claim, headers={"X-API-Key": KEYS["bob"]})
        ).status_code == 403
    port = cl.replicas[0].grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await a2a_pb2_grpc.A2AServiceStub(ch).GetTask(
                a2a_pb2.GetTaskRequest(id="x"), metadata=(("x-api-key", WORKER_KEY),), timeout=30
            )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def listing(base: str) -> dict[str, Any]:
    return await workers.listing(base, key_of("alice"))


async def until_listed(base: str, role: str, available: bool) -> dict[str, Any]:
    return await workers.until_listed(base, role, available, key_of("alice"), WAIT_S)


async def test_discovery_lists_the_worker_and_a_role_without_instances_refuses_work(
    team: tuple[Cluster, WorkerProcess, str],
):
    cl, worker, _ = team
    base = cl.nginx_url
    found = await until_listed(base, "triager", True)
    instances = {(a["role"], a["instance_id"], a["kind"]) for a in found["agents"]}
    assert instances == {
        ("reviewer", "a2a-1", "replica"),
        ("implementer", "a2a-2", "replica"),
        ("triager", "dev-vm:vm1", "worker"),
    }, found
    for url in cl.urls:  # any replica lists every live instance
        assert {a["name"] for a in (await listing(url))["agents"]} == {a["name"] for a in found["agents"]}
    listed = next(a for a in found["agents"] if a["kind"] == "worker")
    assert listed["name"] == "triager:dev-vm:vm1" and listed["slots"] == 4
    assert listed["card_url"].endswith("/agents/triager/.well-known/agent-card.json")
    assert "routing" in found["routing_note"].lower() or "role" in found["routing_note"]

    # Every instance of the role gone: unavailable within the maximum age, and a send fails after ROLE_WAIT_S.
    worker.kill()
    await until_listed(base, "triager", False)
    refused = await rpc(base, "message/send", {"message": msg("say:never")})
    assert refused["status"]["state"] == "failed", refused["status"]
    reason = " ".join(p.get("text", "") for p in refused["status"]["message"]["parts"])
    assert "No agent of the role 'triager' is available" in reason, reason

    # A restarted instance takes new work.
    worker.start()
    await until_listed(base, "triager", True)
    done = await rpc(base, "message/send", {"message": msg("say:back")})
    assert done["status"]["state"] == "completed", done["status"]

    # A worker that stops cleanly leaves the listing at once (no wait for the maximum age).
    worker.stop()
    found = await listing(base)
    assert not [a for a in found["agents"] if a["kind"] == "worker"], found


async def test_tasks_sent_through_nginx_run_only_where_their_role_runs(
    team: tuple[Cluster, WorkerProcess, str],
):
    cl, _, _ = team
    for path, runner in (("", 0), ("/agents/implementer", 1)):
        # The run waits on its user (a waiting run counts in runningAgents) until the counts are read.
        body = {"message": msg("say:start;ask:go?;say:end"), "configuration": {"blocking": False}}
        send = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": body}
        async with httpx.AsyncClient(base_url=cl.nginx_url, timeout=30) as c:
            task_id = (await c.post(f"{path}/a2a/jsonrpc", json=send, headers=key_of("alice"))).json()[
                "result"
            ]["id"]
            async with asyncio.timeout(WAIT_S):
                while not sum(
                    counts := [(await c.get(f"{u}/healthz")).json()["runningAgents"] for u in cl.urls]
                ):
                    await asyncio.sleep(0.05)
            assert counts[runner] == 1 and counts[1 - runner] == 0, (path, counts)
            asking = {"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {"id": task_id}}
            async with asyncio.timeout(WAIT_S):
                while (await c.post(f"{path}/a2a/jsonrpc", json=asking, headers=key_of("alice"))).json()[
                    "result"
                ]["status"]["state"] != "input-required":
                    await asyncio.sleep(0.1)
            answer = {"message": msg("go", taskId=task_id), "configuration": {"blocking": False}}
            body = {"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": answer}
            answered = (await c.post(f"{path}/a2a/jsonrpc", json=body, headers=key_of("alice"))).json()
            assert "result" in answered, answered
            get = {"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task_id}}
            async with asyncio.timeout(WAIT_S):
                while True:
                    task = (await c.post(f"{path}/a2a/jsonrpc", json=get, headers=key_of("alice"))).json()[
                        "result"
                    ]
                    if task["status"]["state"] == "completed":
                        break
                    await asyncio.sleep(0.1)
